"""The chunk JSON fast path reads every chunk as the full parser reads it (hypothesis).

:func:`streamslo.stream.chunkjson.loads_chunk` decodes with msgspec first and falls back to
``json`` on anything msgspec refuses. These properties would fail if the fast path misread a
chunk the full parser reads right, or accepted one it refuses:

* on generated JSON texts, chunk-shaped or not, written every legal way (escapes of any
  character, surrogate pairs and lone surrogates, non-ASCII, any key order, duplicate keys,
  nulls, nested extras, integers past 64 bits, floats in every notation, ``1e400``, ``-0``,
  whitespace) and on broken ones (a character cut, swapped or added), the decoded value is the
  same, type for type and float bit for float bit, or both raise the same error text;
* whole streams of such chunks (OpenAI chat and completions chunks with ``token_ids``, empty
  content, usage-only chunks, ``usage: null``, values nested past the depth limit, in-band
  errors; Responses and Anthropic Messages events) end in
  the same record, outcome, counts, timings and error text, with the fast path on and off.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamslo.stream import chunkjson
from streamslo.stream import chunks as chunks_module
from streamslo.stream.chunkjson import ChunkJSONError, loads_chunk
from streamslo.stream.dialects import tracker_for
from streamslo.stream.timing import StreamExpectations, StreamRecord
from tests.stream.feed import Feed

SETTINGS = settings(
    max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
# Whole streams: fewer examples (each is several chunks, each drawn field by field).
STREAM_SETTINGS = settings(SETTINGS, max_examples=80)


@contextmanager
def full_parse_only() -> Iterator[None]:
    """The reference: ``json`` alone (the fast path off, and with it the typed token chunk, as
    ``STREAMSLO_CHUNK_JSON=stdlib`` turns both off at import)."""
    saved, saved_typed = chunkjson._FAST, chunks_module._typed_decode
    chunkjson._FAST = None
    chunks_module._typed_decode = None
    try:
        yield
    finally:
        chunkjson._FAST = saved
        chunks_module._typed_decode = saved_typed


def same(a: Any, b: Any) -> bool:
    """Equal and of the same types all the way down (1 is not 1.0, -0.0 is not 0.0)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return math.copysign(1.0, a) == math.copysign(1.0, b) and (
            a == b or (math.isnan(a) and math.isnan(b))
        )
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def outcome(text: str) -> tuple[str, Any]:
    try:
        return "ok", loads_chunk(text)
    except ChunkJSONError as exc:
        return "error", str(exc)


# --- JSON texts, written every legal way ------------------------------------------------------

_SHORT = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


@st.composite
def json_string(draw: st.DrawFn, text: str | None = None) -> str:
    """A JSON string literal for ``text`` (drawn if None), each character written one legal way
    (as itself, ``\\uXXXX``, a short escape, ``\\/``), sometimes with a lone surrogate."""
    if text is None:
        text = draw(st.text(max_size=12))
    out = ['"']
    for ch in text:
        code = ord(ch)
        how = draw(st.sampled_from(("raw", "u", "U")))
        if ch in _SHORT and how == "raw":
            out.append(_SHORT[ch])
        elif code < 0x20 or ch in _SHORT or how != "raw":
            if code > 0xFFFF:  # a surrogate pair
                hi, lo = 0xD800 + ((code - 0x10000) >> 10), 0xDC00 + ((code - 0x10000) & 0x3FF)
                esc = f"\\u{hi:04x}\\u{lo:04x}"
            else:
                esc = f"\\u{code:04x}"
            out.append(esc.upper().replace("\\U", "\\u") if how == "U" else esc)
        elif ch == "/" and draw(st.booleans()):
            out.append("\\/")
        elif 0xD800 <= code <= 0xDFFF:
            out.append(f"\\u{code:04x}")  # a surrogate drawn as text: only escaped is legal
        else:
            out.append(ch)
    if draw(st.integers(0, 9)) == 0:
        out.insert(draw(st.integers(1, len(out))), f"\\u{draw(st.integers(0xD800, 0xDFFF)):04x}")
    out.append('"')
    return "".join(out)


_ODD_NUMBERS = (
    "-0",
    "-0.0",
    "0e0",
    "1E+2",
    "1e-2",
    "0.1e1",
    "1e400",
    "-1e400",
    "1e-400",
    "4.9e-324",
    "2.4703282292062328e-324",
    "1.7976931348623157e308",
    "1.7976931348623159e308",
    "9007199254740993",
    "9007199254740993.0",
    "18446744073709551615",
    "18446744073709551616",
    "-9223372036854775809",
    "123456789012345678901234567890",
    "1" * 4301,
    "0." + "1" * 400,
    "1.00000000000000011102230246251565404236316680908203125",
)


