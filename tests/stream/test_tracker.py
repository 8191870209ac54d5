"""The outcome state machine and its timings, driven by a scripted clock (no sockets)."""

from __future__ import annotations

import json

import pytest

from streamslo.results.columns import stream_row
from streamslo.stream.timing import StreamExpectations, StreamRecord
from streamslo.stream.tracker import StreamTracker
from tests.stream.feed import Feed


def chunk(
    content: str | None = None, finish: str | None = None, usage: int | None = None, **delta
) -> bytes:
    d = dict(delta)
    if content is not None:
        d["content"] = content
    obj: dict = {"choices": [{"index": 0, "delta": d, "finish_reason": finish}]}
    if usage is not None:
        obj["usage"] = {"completion_tokens": usage}
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


DONE = b"data: [DONE]\n\n"


def sse(
    expect: StreamExpectations,
    reads: list[tuple[float, bytes]],
    end: tuple[float, str] | None = None,
    protocol="sse",
):
    rec = StreamRecord("s", protocol, "T", 1000.0, 10.0)
    tr = Feed(StreamTracker(rec, expect))
    tr.on_connected(10.001)
    tr.on_response(10.002, 200, "text/event-stream; charset=utf-8")
    for t, data in reads:
        tr.on_sse_bytes(t, data)
    if end is not None:
        t, kind = end
        if kind == "eof":
            tr.on_eof(t, True)
        elif kind == "cut":
            tr.on_eof(t, False)
        elif kind == "reset":
            tr.on_transport_error(t, ConnectionResetError("reset"))
        elif kind == "cancel":
            tr.on_cancel(t)
        elif kind == "stall":
            tr.on_stall(t, 1.0)
    return rec


E3 = StreamExpectations(max_tokens=3)


def test_ok_timings_and_invariant():
    rec = sse(
        E3,
        [
            (10.1, chunk(role="assistant")),
            (10.2, chunk("a")),
            (10.25, chunk("b")),
            (10.4, chunk("c", "length", 3) + DONE),
        ],
        (10.5, "eof"),
    )
    assert rec.outcome == "ok"
    assert rec.connect_s == pytest.approx(0.001)
    assert rec.ttft_s == pytest.approx(0.2)  # the role-only chunk is not a token
    assert rec.gap_s == pytest.approx([0.05, 0.15])
    assert rec.e2e_s == pytest.approx(0.4)  # ends at [DONE], not at the socket close
    assert rec.e2e_s - rec.ttft_s == pytest.approx(sum(rec.gap_s))
    assert rec.tpot_s == pytest.approx(0.1)
    assert stream_row(rec)["max_gap_ms"] == pytest.approx(150.0)


def test_cut_stream_adds_open_gap():
    rec = sse(E3, [(10.2, chunk("a")), (10.3, chunk("b"))], (12.0, "cut"))
    assert rec.outcome == "truncated"
    assert rec.gap_s == pytest.approx([0.1, 1.7])
    assert rec.open_gap
    assert rec.e2e_s == pytest.approx(2.0)


def test_stall_is_stalled_and_cancel_is_not_a_failure():
    assert sse(E3, [(10.2, chunk("a"))], (11.2, "stall")).outcome == "stalled"
    rec = sse(E3, [(10.2, chunk("a"))], (10.5, "cancel"))
    assert rec.outcome == "cancelled" and not rec.open_gap


def test_transport_error_after_done_changes_nothing():
    rec = sse(
        E3, [(10.2, chunk("a") + chunk("b") + chunk("c", "length", 3) + DONE)], (10.3, "reset")
    )
    assert rec.outcome == "ok"


@pytest.mark.parametrize(
    ("reads", "outcome"),
    [
        ([chunk("a"), chunk("b", "stop", 2), DONE], "silent_truncation"),  # stop under ignore_eos
        (
            [chunk("a"), chunk("b", "length", 2), DONE],
            "silent_truncation",
        ),  # usage below max_tokens
        ([chunk("a"), chunk("b", "length"), DONE], "silent_truncation"),  # no usage, too few chunks
        ([chunk("a"), chunk("b"), chunk("c", None, 3), DONE], "malformed"),  # no finish_reason
        (
            [chunk("a"), chunk("b"), chunk("c"), chunk("d", "length", 4), DONE],
            "malformed",
        ),  # > max_tokens
        (
            [chunk("a"), chunk("b"), chunk("c", "length", 3), DONE, chunk("x")],
            "malformed",
        ),  # after [DONE]
        ([chunk("a"), b'data: {"error": {"message": "boom", "code": 500}}\n\n'], "error_event"),
        ([b"data: {not json\n\n"], "malformed"),
        ([b'data: {"foo": 1}\n\n'], "malformed"),
    ],
)
def test_terminal_rules(reads, outcome):
    rec = sse(E3, [(10.1 + i / 10, r) for i, r in enumerate(reads)])
    assert rec.outcome == outcome, rec.error


