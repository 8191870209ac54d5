"""What a message means, per dialect: the dialect objects' contract, and OpenAI's chunks.

A dialect object reads one framed message (an SSE event's data and name, or a WebSocket text
message) and tells the stream's machine (:class:`~streamslo.stream.tracker.StreamTracker`) what
it was, through a few calls: ``token`` (a token of a kind and a count), ``end`` (the terminal
marker), ``error`` (an in-band error), ``finish(..., MALFORMED, ...)`` (a message the dialect
cannot read), or nothing but ``idle`` (a keep-alive, not progress). It records what the message
says of the request (usage, the stop reason) in the record. A server quirk is a few lines in one
dialect object; the machine's rules are the same for every dialect. One object per stream (a
dialect may keep a running count).

This module holds the contract (:class:`DialectReader`) and the OpenAI chunk dialects
(``openai-chat`` and ``openai-completions``, one reader: a chunk's ``choices`` carry either
``delta`` or ``text``); the event dialects are in :mod:`streamslo.stream.dialects`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import msgspec

from streamslo.stream.cause import Cause
from streamslo.stream.chunkjson import (
    ANSWER,
    BARE_FINISH,
    NOT_A_TOKEN,
    TOKEN,
    TOKEN_CHUNK_DECODE,
    TokenChunk,
    error_message,
    has_text,
    inband_error,
    loads_chunk,
    loads_chunk_bytes,
    plain_answer,
    token_position,
)
from streamslo.stream.counts import EndRules, Ledger
from streamslo.stream.outcome import Outcome
from streamslo.stream.timing import StreamRecord

__all__ = ["CHAT_RULES", "DialectReader", "Machine", "OpenAIChunks", "record_usage"]

_DONE = "[DONE]"
_UNSET = msgspec.UNSET
# The typed token chunk's decode, called inline (chunkjson.loads_token_chunk without its call:
# 250 instructions a token, 1 %); None: the typed reading off (STREAMSLO_CHUNK_JSON=stdlib; the
# tests and bench_token_cpu --off typed-chunk set it so).
_typed_decode: Callable[[bytes], TokenChunk] | None = TOKEN_CHUNK_DECODE

#: The OpenAI chunk dialects' stop reasons (docs/outcomes.md, "Stop reasons").
CHAT_RULES = EndRules(
    terminal="[DONE]",
    noun="token positions",
    length=frozenset({"length"}),
    complete=frozenset(
        {"stop", "length", "tool_calls", "function_call", "eos_token", "stop_sequence"}
    ),
    cut=frozenset({"content_filter"}),
    tool=frozenset({"tool_calls", "function_call"}),
)


class Machine(Protocol):
    """What a dialect object tells the stream's machine, and what it may set there
    (:class:`~streamslo.stream.tracker.StreamTracker` is the one machine)."""

    rec: StreamRecord
    """The record: a dialect writes the usage and the stop reason it reads."""
    ledger: Ledger
    """What the arrivals can account for beyond one token each."""
    text: list[str] | None
    """The answer's text, when the run keeps it."""
    idle: int
    """Messages without a token since the last token (a keep-alive adds one)."""
    idle_what: str
    """What those messages were, for the stall message."""
    content_seen: bool
    """The stream began (a dialect's first event says so before any token)."""
    pending_t: float | None
    """When a message arrived that is the last token only if the terminal's count says so."""

    def token(self, t: float, kind: int = ..., n: int = ...) -> None:
        """Tokens arrived."""

    def end(self, t: float) -> None:
        """The terminal marker arrived."""

    def finish(
        self, t: float, outcome: Outcome, error: str = ..., cause: Cause | None = ...
    ) -> None:
        """Decide the outcome and its cause (``malformed`` for a message the dialect cannot
        read: ``bad_message``, the default)."""

    def error(self, t: float, message: str, status: int | None) -> None:
        """An in-band error."""