@st.composite
def json_number(draw: st.DrawFn) -> str:
    kind = draw(st.integers(0, 4))
    if kind == 0:
        return str(draw(st.integers(-(2**70), 2**70)))
    if kind == 1:
        return str(draw(st.integers(0, 2000)))
    if kind == 2:
        return draw(st.sampled_from(_ODD_NUMBERS))
    f = draw(st.floats(allow_nan=False, allow_infinity=False))
    style = draw(st.sampled_from(("repr", "e", "E", "17g", "3g")))
    if style == "repr":
        return repr(f)
    if style == "17g":
        return f"{f:.17g}"
    if style == "3g":
        return f"{f:.3g}"
    text = f"{f:e}"
    return text.upper() if style == "E" else text


def ws(draw: st.DrawFn) -> str:
    return draw(st.sampled_from(("", "", "", " ", "\n", "\t", "\r\n ")))


@st.composite
def json_text(draw: st.DrawFn, depth: int = 3) -> str:
    """Any JSON value's text; objects may repeat keys."""
    kind = draw(st.integers(0, 7 if depth > 0 else 4))
    if kind == 0:
        return draw(st.sampled_from(("null", "true", "false")))
    if kind in (1, 2):
        return draw(json_number())
    if kind in (3, 4):
        return draw(json_string())
    if kind == 5:
        items = draw(st.lists(json_text(depth - 1), max_size=4))
        return "[" + ",".join(ws(draw) + i + ws(draw) for i in items) + "]"
    return draw(json_object(depth - 1))


KEYS = (
    "id",
    "object",
    "created",
    "model",
    "choices",
    "usage",
    "error",
    "type",
    "index",
    "delta",
    "text",
    "content",
    "reasoning_content",
    "reasoning",
    "role",
    "tool_calls",
    "function",
    "arguments",
    "name",
    "finish_reason",
    "token_ids",
    "logprobs",
    "completion_tokens",
    "prompt_tokens",
    "message",
    "code",
)


@st.composite
def json_object(draw: st.DrawFn, depth: int = 2) -> str:
    pairs = draw(
        st.lists(
            st.tuples(
                st.one_of(st.sampled_from(KEYS), st.text(max_size=6)),
                json_text(max(depth, 0)) if depth > 0 else json_text(0),
            ),
            max_size=5,
        )
    )
    if pairs and draw(st.booleans()):
        pairs.append((pairs[0][0], draw(json_text(0))))  # a duplicate key: the last one wins
    body = ",".join(
        f"{ws(draw)}{draw(json_string(k))}{ws(draw)}:{ws(draw)}{v}{ws(draw)}" for k, v in pairs
    )
    return "{" + body + "}"


def obj(draw: st.DrawFn, fields: dict[str, str | None]) -> str:
    """An object of ``fields`` (already JSON texts; None: left out), keys in any order, with
    extra fields and sometimes a repeated one."""
    pairs = [(k, v) for k, v in fields.items() if v is not None]
    if draw(st.integers(0, 3)) == 0:
        pairs.append((draw(st.text(max_size=5)), draw(json_text(1))))
    pairs = draw(st.permutations(pairs))
    if pairs and draw(st.integers(0, 5)) == 0:
        k, _ = pairs[0]
        pairs = [(k, draw(json_text(0))), *pairs]  # an earlier duplicate, overridden
    return (
        "{"
        + ",".join(f"{ws(draw)}{draw(json_string(k))}{ws(draw)}:{ws(draw)}{v}" for k, v in pairs)
        + "}"
    )


def maybe(draw: st.DrawFn, value: st.SearchStrategy[str]) -> str | None:
    return draw(st.one_of(st.none(), st.just("null"), value, json_text(1)))


def text_value(draw: st.DrawFn) -> str:
    return draw(
        st.one_of(
            st.just('""'), st.builds(lambda s: json.dumps(s), st.text(max_size=4)), json_string()
        )
    )