def test_more_chunks_than_usage_is_malformed_before_silent():
    e = StreamExpectations(max_tokens=5, forced_length=False)
    rec = sse(e, [(10.1, chunk("a") + chunk("b") + chunk("c", "stop", 2) + DONE)])
    assert rec.outcome == "malformed"


def test_fewer_chunks_than_usage_without_ignore_eos():
    e = StreamExpectations(max_tokens=5, forced_length=False)
    rec = sse(e, [(10.1, chunk("a") + chunk("b", "stop", 3) + DONE)])
    assert rec.outcome == "silent_truncation"
    rec = sse(e, [(10.1, chunk("a") + chunk("b", "stop", 2) + DONE)])
    assert rec.outcome == "ok"


def test_coalesced_chunks_apply_rule_a_only():
    e = StreamExpectations(max_tokens=6, coalesced_chunks=True)
    rec = sse(e, [(10.1, chunk("ab")), (10.2, chunk("cdef", "length", 6) + DONE)])
    assert rec.outcome == "ok"
    assert stream_row(rec)["tokens"] == 6
    rec = sse(e, [(10.1, chunk("ab")), (10.2, chunk("cd", "length", 4) + DONE)])
    assert rec.outcome == "silent_truncation"


def test_text_in_any_field_is_content():
    e = StreamExpectations(max_tokens=3)
    tool = {"tool_calls": [{"index": 0, "function": {"arguments": "{x"}}]}
    rec = sse(
        e,
        [
            (10.1, chunk(reasoning_content="think")),
            (10.2, chunk(**tool)),
            (10.3, chunk("c", "length", 3) + DONE),
        ],
    )
    assert rec.outcome == "ok" and rec.tokens == 3


def test_completions_text_chunks():
    body = b"".join(
        b"data: "
        + json.dumps({"choices": [{"index": 0, "text": t, "finish_reason": f}]}).encode()
        + b"\n\n"
        for t, f in (("a", None), ("b", None), ("c", "length"))
    )
    assert sse(E3, [(10.1, body + DONE)]).outcome == "ok"


def test_non_event_stream_2xx_is_malformed():
    rec = StreamRecord("s", "sse", "T", 1000.0, 10.0)
    tr = Feed(StreamTracker(rec, E3))
    tr.on_response(10.1, 200, "application/json")
    assert rec.outcome == "malformed"


@pytest.mark.parametrize(
    ("status", "outcome"),
    [(400, "http_4xx"), (429, "http_4xx"), (500, "http_5xx"), (503, "http_5xx")],
)
def test_http_errors(status, outcome):
    rec = StreamRecord("s", "sse", "T", 1000.0, 10.0)
    tr = Feed(StreamTracker(rec, E3))
    tr.on_http_error(
        10.1, status, b'{"error": {"message": "nope", "type": "x", "code": %d}}' % status
    )
    assert rec.outcome == outcome and "nope" in rec.error


@pytest.mark.parametrize(
    ("code", "content_first", "outcome"),
    [
        (1008, False, "http_4xx"),
        (1009, False, "http_4xx"),
        (1013, False, "http_4xx"),
        (1011, False, "http_5xx"),
        (1000, False, "truncated"),
        (1011, True, "truncated"),
        (None, True, "truncated"),
    ],
)
def test_ws_close_codes(code, content_first, outcome):
    rec = StreamRecord("s", "ws", "T", 1000.0, 10.0)
    tr = Feed(StreamTracker(rec, E3))
    tr.on_ws_accepted(10.1)
    if content_first:
        tr.on_ws_text(10.2, chunk("a")[6:-2].decode())
    tr.on_ws_close(10.3, code, "bye")
    assert rec.outcome == outcome


def test_ws_error_frame_before_content_is_by_code():
    rec = StreamRecord("s", "ws", "T", 1000.0, 10.0)
    tr = Feed(StreamTracker(rec, E3))
    tr.on_ws_accepted(10.1)
    tr.on_ws_text(10.2, '{"error": {"message": "slow down", "type": "rate", "code": 429}}')
    assert rec.outcome == "http_4xx"


def test_an_open_stream_holds_16_bytes_per_token_received():
    # A stream keeps its gaps and their times until it is recorded: as Python floats in lists
    # that was 64 bytes a token (a 100-token stream: 6.4 KiB of its ~25 KiB); as doubles, 16.
    import sys
    import tracemalloc

    n = 10_000
    reads = [(10.1 + 0.001 * i, chunk("x")) for i in range(n)]
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        rec = sse(StreamExpectations(max_tokens=n), reads)
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    assert rec.tokens == n and len(rec.gap_s) == len(rec.gap_t) == n - 1
    held = sys.getsizeof(rec.gap_s) + sys.getsizeof(rec.gap_t)
    assert held < 18 * n  # two doubles a token, plus an array's spare room
    grown = sum(s.size_diff for s in after.compare_to(before, "filename"))
    assert grown < 24 * n  # nothing else per token stays: no float objects behind the arrays
