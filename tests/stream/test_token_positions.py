"""Token positions as servers send them, stalls measured in tokens, and every in-band error
shape: the tracker driven by a scripted clock (no sockets)."""

from __future__ import annotations

import json

import pytest

from streamslo.stream.timing import StreamExpectations, StreamRecord
from streamslo.stream.tracker import StreamTracker
from tests.stream.feed import Feed


def event(obj: object, name: str | None = None) -> bytes:
    head = f"event: {name}\n".encode() if name else b""
    return (
        head + b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"
    )


def chat(delta: dict, finish: str | None = None) -> bytes:
    return event({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})


def text(t: str, finish: str | None = None) -> bytes:
    return event({"choices": [{"index": 0, "text": t, "finish_reason": finish}]})


def usage(n: int) -> bytes:
    return event({"choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": n}})


DONE = b"data: [DONE]\n\n"
E3 = StreamExpectations(max_tokens=3)
E3_FREE = StreamExpectations(max_tokens=3, forced_length=False)


def run(expect: StreamExpectations, reads: list[tuple[float, bytes]], protocol: str = "sse"):
    rec = StreamRecord("s", protocol, "T", 1000.0, 10.0)
    tr = Feed(StreamTracker(rec, expect))
    tr.stall_timeout = 1.0
    if protocol == "ws":
        tr.on_ws_accepted(10.0)
        for t, data in reads:
            tr.on_ws_message(t, data, True)
    else:
        tr.on_response(10.0, 200, "text/event-stream")
        for t, data in reads:
            tr.on_sse_bytes(t, data)
    return rec, tr


# --- what is a token position ---------------------------------------------------------------


def test_vllm_chat_shape_counts_held_back_tokens():
    """vLLM: role chunk, text and empty-content tokens, usage apart: 3 positions = usage."""
    rec, _ = run(
        E3,
        [
            (10.1, chat({"role": "assistant", "content": ""})),
            (10.2, chat({"content": "a"})),
            (10.3, chat({"content": ""})),  # held back by the detokenizer: a token
            (10.5, chat({"content": "b"}, "length")),
            (10.6, usage(3) + DONE),
        ],
    )
    assert rec.outcome == "ok", rec.error
    assert rec.tokens == 3 == rec.usage_completion_tokens
    assert rec.ttft_s == pytest.approx(0.2)  # the role chunk measures nothing
    assert rec.gap_s == pytest.approx([0.1, 0.2])  # the empty token ends one gap, starts the next
    assert rec.tpot_s == pytest.approx((0.6 - 0.2) / 2)  # e2e ends at [DONE]


def test_without_the_rule_the_vllm_shape_would_read_as_truncation():
    """The same stream with the held-back token missing is one token short of usage."""
    rec, _ = run(
        E3,
        [
            (10.2, chat({"content": "a"})),
            (10.5, chat({"content": "b"}, "length")),
            (10.6, usage(3) + DONE),
        ],
    )
    assert rec.outcome == "silent_truncation"
    assert rec.tokens == 2


@pytest.mark.parametrize(
    "delta", [{}, {"content": None}, {"role": "assistant"}, {"role": "assistant", "content": ""}]
)
def test_chunks_without_a_token_position(delta):
    rec, _ = run(
        E3,
        [
            (10.1, chat({"content": "a"})),
            (10.2, chat(delta)),
            (10.3, usage(0)),
            (10.4, chat({"content": "b"})),
            (10.5, chat({"content": "c"}, "length") + usage(3) + DONE),
        ],
    )
    assert rec.outcome == "ok", rec.error
    assert rec.tokens == 3
    assert rec.gap_s == pytest.approx([0.3, 0.1])


@pytest.mark.parametrize(
    ("n_before", "last", "with_usage"),
    [
        # vLLM: the finish rides on the last token's chunk, whose text was held back.
        (2, chat({"content": ""}, "length"), True),
        (2, chat({"content": ""}, "length"), False),  # counted by max_tokens under ignore_eos
        # OpenAI / llama.cpp: a bare finish chunk after the last token.
        (3, chat({}, "length"), True),
        (3, chat({"content": ""}, "length"), True),
    ],
)
def test_empty_finish_chunk_counts_only_when_the_server_counts_it(n_before, last, with_usage):
    reads = [(10.1 + i * 0.1, chat({"content": f"t{i}"})) for i in range(n_before)]
    reads.append((10.9, last + (usage(3) if with_usage else b"") + DONE))
    rec, _ = run(E3, reads)
    assert rec.outcome == "ok", rec.error
    assert rec.tokens == 3
    assert len(rec.gap_s) == 2


