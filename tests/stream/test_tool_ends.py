"""An answer that ends with a tool call is a complete step in every dialect, also under a forced
length (an agent's step: the model stops to let the tool run); a lost chunk before it is still a
truncation."""

from __future__ import annotations

import json

import pytest

from streamslo.stream.dialects import tracker_for
from streamslo.stream.timing import StreamExpectations, StreamRecord
from tests.stream.feed import Feed

FORCED = StreamExpectations(max_tokens=12, forced_length=True)


def _sse(events: list[tuple[str | None, dict | str]]) -> bytes:
    out = b""
    for name, data in events:
        if name:
            out += b"event: " + name.encode() + b"\n"
        out += b"data: " + (data if isinstance(data, str) else json.dumps(data)).encode() + b"\n\n"
    return out


def _chat(tool_tokens: int, usage: int) -> bytes:
    events: list[tuple[str | None, dict | str]] = []
    for _ in range(tool_tokens):
        call = {"index": 0, "function": {"arguments": "x"}}
        events.append(
            (
                None,
                {"choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": None}]},
            )
        )
    events.append(
        (
            None,
            {
                "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}],
                "usage": {"completion_tokens": usage},
            },
        )
    )
    events.append((None, "[DONE]"))
    return _sse(events)


def _messages(tool_tokens: int, usage: int) -> bytes:
    ev: list[tuple[str | None, dict | str]] = [
        ("message_start", {"type": "message_start", "message": {"usage": {"input_tokens": 3}}})
    ]
    for _ in range(tool_tokens):
        ev.append(
            (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "input_json_delta", "partial_json": "x"},
                },
            )
        )
    ev.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "tool_use"},
                "usage": {"output_tokens": usage},
            },
        )
    )
    ev.append(("message_stop", {"type": "message_stop"}))
    return _sse(ev)


def _responses(tool_tokens: int, usage: int) -> bytes:
    ev: list[tuple[str | None, dict | str]] = [
        ("response.created", {"type": "response.created", "response": {}})
    ]
    for _ in range(tool_tokens):
        ev.append(
            (
                "response.function_call_arguments.delta",
                {"type": "response.function_call_arguments.delta", "delta": "x"},
            )
        )
    final = {
        "status": "completed",
        "usage": {"input_tokens": 3, "output_tokens": usage},
        "output": [{"type": "function_call", "name": "lookup", "arguments": "x" * tool_tokens}],
    }
    ev.append(("response.completed", {"type": "response.completed", "response": final}))
    return _sse(ev)


CASES = {"openai-chat": _chat, "anthropic-messages": _messages, "openai-responses": _responses}


def _run(api: str, body: bytes) -> StreamRecord:
    rec = StreamRecord("s", "sse", "T", 0.0, 0.0)
    tr = Feed(tracker_for(api, rec, FORCED))
    tr.on_response(0.01, 200, "text/event-stream")
    tr.on_sse_bytes(0.1, body)
    tr.on_eof(0.2, True)
    return rec


@pytest.mark.parametrize("api", CASES)
def test_a_tool_call_ends_a_step_also_short_of_the_forced_length(api):
    rec = _run(api, CASES[api](4, 4))
    assert rec.outcome == "ok", rec.error
    assert rec.tool_tokens == 4 and rec.ttftc_s is not None


@pytest.mark.parametrize("api", ["openai-chat", "anthropic-messages"])
def test_a_lost_chunk_before_the_tool_end_is_still_a_truncation(api):
    rec = _run(api, CASES[api](4, 5))
    assert rec.outcome == "silent_truncation" and "of 5" in rec.error, rec.error
