"""The plain-answer-token rule is written once for dict chunks and once for typed ones, and each
is held equal to the general rule (issue 36, item 4).

The general rule: :func:`~streamslo.stream.chunkjson.token_position` (is a choice a token
position), :func:`~streamslo.stream.chunkjson.has_text` (of which kind) and the choice's text of
every kind (``chunks._choice_text``, what the ledger reads for a chunk counted as one token).
The shortcuts, which read the commonest chunk in one pass:

* :func:`~streamslo.stream.chunkjson.plain_answer`, the dict form, called by
  ``OpenAIChunks._chunk``'s common-chunk reading and by its choices loop;
* the typed copy in :meth:`OpenAIChunks.read_bytes` (a :class:`TokenChunk`, keys as attributes).

Three properties, each of which fails if a shortcut reads a choice otherwise than the general
rule: on generated choices (every text field present, absent, null, empty, non-string, beside
reasoning and tool calls) whatever :func:`plain_answer` takes the general rule reads as one
ANSWER token whose text is that content; whole streams of generated chunks, over SSE and over
WebSocket, end in the same record with the shortcuts on and with both off (the general rule
alone); and the common chunks of the servers the bench models (the emitter's, vLLM's, TGI's) are
taken by both shortcuts, so the equalities are not vacuous.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamslo.stream import chunks
from streamslo.stream.chunkjson import (
    ANSWER,
    TOKEN,
    has_text,
    loads_token_chunk,
    plain_answer,
    token_position,
)
from streamslo.stream.timing import StreamExpectations
from tests.stream.drive import Burst, drive_sse, drive_ws
from tests.stream.test_chunkjson_fast import chat_chunk

SETTINGS = settings(
    max_examples=300, deadline=None, database=None, suppress_health_check=list(HealthCheck)
)
STREAM_SETTINGS = settings(SETTINGS, max_examples=120)

_ABSENT = object()
#: Values a text-carrying field may hold: absent, null, empty, ASCII, not ASCII, not a string.
_VALUES: tuple[object, ...] = (_ABSENT, None, "", "a", "tok", "é", "日本", 0, 1, [], {}, True)
_CALLS: tuple[object, ...] = (
    _ABSENT,
    None,
    [],
    [None],
    [{"function": {"name": "f"}}],
    [{"function": {"arguments": "{}"}}],
    [{"function": {}}],
    "x",
)


def _put(d: dict[str, Any], key: str, value: object) -> None:
    if value is not _ABSENT:
        d[key] = value


@st.composite
def choice(draw: st.DrawFn) -> dict[str, Any]:
    """One choice, with every field that decides a token position sometimes odd."""
    c: dict[str, Any] = {"index": 0}
    _put(c, "text", draw(st.sampled_from((_ABSENT,) * 4 + _VALUES)))
    form = draw(st.sampled_from(("dict",) * 6 + ("absent", "null", "list", "string")))
    if form == "dict":
        delta: dict[str, Any] = {}
        _put(delta, "content", draw(st.sampled_from(("a", "a", "é", *_VALUES))))
        _put(delta, "reasoning_content", draw(st.sampled_from((_ABSENT,) * 3 + _VALUES)))
        _put(delta, "reasoning", draw(st.sampled_from((_ABSENT,) * 3 + _VALUES)))
        _put(delta, "role", draw(st.sampled_from((_ABSENT, "assistant", None))))
        _put(delta, "tool_calls", draw(st.sampled_from((_ABSENT,) * 3 + _CALLS)))
        c["delta"] = delta
    elif form != "absent":
        c["delta"] = {"null": None, "list": ["a"], "string": "a"}[form]
    _put(c, "finish_reason", draw(st.sampled_from((_ABSENT, None, "stop", "length"))))
    _put(c, "token_ids", draw(st.sampled_from((_ABSENT, None, [], [1], [1, 2]))))
    return c


@SETTINGS
@given(choice())
def test_what_plain_answer_takes_the_general_rule_reads_as_one_answer_token(
    c: dict[str, Any],
) -> None:
    content = plain_answer(c)
    if content is None:
        return
    assert content == c["delta"]["content"]
    assert token_position(c) == TOKEN
    assert has_text(c) == ANSWER
    assert chunks._choice_text(c) == content  # the text the ledger reads for the token


# --- whole streams, the shortcuts on and off ---------------------------------------------------

_EMITTER = b'{"id":"1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"tok"},"finish_reason":null}]}'
_VLLM = (
    b'{"id":"1","object":"chat.completion.chunk","created":1733100000,"model":"m","choices":'
    b'[{"index":0,"delta":{"content":" the"},"logprobs":null,"finish_reason":null,'
    b'"stop_reason":null,"token_ids":[279]}]}'
)
_TGI = (
    b'{"id":"1","object":"chat.completion.chunk","created":1733100000,"model":"tgi",'
    b'"system_fingerprint":"3.3.6-native","choices":[{"index":0,"delta":{"role":"assistant",'
    b'"content":" the"},"logprobs":null,"finish_reason":null}],"usage":null}'
)
COMMON = (_EMITTER, _VLLM, _TGI)
#: A delta with answer text and reasoning text at once, the reasoning not ASCII: the case the
#: shortcuts read otherwise than the general rule before they were held to it. They counted the
#: content's text alone ("a": room for no held-back token), so three such chunks and a finish
#: at max_tokens 9 read ``silent_truncation``; the general rule counts the chunk's text of every
#: kind ("aé": room for two more a chunk, and the tail), which holds the six missing positions.
_BOTH = '{"choices":[{"index":0,"delta":{"content":"a","reasoning_content":"é"},"finish_reason":null}]}'.encode()
_FINISH = b'{"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}'


@contextmanager
def general_rule_only() -> Iterator[None]:
    """Both shortcuts off: every chunk read by token_position, has_text and _choice_text."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(chunks, "plain_answer", lambda choice: None)
        m.setattr(chunks, "_typed_decode", None)
        yield


HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def _sse_reads(values: list[bytes]) -> list[bytes]:
    """One chunk of one event a read (the lane's read: the typed path's bytes)."""
    events = [b"data: " + v + b"\n\n" for v in values]
    return [HEAD, *(b"%x\r\n%s\r\n" % (len(e), e) for e in events), b"0\r\n\r\n"]


def _ws_reads(values: list[bytes]) -> list[bytes]:
    out = []
    for v in values:
        n = len(v)
        head = bytes((0x81, n)) if n < 126 else bytes((0x81, 126)) + n.to_bytes(2, "big")
        out.append(head + v)
    return out


def ended(protocol: str, values: list[bytes], expect: StreamExpectations) -> dict[str, Any]:
    if protocol == "sse":
        reads = _sse_reads(values)
        bursts = [Burst(0.1 + 0.01 * i, [r]) for i, r in enumerate(reads)]
        rec = drive_sse(bursts, 0.1 + 0.01 * len(reads), expect)
    else:
        reads = _ws_reads(values)
        bursts = [Burst(0.1 + 0.01 * i, [r]) for i, r in enumerate(reads)]
        rec = drive_ws([], bursts, 0.1 + 0.01 * len(reads), expect)
    out = dataclasses.asdict(rec)
    out["gap_s"], out["gap_t"] = list(rec.gap_s), list(rec.gap_t)
    return out


def same_either_way(protocol: str, values: list[bytes], expect: StreamExpectations) -> None:
    on = ended(protocol, values, expect)
    with general_rule_only():
        off = ended(protocol, values, expect)
    assert on == off


@st.composite
def stream_values(draw: st.DrawFn) -> list[bytes]:
    """A stream's chunks: the common ones, generated choices, generated chat chunks."""
    one = st.one_of(
        st.sampled_from((*COMMON, _BOTH, _FINISH)),
        choice().map(
            lambda c: json.dumps({"object": "chat.completion.chunk", "choices": [c]}).encode()
        ),
        chat_chunk().map(str.encode),
    )
    values = draw(st.lists(one, max_size=8))
    if draw(st.booleans()):
        values.append(b"[DONE]")
    return values


EXPECTS = (
    StreamExpectations(max_tokens=6),  # a forced length: the ledger judges missing positions
    StreamExpectations(max_tokens=6, forced_length=False),
    StreamExpectations(),
)


@STREAM_SETTINGS
@given(st.sampled_from(("sse", "ws")), stream_values(), st.sampled_from(EXPECTS))
def test_streams_end_the_same_with_the_shortcuts_on_and_off(
    protocol: str, values: list[bytes], expect: StreamExpectations
) -> None:
    same_either_way(protocol, values, expect)


@pytest.mark.parametrize("protocol", ["sse", "ws"])
def test_answer_text_beside_reasoning_text_reads_as_the_general_rule_reads_it(
    protocol: str,
) -> None:
    values = [_BOTH, _BOTH, _BOTH, _FINISH, b"[DONE]"]
    expect = StreamExpectations(max_tokens=9)
    same_either_way(protocol, values, expect)
    rec = ended(protocol, values, expect)
    assert (rec["outcome"], rec["tokens"]) == ("ok", 3), rec["error"]


@pytest.mark.parametrize("raw", COMMON, ids=["emitter", "vllm", "tgi"])
def test_the_common_chunks_take_both_shortcuts(raw: bytes) -> None:
    """Not vacuous: the typed copy and the dict rule both take the chunks the bench measures."""
    k = loads_token_chunk(raw)
    assert k is not None and k.choices
    c = k.choices[0]
    assert c.delta.content and not c.delta.reasoning_content and not c.delta.reasoning
    assert plain_answer(json.loads(raw)["choices"][0]) == c.delta.content
    values = [raw, raw, raw, _FINISH, b"[DONE]"]
    expect = StreamExpectations(max_tokens=3)
    # The typed copy: the token chunks after the first never reach the dict decode (the first
    # event is read as text, before the lane opens; the finish chunk is not a plain token).
    dict_decodes: list[bytes] = []
    real_decode = chunks.loads_chunk_bytes

    def counting_decode(data: bytes) -> Any:
        dict_decodes.append(data)
        return real_decode(data)

    with pytest.MonkeyPatch.context() as m:
        m.setattr(chunks, "loads_chunk_bytes", counting_decode)
        rec = ended("sse", values, expect)
    assert rec["outcome"] == "ok", rec["error"]
    assert dict_decodes == [_FINISH]
    # The dict form: every token chunk read in one pass by plain_answer.
    taken: list[str] = []
    real = chunks._answer_token

    def counting(m: Any, t: float, content: str, ids: object) -> None:
        taken.append(content)
        real(m, t, content, ids)

    with pytest.MonkeyPatch.context() as m:
        m.setattr(chunks, "_answer_token", counting)
        m.setattr(chunks, "_typed_decode", None)  # the dict form alone
        rec = ended("sse", values, expect)
    assert rec["outcome"] == "ok", rec["error"]
    assert taken == [c.delta.content] * 3