class DialectReader(Protocol):
    """What one message of a dialect means, told to the stream's machine."""

    @property
    def terminal(self) -> str:
        """The terminal marker's name, for messages (``[DONE]``, ``message_stop``...)."""

    @property
    def rules(self) -> EndRules:
        """What the dialect's stop reasons mean."""

    @property
    def after_end(self) -> str | None:
        """A message that may follow the terminal marker and changes nothing (the event
        dialects' ``[DONE]``), or None: any message after it is ``malformed``."""

    def read(self, m: Machine, t: float, data: str, event: str) -> None:
        """One message that arrived at ``t`` (``event``: the SSE event name, ``message`` on
        WebSocket), before the terminal marker."""


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def record_usage(m: Machine, usage: dict[str, object], prompt: str, output: str) -> None:
    """A usage object's counts into the record: the output and prompt tokens, and the prompt
    tokens served from the server's cache (``prompt_tokens_details.cached_tokens``,
    Responses' ``input_tokens_details.cached_tokens``, Anthropic's ``cache_read_input_tokens``)."""
    rec = m.rec
    out = _int(usage.get(output))
    if out is not None:
        rec.usage_completion_tokens = out
    inp = _int(usage.get(prompt))
    if inp is not None:
        rec.usage_prompt_tokens = inp
    details = usage.get("prompt_tokens_details", usage.get("input_tokens_details"))
    cached = (
        details.get("cached_tokens")
        if isinstance(details, dict)
        else usage.get("cache_read_input_tokens")
    )
    cached = _int(cached)
    if cached is not None and cached >= 0:
        rec.cached_tokens = cached


def _choice_text(choice: dict[str, object]) -> str:
    """The text a choice carries, of any kind (answer, reasoning, tool-call arguments)."""
    text = choice.get("text")
    if isinstance(text, str):
        return text
    delta = choice.get("delta")
    if not isinstance(delta, dict):
        return ""
    parts = [
        v
        for k in ("content", "reasoning_content", "reasoning")
        if isinstance(v := delta.get(k), str)
    ]
    calls = delta.get("tool_calls")
    if isinstance(calls, list):
        for call in calls:
            fn = call.get("function") if isinstance(call, dict) else None
            if isinstance(fn, dict):
                parts.extend(v for k in ("name", "arguments") if isinstance(v := fn.get(k), str))
    return "".join(parts)


def _server_count(chunk: dict[str, object]) -> int:
    """The server's own count of the tokens it sent so far, carried on this chunk, or -1:
    llama.cpp's ``timings.predicted_n`` (asked with ``timings_per_token``), or a ``usage`` on
    a chunk that also carries a choice (vLLM's ``continuous_usage_stats``)."""
    timings = chunk.get("timings")
    if type(timings) is dict:
        n = timings.get("predicted_n")
        if type(n) is int and n >= 0:
            return n
    usage = chunk.get("usage")
    if type(usage) is dict:
        n = usage.get("completion_tokens")
        if type(n) is int and n >= 0:
            return n
    return -1


def _content_text(choices: list[object]) -> str:
    """The answer text of a content chunk (``delta.content`` or ``text``; reasoning and tool
    calls are not part of the message a conversation sends back)."""
    for choice in choices:
        if isinstance(choice, dict):
            delta = choice.get("delta")
            text = delta.get("content") if isinstance(delta, dict) else choice.get("text")
            if isinstance(text, str) and text:
                return text
    return ""


def _answer_token(m: Machine, t: float, content: str, ids: object) -> None:
    """The common chunk's token (answer text ``content``, no stop reason, no server count): as
    many ANSWER tokens as its token ids list (vLLM's, an exact count; none: not a token), else
    one, as :meth:`OpenAIChunks._chunk`'s general reading makes it."""
    if type(ids) is list:
        m.ledger.counted = True
        if not ids:
            m.idle += 1
            return
        n = len(ids)
    else:
        n = 1
        if not content.isascii():
            m.ledger.add_text(content)
    if m.text is not None:
        m.text.append(content)
    m.token(t, ANSWER, n)


