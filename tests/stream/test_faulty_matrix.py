"""Every stream outcome (docs/outcomes.md), produced on purpose by the faulty server on both
transports, hostile cases included, classified by the shared core over real sockets (no
Locust: the transports alone)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from streamslo.stream.timing import StreamRecord
from streamslo.stream.tracker import StreamTracker
from streamslo.transport.sync import ClientLimits, Target, WSConnection, stream_sse
from streamslo.workload.requests import RequestOptions, build_body
from tests.faulty.scenarios import HOSTILE, client_timeouts
from tests.faulty.server import EXPECTED, REQUEST_TIMEOUT_S, STALL_TIMEOUT_S

MAX_TOKENS = 8
LIMITS = ClientLimits(stall_timeout=STALL_TIMEOUT_S, request_timeout=REQUEST_TIMEOUT_S)


def limits_for(scenario: str) -> ClientLimits:
    """:data:`LIMITS` where a timer decides the scenario's outcome; elsewhere timers a starved
    reader never meets (tests/faulty/scenarios.py, ``client_timeouts``)."""
    stall, request = client_timeouts(scenario)
    return ClientLimits(stall_timeout=stall, request_timeout=request)


CASES = sorted(EXPECTED)
#: Streams in flight at once against the faulty server (see ``matrix``).
CONCURRENT = 8


def run_case(
    base_url: str,
    scenario: str,
    protocol: str,
    done_marker: bool = True,
    limits: ClientLimits = LIMITS,
) -> StreamRecord:
    target = Target.from_url(f"{base_url}/s/{scenario}")
    opts = RequestOptions(model=scenario, max_tokens=MAX_TOKENS, done_marker=done_marker)
    rec = StreamRecord(f"{scenario}-{protocol}", protocol, "test", time.time(), time.perf_counter())
    tracker = StreamTracker(rec, opts.expectations())
    body = build_body(opts, "hello")
    if protocol == "ws":
        conn = WSConnection(target, "/v1/ws", limits)
        try:
            conn.request(body, tracker)
        finally:
            conn.close()
    else:
        stream_sse(target, opts.path, body, tracker, limits)
    return rec


@pytest.fixture(scope="module")
def matrix(faulty_server) -> dict[tuple[str, str], StreamRecord]:
    """Every case, in two batches: the hostile cases (floods at full speed) apart, so they do
    not slow the server's clock for the timing-sensitive ones (stall, timeout). At most
    ``CONCURRENT`` streams at a time: all of them at once (about 40 a batch) left a loaded
    machine's server more than the 1 s stall timeout behind, and every case came out stalled."""
    out: dict[tuple[str, str], StreamRecord] = {}
    for batch in ([c for c in CASES if c[0] not in HOSTILE], [c for c in CASES if c[0] in HOSTILE]):
        with ThreadPoolExecutor(max_workers=min(len(batch), CONCURRENT)) as pool:
            futures = {
                case: pool.submit(
                    run_case, faulty_server.base_url, *case, limits=limits_for(case[0])
                )
                for case in batch
            }
            out.update({case: f.result(timeout=300) for case, f in futures.items()})
    return out


@pytest.mark.parametrize("case", CASES, ids=[f"{s}-{p}" for s, p in CASES])
def test_outcome(matrix, case):
    rec = matrix[case]
    assert rec.outcome == EXPECTED[case], f"{case}: got {rec.outcome} ({rec.error})"


def test_every_outcome_is_produced_on_both_transports():
    produced = {(o, p) for (_, p), o in EXPECTED.items()}
    for outcome in (
        "ok",
        "truncated",
        "silent_truncation",
        "error_event",
        "malformed",
        "stalled",
        "timeout",
        "http_4xx",
        "http_5xx",
        "connect_error",
    ):
        for proto in ("sse", "ws"):
            assert (outcome, proto) in produced, f"no faulty scenario yields {outcome} on {proto}"


def test_ok_stream_counts(matrix):
    rec = matrix[("ok", "sse")]
    assert rec.tokens == MAX_TOKENS
    assert rec.usage_completion_tokens == MAX_TOKENS
    assert rec.finish_reason == "length"
    assert len(rec.gap_s) == MAX_TOKENS - 1
    assert not rec.open_gap


def test_timed_stream_records(faulty_server):
    """The timed stream's record on both transports: a first token no earlier than the server
    sends it, one gap per later token, and the docs/timing.md invariant. (Its times against the
    server's clock, within 40 ms, hold on a quiet machine only: tests/bench/test_faulty_timing.py,
    ``tox -e bench``.)"""
    from tests.faulty.server import TIMED_TTFT_S

    for proto in ("sse", "ws"):
        rec = run_case(faulty_server.base_url, "timed", proto)
        assert rec.outcome == "ok"
        assert rec.ttft_s is not None and rec.ttft_s >= TIMED_TTFT_S * 0.9
        assert len(rec.gap_s) == MAX_TOKENS - 1 and all(g >= 0 for g in rec.gap_s)
        # docs/timing.md invariant: the gaps add up to the time from the first to the last token.
        assert sum(rec.gap_s) == pytest.approx(rec.gap_t[-1] - (rec.t0 + rec.ttft_s), abs=1e-9)


def test_stall_adds_open_gap(matrix):
    rec = matrix[("stall_midway", "sse")]
    if rec.outcome != "stalled":
        candidates = [
            r for (s, p), r in matrix.items() if p == "sse" and r.outcome == "stalled" and r.tokens
        ]
        assert candidates, "a stall after some tokens is in the catalogue"
        rec = candidates[0]
    assert rec.open_gap
    assert rec.gap_s[-1] >= STALL_TIMEOUT_S * 0.9


def test_no_done_marker_mode(faulty_server):
    rec = run_case(faulty_server.base_url, "no_done", "sse", done_marker=False)
    assert rec.outcome == "ok", rec.error


def test_connect_refused():
    from tests.faulty.process import unused_port

    rec = run_case(f"http://127.0.0.1:{unused_port()}", "ok", "sse")
    assert rec.outcome == "connect_error"
    rec = run_case(f"http://127.0.0.1:{unused_port()}", "ok", "ws")
    assert rec.outcome == "connect_error"
