"""Each dialect's faults (tests/faulty/dialects.py), over real sockets, classified by the
dialect trackers: complete streams ok, cuts and missing terminal events truncated, error
events error_event, other incomplete reasons not ok, keep-alives stalled, nothing cancelled."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from streamslo.stream.dialects import tracker_for
from streamslo.stream.timing import StreamRecord
from streamslo.stream.truth import ForcedLength
from streamslo.transport.sync import ClientLimits, Target, stream_sse
from streamslo.workload.requests import RequestOptions, build_body
from tests.faulty.dialects import DIALECT_EXPECTED
from tests.faulty.server import REQUEST_TIMEOUT_S, STALL_TIMEOUT_S

MAX_TOKENS = 8
LIMITS = ClientLimits(stall_timeout=STALL_TIMEOUT_S, request_timeout=REQUEST_TIMEOUT_S)
CASES = sorted(DIALECT_EXPECTED)


def run_case(base_url: str, scenario: str, api: str, **kw: object) -> StreamRecord:
    opts = RequestOptions(api=api, model=scenario, max_tokens=MAX_TOKENS, **kw)  # type: ignore[arg-type]
    rec = StreamRecord(f"{scenario}-{api}", "sse", "test", time.time(), time.perf_counter())
    tracker = tracker_for(api, rec, opts.expectations())
    stream_sse(
        Target.from_url(base_url), opts.path, build_body(opts, "hello there"), tracker, LIMITS
    )
    return rec


@pytest.fixture(scope="module")
def matrix(faulty_server) -> dict[tuple[str, str], StreamRecord]:
    with ThreadPoolExecutor(max_workers=len(CASES)) as pool:
        futures = {case: pool.submit(run_case, faulty_server.base_url, *case) for case in CASES}
        return {case: f.result(timeout=60) for case, f in futures.items()}


@pytest.mark.parametrize("case", CASES, ids=[f"{s}-{a}" for s, a in CASES])
def test_outcome(matrix, case):
    rec = matrix[case]
    assert rec.outcome == DIALECT_EXPECTED[case], f"{case}: got {rec.outcome} ({rec.error})"
    assert rec.outcome != "cancelled"


@pytest.mark.parametrize("api", ["openai-responses", "anthropic-messages"])
def test_ok_counts(matrix, api):
    rec = matrix[("ok", api)]
    assert rec.tokens == MAX_TOKENS == rec.usage_completion_tokens
    assert rec.usage_prompt_tokens == 3
    if api == "openai-responses":
        assert rec.cached_tokens == 0  # input_tokens_details.cached_tokens
    assert len(rec.gap_s) == MAX_TOKENS - 1
    assert rec.ttfo_s == rec.ttft_s
    assert rec.reasoning_tokens == rec.tool_tokens == 0
    assert rec.ttftc_s is None
    assert rec.finish_reason == ("max_output_tokens" if api == "openai-responses" else "max_tokens")


@pytest.mark.parametrize("api", ["openai-responses", "anthropic-messages"])
def test_reasoning_and_tool_tokens(matrix, api):
    rec = matrix[("ok_reasoning", api)]
    assert rec.tokens == MAX_TOKENS
    assert rec.reasoning_tokens == 2 and rec.tool_tokens == 2
    assert rec.ttfo_s is not None and rec.ttft_s is not None
    assert rec.ttfo_s - rec.ttft_s >= 0.009  # two reasoning tokens, 5 ms apart at least
    assert (
        rec.ttftc_s is not None and rec.ttftc_s > rec.ttfo_s
    )  # the tool call comes after the answer


@pytest.mark.parametrize("api", ["openai-responses", "anthropic-messages"])
def test_error_message_kept(matrix, api):
    assert "faulty: engine died" in matrix[("error_midway", api)].error
    assert "faulty" in matrix[("failed", api)].error


@pytest.mark.parametrize("api", ["openai-responses", "anthropic-messages"])
def test_keepalive_stalls_in_time_and_says_why(matrix, api):
    for name in ("keepalive", "empty_deltas"):
        rec = matrix[(name, api)]
        assert rec.e2e_s is not None and rec.e2e_s < STALL_TIMEOUT_S + 1.0, rec.e2e_s
        assert "kept the connection alive" in rec.error and "events" in rec.error, rec.error
        assert rec.open_gap and rec.gap_s[-1] >= STALL_TIMEOUT_S * 0.9


@pytest.mark.parametrize("api", ["openai-responses", "anthropic-messages"])
def test_natural_end_is_ok_without_a_forced_length(faulty_server, api):
    rec = run_case(faulty_server.base_url, "natural_end", api, forced=ForcedLength.NONE)
    assert rec.outcome == "ok", rec.error
    rec = run_case(faulty_server.base_url, "filtered", api, forced=ForcedLength.NONE)
    assert rec.outcome == "silent_truncation", rec.error