def test_a_bare_finish_chunk_is_never_a_token():
    """A ``{}`` finish chunk carries no position, even when usage says one more (vLLM with a
    reasoning or tool parser sends its last token so: a run asks vLLM for token ids, which
    count it exactly): the missing token is reported, not assumed."""
    reads = [(10.1 + i * 0.1, chat({"content": f"t{i}"})) for i in range(2)]
    reads.append((10.9, chat({}, "length") + usage(3) + DONE))
    rec, _ = run(E3, reads)
    assert rec.outcome == "silent_truncation"
    assert rec.error == "2 token positions arrived of 3 the server counted"
    ids = [
        (10.1, event({"choices": [{"index": 0, "delta": {"content": "a"}, "token_ids": [7]}]})),
        (10.2, event({"choices": [{"index": 0, "delta": {"content": "b"}, "token_ids": [8]}]})),
        (
            10.3,
            event(
                {
                    "choices": [
                        {"index": 0, "delta": {}, "finish_reason": "length", "token_ids": [9]}
                    ]
                }
            ),
        ),
        (10.4, usage(3) + DONE),
    ]
    rec, _ = run(E3, ids)
    assert rec.outcome == "ok", rec.error
    assert rec.tokens == 3


def test_completions_empty_text_is_a_token():
    rec, _ = run(
        E3,
        [(10.1, text("a")), (10.2, text("")), (10.3, text("c", "length")), (10.4, usage(3) + DONE)],
    )
    assert rec.outcome == "ok", rec.error
    assert rec.tokens == 3


def test_completions_bare_finish_without_usage():
    """OpenAI completions end with text '' and the finish: no usage, stop: not a token."""
    rec, _ = run(E3_FREE, [(10.1, text("a")), (10.2, text("b")), (10.3, text("", "stop") + DONE)])
    assert rec.outcome == "ok", rec.error
    assert rec.tokens == 2


def test_reasoning_and_tool_calls_stay_tokens():
    rec, _ = run(
        E3,
        [
            (10.1, chat({"reasoning_content": "hm"})),
            (10.2, chat({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]})),
            (10.3, chat({"content": "x"}, "length") + usage(3) + DONE),
        ],
    )
    assert rec.outcome == "ok", rec.error
    assert rec.tokens == 3


def test_empty_content_beyond_max_tokens_is_malformed():
    """A gateway that pads with empty-content deltas makes more positions than asked."""
    rec, _ = run(E3, [(10.1 + i * 0.1, chat({"content": ""})) for i in range(4)])
    assert rec.outcome == "malformed"
    assert "more token positions (4) than max_tokens (3)" in rec.error


# --- stalls in tokens -----------------------------------------------------------------------


def test_keepalives_are_not_progress():
    rec, tr = run(
        E3,
        [
            (10.1, chat({"content": "a"})),
            (10.3, b": ping\n\n"),
            (10.5, chat({})),
            (10.7, b": ping\n\n" + event(b"")),
            (10.8, event({"type": "ping"}, "ping")),
            (10.9, b'data: {"cho'),  # a line that never completes
        ],
    )
    assert tr.progress_t == pytest.approx(10.1)  # the last token, not the keep-alives
    tr.on_stall(11.1, 1.0)
    assert rec.outcome == "stalled"
    assert rec.error.startswith(
        "no token for 1s after 1 tokens; 2 SSE comments, 3 chunks without a token"
    )
    assert "unfinished line" in rec.error and "kept the connection alive" in rec.error
    assert rec.open_gap and rec.gap_s[-1] == pytest.approx(1.0)


def test_ws_pings_and_empty_messages_are_not_progress():
    rec, tr = run(
        E3,
        [
            (10.1, b'{"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}]}'),
            (10.5, b""),
        ],
        "ws",
    )
    tr.pings = 3
    assert tr.progress_t == pytest.approx(10.1)
    tr.on_stall(11.1, 1.0)
    assert rec.outcome == "stalled"
    assert "1 chunks without a token, 3 WebSocket pings kept the connection alive" in rec.error


