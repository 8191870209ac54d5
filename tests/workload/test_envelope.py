"""A gateway's WebSocket envelope: requests wrapped, chunks unwrapped, its own done message;
and the tracker's token counts and answer text (Sans-I/O, scripted clock)."""

from __future__ import annotations

import json

import pytest

from streamslo.errors import BadInputError
from streamslo.results.columns import stream_row
from streamslo.stream.envelope import WSEnvelope
from streamslo.stream.timing import StreamExpectations, StreamRecord
from streamslo.stream.tracker import StreamTracker
from tests.stream.feed import Feed

EXPECT = StreamExpectations(max_tokens=2)


def _chunk(
    text: str | None = None, finish: str | None = None, usage: dict[str, int] | None = None
) -> dict[str, object]:
    delta = {"content": text} if text is not None else {}
    c: dict[str, object] = {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if usage is not None:
        c["usage"] = usage
    return c


def _run(
    env: WSEnvelope, messages: list[str], collect: bool = False
) -> tuple[StreamRecord, StreamTracker]:
    rec = StreamRecord("s", "ws", "U", 0.0, 0.0)
    tr = Feed(env.tracker(rec, EXPECT, collect_text=collect))
    tr.on_ws_accepted(0.01)
    for i, m in enumerate(messages):
        tr.on_ws_message(0.1 * (i + 1), m.encode(), True)
    return rec, tr


GATEWAY = WSEnvelope.from_options(None, "data.chunk", '{"type": "done"}')
USAGE = {"prompt_tokens": 11, "completion_tokens": 2}


def _wrapped(c: dict[str, object]) -> str:
    return json.dumps({"type": "chunk", "data": {"chunk": c}})


def test_wrapped_chunks_and_a_json_done_message_end_ok():
    rec, tr = _run(
        GATEWAY,
        [
            _wrapped(_chunk("a")),
            _wrapped(_chunk("b")),
            _wrapped(_chunk("", "length", USAGE)),
            '{"type": "done", "seq": 4}',
        ],
        collect=True,
    )
    assert rec.outcome == "ok", rec.error
    assert (rec.tokens, rec.usage_completion_tokens, rec.usage_prompt_tokens) == (2, 2, 11)
    assert tr.text == ["a", "b"]


def test_a_chunk_held_as_json_text_and_done_at_the_path():
    env = WSEnvelope.from_options(None, "payload", "[DONE]")
    rec, _ = _run(
        env,
        [
            json.dumps({"payload": json.dumps(_chunk("a"))}),
            json.dumps({"payload": json.dumps(_chunk("b", "length"))}),
            json.dumps({"payload": "[DONE]"}),
        ],
    )
    assert rec.outcome == "ok", rec.error


def test_a_message_without_the_chunk_is_malformed_and_says_where():
    rec, _ = _run(GATEWAY, [_wrapped(_chunk("a")), '{"type": "heartbeat"}'])
    assert rec.outcome == "malformed" and "no chunk at data.chunk" in rec.error


def test_an_envelope_error_before_content_is_the_servers_refusal():
    rec, _ = _run(GATEWAY, ['{"type": "error", "error": {"message": "overloaded", "code": 503}}'])
    assert rec.outcome == "http_5xx" and "overloaded" in rec.error
    rec, _ = _run(GATEWAY, [_wrapped(_chunk("a")), '{"error": {"message": "boom"}}'])
    assert rec.outcome == "error_event"


def test_a_missing_done_message_is_still_truncation():
    rec = StreamRecord("s", "ws", "U", 0.0, 0.0)
    tr = Feed(GATEWAY.tracker(rec, EXPECT))
    tr.on_ws_accepted(0.0)
    tr.on_ws_message(0.1, _wrapped(_chunk("a")).encode(), True)
    tr.on_ws_close(0.2, 1000)
    assert rec.outcome == "truncated"


def test_the_request_template_wraps_the_body(tmp_path):
    f = tmp_path / "t.json"
    f.write_text('{"action": "generate", "id": 1, "body": "{{request}}"}')
    env = WSEnvelope.from_options(str(f), "data.chunk", "[DONE]")
    assert json.loads(env.wrap(b'{"model":"m","stream":true}')) == {
        "action": "generate",
        "id": 1,
        "body": {"model": "m", "stream": True},
    }
    assert WSEnvelope().plain and WSEnvelope().wrap(b"x") == b"x"
    assert (
        type(WSEnvelope().tracker(StreamRecord("s", "ws", "U", 0.0, 0.0), EXPECT)) is StreamTracker
    )


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ("{not json", "not JSON"),
        ('{"a": 1}', "exactly once"),
        ('["{{request}}", "{{request}}"]', "exactly once"),
    ],
)
def test_bad_templates_name_the_file(tmp_path, content, match):
    f = tmp_path / "t.json"
    f.write_text(content)
    with pytest.raises(BadInputError, match=match):
        WSEnvelope.from_options(str(f), None, "[DONE]")


def test_sse_prompt_tokens_and_text_are_recorded():
    rec = StreamRecord("s", "sse", "U", 0.0, 0.0)
    tr = Feed(StreamTracker(rec, EXPECT, collect_text=True))
    tr.on_response(0.01, 200, "text/event-stream")
    body = "".join(
        f"data: {json.dumps(c)}\n\n"
        for c in (_chunk("he"), _chunk("llo", "length"), {"choices": [], "usage": USAGE})
    )
    tr.on_sse_bytes(0.2, (body + "data: [DONE]\n\n").encode())
    tr.on_eof(0.3, True)
    assert (
        rec.outcome == "ok" and rec.usage_prompt_tokens == 11 and "".join(tr.text or []) == "hello"
    )
    assert stream_row(rec)["usage_prompt_tokens"] == 11 and stream_row(rec)["turn"] is None
