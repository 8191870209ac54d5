"""The dialect trackers, Sans-I/O with a scripted clock: each dialect's events (written by the
faulty server's independent builders) split at every byte boundary give the same outcome and
counts; timings from the clock; token-based stalls; the forced-length rules."""

from __future__ import annotations

import itertools
import json

import pytest

from streamslo.stream.dialects import API_PATHS, tracker_for
from streamslo.stream.exchange import SSEExchange
from streamslo.stream.timing import StreamExpectations, StreamRecord
from tests.faulty.dialects import Event, anthropic_events, responses_events
from tests.stream.drive import REQUEST_TIMEOUT, STALL

N = 6
FORCED = StreamExpectations(max_tokens=N)
FREE = StreamExpectations(max_tokens=N, forced_length=False)
HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def sse(events: list[Event], eol: str = "\n") -> list[bytes]:
    return [f"event: {k}{eol}data: {json.dumps(v)}{eol}{eol}".encode() for k, v in events]


def chunked(parts: list[bytes], end: bool = True) -> bytes:
    body = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts)
    return HEAD + body + (b"0\r\n\r\n" if end else b"")


def events(api: str, **kw: object) -> list[Event]:
    head, tail = (responses_events if api == "openai-responses" else anthropic_events)(N, **kw)  # type: ignore[operator]
    return head + tail


def run(
    api: str,
    reads: list[tuple[float, bytes]],
    expect: StreamExpectations = FORCED,
    end: float | None = None,
) -> StreamRecord:
    rec = StreamRecord("s", "sse", "T", 0.0, 0.0)
    ex = SSEExchange(tracker_for(api, rec, expect), STALL, REQUEST_TIMEOUT)
    for t, data in reads:
        if ex.done:
            break
        if t >= ex.progress_t + STALL:  # the read watchdog
            ex.expire(ex.progress_t + STALL, "stall")
            break
        ex.receive(t, data)
    if not ex.done:
        if end is None:
            ex.expire(ex.progress_t + STALL, "stall")
        else:
            ex.receive(end, b"")
    return rec


def fingerprint(rec: StreamRecord) -> tuple[object, ...]:
    return (
        rec.outcome,
        rec.tokens,
        rec.reasoning_tokens,
        rec.tool_tokens,
        rec.usage_completion_tokens,
        rec.finish_reason,
        rec.error,
    )


APIS = ["openai-responses", "anthropic-messages"]


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("eol", ["\n", "\r\n", "\r"])
def test_every_split_gives_the_same_answer(api, eol):
    raw = chunked(sse(events(api, reasoning=2, tool=1), eol))
    whole = run(api, [(0.1, raw)], end=0.2)
    assert whole.outcome == "ok", whole.error
    assert (whole.tokens, whole.reasoning_tokens, whole.tool_tokens) == (N, 2, 1)
    for cut in range(1, len(raw)):
        rec = run(api, [(0.1, raw[:cut]), (0.1, raw[cut:])], end=0.2)
        assert fingerprint(rec) == fingerprint(whole), cut


@pytest.mark.parametrize("api", APIS)
def test_timings_come_from_the_clock(api):
    """One event per read, 20 ms apart: TTFT at the first reasoning delta, TTFO at the first
    answer delta, one gap per token after the first."""
    parts = sse(events(api, reasoning=2))
    body = chunked(parts)
    pieces = [HEAD] + [b"%x\r\n%s\r\n" % (len(p), p) for p in parts] + [b"0\r\n\r\n"]
    assert b"".join(pieces) == body
    reads = [(0.02 * i, p) for i, p in enumerate(pieces)]
    rec = run(api, reads)
    assert rec.outcome == "ok", rec.error
    kinds = [k for k, v in events(api, reasoning=2)]
    token_at = [
        0.02 * (i + 1)
        for i, (k, v) in enumerate(events(api, reasoning=2))
        if k in ("response.reasoning_text.delta", "response.output_text.delta")
        or (k == "content_block_delta" and v["delta"]["type"] in ("text_delta", "thinking_delta"))
    ]
    assert len(token_at) == N, kinds
    assert rec.ttft_s == pytest.approx(token_at[0])
    assert rec.ttfo_s == pytest.approx(token_at[2])
    assert rec.gap_s == pytest.approx([b - a for a, b in itertools.pairwise(token_at)])
    assert rec.e2e_s is not None and rec.e2e_s > token_at[-1]


