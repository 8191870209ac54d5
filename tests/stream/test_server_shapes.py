"""The shapes real servers send, over real sockets against the faulty server: vLLM's held-back
tokens read as complete streams, streams kept alive without tokens end ``stalled`` within the
stall timeout, and each error shape ends with the server's message."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from streamslo.stream.timing import StreamRecord
from streamslo.stream.tracker import StreamTracker
from streamslo.transport.sync import ClientLimits, Target, WSConnection, stream_sse
from streamslo.workload.requests import RequestOptions, build_body
from tests.faulty.scenarios_real import KEEPALIVE, SSE_ERROR_TEXT, TGI_ERROR, VLLM_ERROR

MAX_TOKENS = 8
STALL_S = 1.0
LIMITS = ClientLimits(stall_timeout=STALL_S, request_timeout=20.0)


def run_case(
    base_url: str,
    scenario: str,
    protocol: str,
    endpoint: str = "chat",
    limits: ClientLimits = LIMITS,
    usage: bool = True,
) -> StreamRecord:
    target = Target.from_url(f"{base_url}/s/{scenario}")
    opts = RequestOptions(
        endpoint=endpoint, model=scenario, max_tokens=MAX_TOKENS, include_usage=usage
    )
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


@pytest.mark.parametrize("protocol", ["sse", "ws"])
@pytest.mark.parametrize("endpoint", ["chat", "completions"])
@pytest.mark.parametrize("usage", [True, False])
def test_vllm_held_back_tokens_are_complete(faulty_server, protocol, endpoint, usage):
    rec = run_case(faulty_server.base_url, "ok_vllm_held_back", protocol, endpoint, usage=usage)
    assert rec.outcome == "ok", rec.error
    assert rec.tokens == MAX_TOKENS
    assert len(rec.gap_s) == MAX_TOKENS - 1
    if usage:
        assert rec.usage_completion_tokens == MAX_TOKENS


@pytest.fixture(scope="module")
def kept_alive(faulty_server) -> dict[tuple[str, str, str], StreamRecord]:
    cases = [(s, p, e) for s in KEEPALIVE for p in ("sse", "ws") for e in ("chat", "completions")]
    with ThreadPoolExecutor(max_workers=len(cases)) as pool:
        futures = {c: pool.submit(run_case, faulty_server.base_url, *c) for c in cases}
        return {c: f.result(timeout=60) for c, f in futures.items()}


def test_kept_alive_without_tokens_is_stalled_in_time(kept_alive):
    for (scenario, protocol, endpoint), rec in kept_alive.items():
        where = f"{scenario}/{protocol}/{endpoint}"
        assert rec.outcome == "stalled", f"{where}: {rec.outcome} {rec.error}"
        assert "kept the connection alive" in rec.error, where
        # Stalled within the stall timeout + 1 s of the last token (or of the head).
        last = (
            rec.ttft_s + sum(rec.gap_s[:-1]) if rec.ttft_s is not None else (rec.connect_s or 0.0)
        )
        assert STALL_S * 0.95 <= rec.e2e_s - last <= STALL_S + 1.0, (where, rec.e2e_s, last)
        if scenario == "keepalive_before_first":
            assert rec.tokens == 0 and rec.error.startswith("no first token for 1s"), where
        else:
            assert rec.tokens == MAX_TOKENS // 2 and rec.open_gap, where
    assert "SSE comments" in kept_alive[("keepalive_comments", "sse", "chat")].error
    assert "WebSocket pings" in kept_alive[("keepalive_comments", "ws", "chat")].error
    assert "chunks without a token" in kept_alive[("keepalive_empty_deltas", "sse", "chat")].error
    assert (
        "chunks without a token"
        in kept_alive[("keepalive_empty_deltas", "ws", "completions")].error
    )


@pytest.mark.parametrize("protocol", ["sse", "ws"])
def test_first_token_timeout(faulty_server, protocol):
    """``--first-token-timeout`` bounds head -> first token apart from the stall timeout."""
    limits = ClientLimits(stall_timeout=STALL_S, request_timeout=20.0, first_token_timeout=2.5)
    rec = run_case(faulty_server.base_url, "keepalive_before_first", protocol, limits=limits)
    assert rec.outcome == "stalled"
    assert rec.error.startswith("no first token for 2.5s")
    assert 2.4 <= rec.e2e_s <= 3.6
    # A short bound: the timed scenario's first token comes 0.3 s after the request.
    limits = ClientLimits(stall_timeout=STALL_S, request_timeout=20.0, first_token_timeout=0.1)
    rec = run_case(faulty_server.base_url, "timed", protocol, limits=limits)
    assert rec.outcome == "stalled" and rec.error.startswith("no first token for 0.1s"), rec.error


@pytest.mark.parametrize("protocol", ["sse", "ws"])
@pytest.mark.parametrize(
    ("scenario", "outcome", "message"),
    [
        ("error_vllm_object", "error_event", VLLM_ERROR["message"]),
        ("error_tgi", "error_event", TGI_ERROR["error"]),
        ("error_sse_event", "error_event", SSE_ERROR_TEXT),
        ("error_before_vllm", "http_5xx", VLLM_ERROR["message"]),
        ("error_before_tgi", "http_4xx", "faulty-tgi: Input validation error"),
    ],
)
def test_error_shapes_carry_the_server_message(faulty_server, protocol, scenario, outcome, message):
    rec = run_case(faulty_server.base_url, scenario, protocol)
    assert rec.outcome == outcome, rec.error
    assert message in rec.error


@pytest.mark.parametrize("scenario", ["keepalive_comments", "keepalive_empty_deltas"])
@pytest.mark.parametrize("protocol", ["sse", "ws"])
def test_the_asyncio_probes_measure_stalls_in_tokens(faulty_server, scenario, protocol):
    """verify's probes too: keep-alives do not hold a probe to its deadline."""
    import asyncio

    from streamslo.verify.probes import ProbeRequest, probe_sse, probe_ws

    req = ProbeRequest(
        model=scenario, max_tokens=MAX_TOKENS, stall_timeout_s=STALL_S, request_timeout_s=20.0
    )
    probe = probe_sse if protocol == "sse" else probe_ws
    rec = asyncio.run(
        probe(faulty_server.url(scenario) if protocol == "sse" else faulty_server.base_url, req)
    )
    assert rec.outcome == "stalled", rec.error
    assert rec.e2e_s < STALL_S + 1.5