def test_first_token_timeout_moves_the_first_wait_only():
    rec = StreamRecord("s", "sse", "T", 1000.0, 10.0)
    tr = Feed(StreamTracker(rec, E3))
    tr.stall_timeout, tr.first_token_timeout = 1.0, 5.0
    tr.on_response(10.0, 200, "text/event-stream")
    assert tr.progress_t + tr.stall_timeout == pytest.approx(15.0)  # the watchdog ends it at 15 s
    tr.on_sse_bytes(14.0, chat({"content": "a"}))
    assert tr.progress_t == pytest.approx(14.0)  # then the stall timeout per token
    tr.on_stall(15.0, 1.0)
    assert rec.outcome == "stalled" and rec.error.startswith("no token for 1s")

    rec = StreamRecord("s", "sse", "T", 1000.0, 10.0)
    tr = Feed(StreamTracker(rec, E3))
    tr.stall_timeout, tr.first_token_timeout = 1.0, 5.0
    tr.on_response(10.0, 200, "text/event-stream")
    tr.on_stall(15.0, 1.0)
    assert rec.error.startswith("no first token for 5s after the stream began")


@pytest.mark.parametrize(("last_token", "outcome"), [(10.5, "cancelled"), (8.9, "stalled")])
def test_cancel_is_only_for_streams_still_making_progress(last_token, outcome):
    rec = StreamRecord("s", "sse", "T", 1000.0, 8.0)
    tr = Feed(StreamTracker(rec, E3))
    tr.stall_timeout = 1.0
    tr.on_response(8.1, 200, "text/event-stream")
    tr.on_sse_bytes(last_token, chat({"content": "a"}))
    for t in (9.0, 9.5, 10.0, 10.6):  # comments keep the connection busy
        tr.on_sse_bytes(max(t, last_token), b": alive\n\n")
    tr.on_cancel(11.0)
    assert rec.outcome == outcome, rec.error


# --- every error shape ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "name", "message"),
    [
        ({"error": {"message": "boom", "type": "server_error", "code": 500}}, None, "boom"),
        (
            {
                "object": "error",
                "message": "engine died",
                "type": "InternalServerError",
                "code": 500,
            },
            None,
            "engine died (InternalServerError)",
        ),
        (
            {"error": "generation failed", "error_type": "generation"},
            None,
            "generation failed (generation)",
        ),
        (b"upstream overloaded", "error", "upstream overloaded"),
        ({"message": "quota"}, "error", "quota"),
    ],
)
def test_inband_error_shapes(data, name, message):
    rec, _ = run(E3, [(10.1, chat({"content": "a"})), (10.2, event(data, name))])
    assert rec.outcome == "error_event"
    assert rec.error == f"error event: {message}"


def test_ws_vllm_error_before_content_is_by_its_code():
    obj = {"object": "error", "message": "bad request", "type": "BadRequestError", "code": 400}
    rec, _ = run(E3, [(10.1, json.dumps(obj).encode())], "ws")
    assert rec.outcome == "http_4xx"
    assert rec.error == "error 400: bad request (BadRequestError)"


@pytest.mark.parametrize(
    ("status", "body", "outcome", "message"),
    [
        (
            500,
            {
                "object": "error",
                "message": "engine dead",
                "type": "InternalServerError",
                "code": 500,
            },
            "http_5xx",
            "HTTP 500: engine dead (InternalServerError)",
        ),
        (
            422,
            {"error": "Input validation error", "error_type": "validation"},
            "http_4xx",
            "HTTP 422: Input validation error (validation)",
        ),
        (400, {"error": {"message": "too long", "code": 400}}, "http_4xx", "HTTP 400: too long"),
        (404, {"detail": "Not Found"}, "http_4xx", "HTTP 404: Not Found"),
    ],
)
def test_error_bodies_before_the_stream(status, body, outcome, message):
    rec = StreamRecord("s", "sse", "T", 1000.0, 10.0)
    tr = Feed(StreamTracker(rec, E3))
    tr.on_http_error(10.1, status, json.dumps(body).encode())
    assert rec.outcome == outcome
    assert rec.error == message