@pytest.mark.parametrize("api", APIS)
def test_keepalives_are_not_progress(api):
    """Two tokens, then only non-token events every 0.2 s: stalled at the last token + STALL."""
    evs = events(api)
    head = [e for e in evs if e[0] in ("response.created", "message_start")]
    deltas = [e for e in evs if e[0] in ("response.output_text.delta", "content_block_delta")][:2]
    ping: Event = (
        ("response.in_progress", {"type": "response.in_progress"})
        if api == "openai-responses"
        else ("ping", {"type": "ping"})
    )
    reads = [(0.0, HEAD)] + [
        (0.1 * (i + 1), chunked(sse([e]))[len(HEAD) : -5]) for i, e in enumerate(head + deltas)
    ]
    last = reads[-1][0]
    reads += [(last + 0.2 * (i + 1), chunked(sse([ping]))[len(HEAD) : -5]) for i in range(20)]
    rec = run(api, reads)
    assert rec.outcome == "stalled"
    assert rec.e2e_s == pytest.approx(last + STALL)
    assert "kept the connection alive" in rec.error
    assert "'ping' events" in rec.error or "'response.in_progress' events" in rec.error
    assert rec.open_gap and rec.gap_s[-1] == pytest.approx(STALL)


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize(
    ("stop", "forced", "free"),
    [
        ("length", "ok", "ok"),
        ("natural", "silent_truncation", "ok"),
        ("filter", "silent_truncation", "silent_truncation"),
    ],
)
def test_stop_reasons(api, stop, forced, free):
    if api == "openai-responses":
        kw: dict[str, object] = (
            {"end": "completed"}
            if stop == "natural"
            else ({"reason": "content_filter"} if stop == "filter" else {})
        )
    else:
        kw = {
            "stop_reason": {"length": "max_tokens", "natural": "end_turn", "filter": "refusal"}[
                stop
            ]
        }
    if api == "openai-responses" and stop == "natural":
        forced = "ok"  # response.completed at max_output_tokens: vLLM's and llama.cpp's form
    raw = chunked(sse(events(api, **kw)))
    assert run(api, [(0.1, raw)], FORCED, end=0.2).outcome == forced
    assert run(api, [(0.1, raw)], FREE, end=0.2).outcome == free


@pytest.mark.parametrize("api", APIS)
def test_counts_against_usage(api):
    raw = chunked(sse(events(api, usage=N + 1)))
    assert run(api, [(0.1, raw)], FREE, end=0.2).outcome == "silent_truncation"
    coalesced = StreamExpectations(max_tokens=N, forced_length=False, coalesced_chunks=True)
    assert run(api, [(0.1, raw)], coalesced, end=0.2).outcome == "ok"
    raw = chunked(sse(events(api, usage=N - 1)))
    rec = run(api, [(0.1, raw)], FREE, end=0.2)
    assert rec.outcome == "malformed" and "usage" in rec.error


@pytest.mark.parametrize("api", APIS)
def test_terminal_missing_or_wrong(api):
    evs = events(api)
    rec = run(api, [(0.1, chunked(sse(evs[:-1])))], end=0.2)
    assert rec.outcome == "truncated"
    rec = run(api, [(0.1, chunked(sse(evs[:-1]))[:-5] + b"data: [DONE]\n\n")], end=0.2)
    assert rec.outcome in ("malformed", "truncated")
    raw = chunked([*sse(evs), b"data: [DONE]\n\n"])
    assert run(api, [(0.1, raw)], end=0.2).outcome == "ok"
    raw = chunked([*sse(evs), *sse(evs[-3:-2])])
    assert run(api, [(0.1, raw)], end=0.2).outcome == "malformed"


def test_in_band_errors():
    raw = chunked(
        sse([("error", {"type": "error", "code": "x", "message": "boom", "param": None})])
    )
    rec = run("openai-responses", [(0.1, raw)], end=0.2)
    assert (rec.outcome, rec.error) == ("error_event", "error event: boom")
    raw = chunked(
        sse(
            [
                (
                    "response.failed",
                    {"type": "response.failed", "response": {"error": {"message": "bad"}}},
                )
            ]
        )
    )
    rec = run("openai-responses", [(0.1, raw)], end=0.2)
    assert rec.outcome == "error_event" and "bad" in rec.error
    raw = chunked(
        sse(
            [
                (
                    "error",
                    {
                        "type": "error",
                        "error": {"type": "overloaded_error", "message": "Overloaded"},
                    },
                )
            ]
        )
    )
    rec = run("anthropic-messages", [(0.1, raw)], end=0.2)
    assert (rec.outcome, rec.error) == ("error_event", "error event: Overloaded")


def test_paths():
    assert API_PATHS["openai-responses"] == "/v1/responses"
    assert API_PATHS["anthropic-messages"] == "/v1/messages"


def test_chat_reasoning_and_tool_call_deltas_are_typed_tokens():
    """openai-chat: reasoning_content (and vLLM's reasoning) deltas are reasoning tokens,
    tool_calls deltas tool tokens; TTFO is the first content delta."""
    head = (
        '{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,'
    )
    deltas = [
        '{"role":"assistant"}',
        '{"reasoning_content":"think"}',
        '{"reasoning":"more"}',
        '{"content":"Hi"}',
        '{"tool_calls":[{"index":0,"function":{"name":"f","arguments":""}}]}',
        '{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]}',
    ]
    parts = [f'data: {head}"delta":{d},"finish_reason":null}}]}}\n\n'.encode() for d in deltas]
    parts.append(f'data: {head}"delta":{{}},"finish_reason":"tool_calls"}}]}}\n\n'.encode())
    parts.append(b"data: [DONE]\n\n")
    pieces = [HEAD] + [b"%x\r\n%s\r\n" % (len(p), p) for p in parts] + [b"0\r\n\r\n"]
    reads = [(0.01 * i, p) for i, p in enumerate(pieces)]
    rec = run("openai-chat", reads, StreamExpectations(max_tokens=8, forced_length=False))
    assert rec.outcome == "ok", rec.error
    assert (rec.tokens, rec.reasoning_tokens, rec.tool_tokens) == (5, 2, 2)
    assert rec.ttft_s == pytest.approx(
        0.02
    )  # the first reasoning delta (the role chunk is no token)
    assert rec.ttfo_s == pytest.approx(0.04)
    assert rec.ttftc_s == pytest.approx(0.05)