class OpenAIChunks:
    """OpenAI's streamed chunks (``/v1/chat/completions``, ``/v1/completions``): a chunk with a
    token position is a token (docs/outcomes.md, "Token positions"), ``[DONE]`` the terminal
    marker, an ``error`` object an in-band error."""

    __slots__ = ("_misses", "_server_n")

    terminal = _DONE
    rules = CHAT_RULES
    after_end: str | None = None

    def __init__(self) -> None:
        self._server_n = 0  # the server's own running count at its last counted chunk
        self._misses = 0  # typed decodes in a row that were not a plain token

    def read(self, m: Machine, t: float, data: str, event: str) -> None:
        if data == _DONE or (_DONE in data and data.strip() == _DONE):  # (no strip per chunk)
            m.end(t)
            return
        if event == "ping":  # an SSE keep-alive event, whatever its data: not progress
            m.idle += 1
            return
        try:
            chunk = loads_chunk(data)
        except ValueError as exc:
            if event == "error":  # an SSE error event: its data is the server's message
                m.error(t, data.strip()[:200] or "an SSE error event", None)
            elif not data.strip():
                m.idle += 1  # an empty event / message: a keep-alive, not progress
            else:
                m.finish(t, Outcome.MALFORMED, f"chunk is not JSON ({exc}): {data[:80]!r}")
            return
        if not isinstance(chunk, dict):
            if event == "error":
                m.error(t, error_message(chunk), None)
            else:
                m.finish(t, Outcome.MALFORMED, f"chunk is not a JSON object: {data[:80]!r}")
            return
        self._chunk(m, t, chunk, event)

    def read_bytes(self, m: Machine, t: float, raw: bytes) -> None:
        """One SSE ``message`` event's data as the bytes read (the SSE decoder's
        :meth:`~streamslo.stream.sse.SSEDecoder.one_event`): decoded from the bytes where it
        can be (:func:`~streamslo.stream.chunkjson.loads_token_chunk`'s decode, then
        :func:`~streamslo.stream.chunkjson.loads_chunk_bytes`), else read as :meth:`read` reads
        its text. Same meaning, less work."""
        if raw == b"[DONE]":
            m.end(t)
            return
        typed = _typed_decode
        if typed is not None and self._misses < 2:
            # A token chunk typed (TokenChunk: no dicts, keys read as attributes) and read in one
            # pass, as _chunk's common chunk: the typed copy of chunkjson.plain_answer (reasoning
            # or a tool call beside the content does not decode typed: TokenDelta), held equal
            # to the general rule by tests/stream/test_answer_rule.py. It pays 9,000 instructions
            # a token on the emitter's chunk, 11,800 on vLLM's (29-32 % of the read, SSE and
            # WebSocket alike; bench/RESULTS.md, "What each shortcut of the read path pays").
            # Anything else is decoded again as a dict, and two misses in a row (a server whose
            # every chunk carries a count) leave this stream on the dict decode alone.
            try:
                k: TokenChunk | None = typed(raw)
            except Exception:  # refused, or not this shape: the dict decode decides
                k = None
            if k is not None:
                choices = k.choices
                if (
                    k.usage is None
                    and k.error is _UNSET
                    and k.timings is _UNSET
                    and type(choices) is list
                    and len(choices) == 1
                    and k.object != "error"
                ):
                    c = choices[0]
                    fr = c.finish_reason
                    delta = c.delta
                    if (fr is None or fr is _UNSET) and c.text is _UNSET and delta is not _UNSET:
                        content = delta.content
                        if type(content) is str and content:
                            self._misses = 0
                            ids = c.token_ids
                            if ids is _UNSET and m.text is None and content.isascii():
                                m.token(t, ANSWER, 1)  # (_answer_token's commonest case)
                            else:
                                _answer_token(m, t, content, ids)
                            return
            self._misses += 1
        chunk = loads_chunk_bytes(raw)
        if type(chunk) is not dict:
            self.read(m, t, raw.decode("utf-8", "replace"), "message")
            return
        self._chunk(m, t, chunk, "message")

    def _chunk(self, m: Machine, t: float, chunk: dict[str, Any], event: str) -> None:
        """A chunk that is a JSON object: a token, a stop reason, usage, an in-band error."""
        if (
            event == "message"
            and chunk.get("usage") is None
            and "error" not in chunk
            and "timings" not in chunk
        ):
            # The common chunk, read in one pass: one choice that is plainly an answer token
            # (chunkjson.plain_answer) and nothing else that counts (no stop reason, server
            # count or error): ANSWER tokens, one or as many as its token ids list, as the
            # general reading below makes them (tests/stream/test_answer_rule.py). It pays
            # 15,300-15,800 instructions a token where the typed decode misses (29-34 %;
            # bench/RESULTS.md, "What each shortcut of the read path pays").
            choices = chunk.get("choices")
            if type(choices) is list and len(choices) == 1:
                choice = choices[0]
                if (
                    type(choice) is dict
                    and choice.get("finish_reason") is None
                    and chunk.get("object") != "error"
                ):
                    content = plain_answer(choice)
                    if content is not None:
                        _answer_token(m, t, content, choice.get("token_ids"))
                        return
        if "error" in chunk or event != "message" or chunk.get("object") == "error":
            found = inband_error(chunk, event)
            if found is not None:
                m.error(t, *found)
                return
        choices = chunk.get("choices")
        usage = chunk.get("usage")
        if choices is None and usage is None:
            m.finish(t, Outcome.MALFORMED, "chunk has neither choices nor usage")
            return
        if isinstance(usage, dict):
            record_usage(m, usage, "prompt_tokens", "completion_tokens")
        elif usage is not None:
            m.finish(t, Outcome.MALFORMED, "usage is not an object")
            return
        if choices is None:
            m.idle += 1
            return
        if not isinstance(choices, list):
            m.finish(t, Outcome.MALFORMED, "choices is not a list")
            return
        # The choices: a token (counted by the server's list or running count, or one), the
        # stop reason, or neither.
        rec = m.rec
        position = 0
        kind = 0  # the token's kind (chunkjson.ANSWER, REASONING, TOOL)
        listed = -1  # tokens the chunk lists in ``token_ids`` (vLLM's return_token_ids); -1: none
        text = ""  # the token's text, of any kind
        finish_here = False
        for choice in choices:
            if not isinstance(choice, dict):
                m.finish(t, Outcome.MALFORMED, "a choice is not an object")
                return
            fr = choice.get("finish_reason")
            if fr is not None:
                if not isinstance(fr, str):
                    m.finish(t, Outcome.MALFORMED, "finish_reason is not a string")
                    return
                rec.finish_reason = fr
                finish_here = True
            if position != TOKEN:
                content = plain_answer(choice)
                if content is not None:
                    # Plainly an answer token: what token_position, has_text and _choice_text
                    # say of it, in one pass.
                    position = TOKEN
                    kind = ANSWER
                    text = content
                else:
                    p = token_position(choice)
                    if p:
                        position = p
                        if p == TOKEN:
                            # An empty text field (a held-back token) is an answer token.
                            kind = has_text(choice) or ANSWER
                            text = _choice_text(choice)
            ids = choice.get("token_ids")
            if type(ids) is list:
                listed = len(ids)
        if position == NOT_A_TOKEN:
            m.idle += 1
            return
        ledger = m.ledger
        if listed >= 0:
            # The server lists the chunk's tokens: that count is exact, whether it merged several
            # tokens into one chunk (vLLM, when its API server falls behind its engine) or held
            # a token's text back. A chunk listing none carries no token.
            ledger.counted = True
            if listed:
                if m.text is not None:
                    m.text.append(_content_text(choices))
                m.token(t, kind or has_text(choices[0]) or ANSWER, listed)
            else:
                m.idle += 1
            return
        # A count on the finish chunk is the final one (llama.cpp's last timings, a usage riding on
        # the last chunk), not a running count, unless the chunks before it carried one too.
        count = -1
        if (usage is not None or "timings" in chunk) and (ledger.counted or not finish_here):
            count = _server_count(chunk)  # (most chunks carry neither: no call)
        if position == TOKEN:
            n = 1
            if count >= 0:
                # The server's running count (llama.cpp's timings, continuous usage): a chunk
                # holds the tokens counted since the last (llama.cpp sends no chunk for a token
                # with no text, and holds back an unfinished UTF-8 sequence's).
                ledger.counted = True
                n = max(1, count - self._server_n)
                self._server_n = count
            elif not text.isascii():
                ledger.add_text(text)
            if m.text is not None:
                m.text.append(_content_text(choices))
            m.token(t, kind, n)
        elif count >= 0:  # the finish chunk, with the server's count: the unsent tail's tokens
            ledger.counted = True
            ledger.tail = True
            n = count - self._server_n
            self._server_n = count
            if n > 0:
                m.token(t, ANSWER, n)
        elif position == BARE_FINISH:
            ledger.tail = True
        else:
            m.pending_t = t