@st.composite
def chat_chunk(draw: st.DrawFn) -> str:
    """A chat or completions chunk, usually well formed, with every field sometimes odd."""
    choices = []
    for _ in range(draw(st.integers(0, 2))):
        if draw(st.booleans()):
            delta = obj(
                draw,
                {
                    "content": maybe(draw, st.just(text_value(draw))),
                    "reasoning_content": maybe(draw, st.just(text_value(draw))),
                    "role": maybe(draw, st.just('"assistant"')),
                    "tool_calls": maybe(
                        draw,
                        st.just(
                            "["
                            + obj(
                                draw,
                                {
                                    "function": obj(
                                        draw, {"arguments": text_value(draw), "name": None}
                                    )
                                },
                            )
                            + "]"
                        ),
                    ),
                },
            )
            fields = {"index": "0", "delta": delta}
        else:
            fields = {"index": "0", "text": maybe(draw, st.just(text_value(draw)))}
        fields["finish_reason"] = maybe(draw, st.sampled_from(('"stop"', '"length"')))
        fields["token_ids"] = maybe(
            draw, st.builds(lambda n: json.dumps(list(range(n))), st.integers(0, 3))
        )
        fields["logprobs"] = maybe(draw, st.just("null"))
        choices.append(obj(draw, fields))
    usage = obj(
        draw,
        {
            "completion_tokens": maybe(draw, json_number()),
            "prompt_tokens": maybe(draw, json_number()),
        },
    )
    kind = draw(st.integers(0, 9))
    fields: dict[str, str | None] = {
        "id": json.dumps("chatcmpl-1"),
        "object": '"chat.completion.chunk"',
        "created": draw(json_number()),
        "choices": "[" + ",".join(choices) + "]" if kind else None,
        "usage": usage if kind in (0, 1) else None,
    }
    extra = draw(st.integers(0, 9))
    if extra == 0:
        fields["usage"] = "null"  # OpenAI's, on every chunk before the last: no usage
    elif extra == 1:
        # Nested past the depth limit, under a key a token chunk's reading knows or skips.
        key = draw(st.sampled_from(("model", "service_tier", "x", "usage")))
        fields[key] = "[" * 65 + "]" * 65
    elif extra == 2:
        fields["system_fingerprint"] = draw(st.sampled_from(('"fp_1"', "null", "{}", "[1]")))
    if kind == 2:
        fields["error"] = obj(draw, {"message": text_value(draw), "code": draw(json_number())})
    if kind == 3:
        fields["object"] = '"error"'
        fields["message"] = text_value(draw)
    return obj(draw, fields)


@st.composite
def dialect_event(draw: st.DrawFn) -> str:
    """A Responses or Anthropic Messages event, fields sometimes odd."""
    kind = draw(
        st.sampled_from(
            (
                "response.output_text.delta",
                "response.reasoning_text.delta",
                "response.function_call_arguments.delta",
                "response.completed",
                "response.incomplete",
                "response.failed",
                "content_block_delta",
                "message_delta",
                "message_stop",
                "message_start",
                "error",
                "ping",
            )
        )
    )
    delta = obj(
        draw,
        {
            "type": draw(
                st.sampled_from(('"text_delta"', '"thinking_delta"', '"input_json_delta"'))
            ),
            "text": maybe(draw, st.just(text_value(draw))),
            "thinking": maybe(draw, st.just(text_value(draw))),
            "partial_json": maybe(draw, st.just(text_value(draw))),
            "stop_reason": maybe(draw, st.sampled_from(('"end_turn"', '"max_tokens"'))),
        },
    )
    usage = obj(
        draw,
        {
            "output_tokens": maybe(draw, json_number()),
            "input_tokens": maybe(draw, json_number()),
        },
    )
    response = obj(
        draw,
        {
            "status": maybe(draw, st.sampled_from(('"completed"', '"incomplete"'))),
            "usage": usage,
            "incomplete_details": maybe(draw, st.just('{"reason":"max_output_tokens"}')),
        },
    )
    return obj(
        draw,
        {
            "type": json.dumps(kind),
            "delta": draw(st.one_of(st.just(delta), st.just(text_value(draw)))),
            "usage": usage,
            "response": response,
            "error": maybe(draw, st.just(obj(draw, {"message": text_value(draw)}))),
        },
    )


@st.composite
def broken(draw: st.DrawFn, text: str) -> str:
    """``text`` with one character cut, doubled or replaced."""
    if not text:
        return text
    i = draw(st.integers(0, len(text) - 1))
    how = draw(st.integers(0, 2))
    if how == 0:
        return text[:i] + text[i + 1 :]
    if how == 1:
        return text[:i] + text[i] + text[i:]
    return text[:i] + draw(st.sampled_from('{}[],:"\\ e.-0x\x00\x1f')) + text[i + 1 :]


def any_text() -> st.SearchStrategy[str]:
    whole = st.one_of(json_text(), chat_chunk(), dialect_event())
    return st.one_of(
        whole,
        whole.flatmap(lambda t: broken(t)),
        st.builds(lambda a, b: a + b, whole, st.sampled_from((" ", "\n", "x", "{}", "\ufeff"))),
    )


# --- the properties ------------------------------------------------------------------------------


@SETTINGS
@given(any_text())
def test_fast_path_decodes_as_the_full_parser(text: str) -> None:
    fast = outcome(text)
    with full_parse_only():
        full = outcome(text)
    assert fast[0] == full[0], (text, fast, full)
    assert same(fast[1], full[1]), (text, fast, full)


@pytest.mark.parametrize(
    "text",
    [
        "1e400",
        "[1e400]",
        '{"completion_tokens": 123456789012345678901234567890}',
        '{"a": ' + "1" * 4301 + "}",
        '"\\ud800"',
        '{"content": "\\udc80x"}',
        "\ud800",
        '"\ud800"',
        "NaN",
        "[Infinity]",
        "-Infinity",
        "{}" + "\x00",
        '{"a": 1, "a": 2.0}',
        "[" * 200 + "]" * 200,
        "",
        " ",
    ],
)
def test_fast_path_edge_cases(text: str) -> None:
    fast = outcome(text)
    with full_parse_only():
        full = outcome(text)
    assert fast[0] == full[0] and same(fast[1], full[1]), (fast, full)


def record_of(api: str, chunks: list[str], expect: StreamExpectations) -> dict[str, Any]:
    rec = StreamRecord("p", "sse", "T", 0.0, 0.0)
    tracker = Feed(tracker_for(api, rec, expect, collect_text=True))
    tracker.on_response(0.01, 200, "text/event-stream")
    body = "".join(f"data: {c}\n\n" for c in chunks).encode("utf-8", "surrogatepass")
    t = 0.02
    # One event per read, as a server writes them (a lone surrogate is sent as its bytes).
    for piece in body.split(b"\n\n")[:-1]:
        tracker.on_sse_bytes(t, piece + b"\n\n")
        t += 0.01
        if not tracker.wants_bytes:
            break
    tracker.on_eof(t, True)
    out = dataclasses.asdict(rec)
    out["text"] = tracker.text
    return out


@STREAM_SETTINGS
@given(
    st.sampled_from(("openai-chat", "openai-completions")),
    st.lists(st.one_of(chat_chunk(), chat_chunk().flatmap(lambda t: broken(t))), max_size=5),
    st.sampled_from((True, False)),
    st.sampled_from((None, 3)),
)
def test_streams_of_chunks_end_the_same(
    api: str, chunks: list[str], done: bool, max_tokens: int | None
) -> None:
    expect = StreamExpectations(max_tokens=max_tokens, forced_length=max_tokens is not None)
    chunks = [*chunks, "[DONE]"] if done else chunks
    fast = record_of(api, chunks, expect)
    with full_parse_only():
        full = record_of(api, chunks, expect)
    assert fast == full


@STREAM_SETTINGS
@given(
    st.sampled_from(("openai-responses", "anthropic-messages")),
    st.lists(st.one_of(dialect_event(), dialect_event().flatmap(lambda t: broken(t))), max_size=5),
)
def test_streams_of_dialect_events_end_the_same(api: str, events: list[str]) -> None:
    expect = StreamExpectations(max_tokens=3)
    fast = record_of(api, events, expect)
    with full_parse_only():
        full = record_of(api, events, expect)
    assert fast == full


_DEEP = "[" * 65 + "]" * 65
_HEAD = '{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"a"}'
_TOKEN_CHUNKS = [
    _HEAD + choice + "}]" + top + "}"
    for choice, top in (
        ("", ""),
        ("", ',"usage":null'),
        ("", ',"model":' + _DEEP),
        ("", ',"zz":' + _DEEP),
        ("", ',"zz":1'),
        ("", ',"usage":{"completion_tokens":1,"x":' + _DEEP + "}"),
        ("", ',"timings":{"predicted_n":1}'),
        (',"logprobs":' + _DEEP, ""),
        (',"token_ids":[' + _DEEP + "]", ""),
        (',"token_ids":[5,6]', ""),
        (',"stop_reason":{"a":' + _DEEP + "}", ""),
        (',"finish_reason":null,"matched_stop":null', ',"system_fingerprint":"fp"'),
    )
] + [
    '{"choices":[{"delta":{"content":"a","tool_calls":[' + _DEEP + "]}}]}",
    '{"choices":[{"delta":{"content":"a","role":"assistant","reasoning_content":null}}]}',
]


@pytest.mark.parametrize("chunk", _TOKEN_CHUNKS)
def test_token_chunks_beside_odd_keys_end_the_same(chunk: str) -> None:
    """The typed token chunk knows some keys and refuses the rest: a value nested past the
    depth limit under any key, or a key it does not know, reads as the full parser reads it."""
    expect = StreamExpectations(max_tokens=4, forced_length=False)
    chunks = [_TOKEN_CHUNKS[0], chunk, chunk, "[DONE]"]  # (the first event is read as text)
    fast = record_of("openai-chat", chunks, expect)
    with full_parse_only():
        full = record_of("openai-chat", chunks, expect)
    assert fast == full
    if _DEEP not in chunk and '"zz"' not in chunk:
        assert chunkjson.loads_token_chunk(chunk.encode()) is not None  # the typed path read it


def test_the_fast_path_is_on() -> None:
    """The bench's old path is the environment's choice; the default is the fast path."""
    assert chunkjson._FAST is not None
    assert chunks_module._typed_decode is chunkjson.TOKEN_CHUNK_DECODE is not None
