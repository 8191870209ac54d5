"""One JSON chunk from a server, read without trusting it: decoding, and what it says.

``json.loads`` takes ``Infinity`` and ``NaN`` (not JSON; ``int()`` of them raises), and recurses
once per nesting level (a chunk nested 100,000 deep raises ``RecursionError``, which no caller
expected). :func:`loads_chunk` bounds the depth before decoding, rejects the non-standard
constants, and turns every failure into :class:`ChunkJSONError` (a ``ValueError``), so the
tracker's one ``except ValueError`` covers all of it.

The decode itself runs msgspec's C decoder first (three to four times faster than ``json``'s on
a chunk), checked: msgspec refuses everything ``json`` refuses, and where it accepts it returns
what ``json`` returns, except that it also refuses some texts ``json`` reads (an integer of
more than 64 bits' worth of digits past its range, a float out of range such as ``1e400``, an
escaped lone surrogate). Whatever msgspec refuses goes to the full parse, which decides, so
every chunk reads as ``json`` reads it and every error is ``json``'s
(``tests/stream/test_chunkjson_fast.py`` checks the two agree on generated chunks).
``STREAMSLO_CHUNK_JSON=stdlib`` (read at import) turns the fast path off: the bench's old path.
What it pays, where a chunk is decoded as a dict: 15,400 instructions a token on the emitter's
chunk, 20,900 on vLLM's (33-36 % of the read; ``python bench/bench_token_cpu.py --shortcuts``,
bench/RESULTS.md, "What each shortcut of the read path pays").
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable
from typing import Any, NoReturn

import msgspec

from streamslo.stream.caps import MAX_JSON_DEPTH

__all__ = [
    "ANSWER",
    "BARE_FINISH",
    "EMPTY_FINISH",
    "NOT_A_TOKEN",
    "REASONING",
    "TOKEN",
    "TOKEN_CHUNK_DECODE",
    "TOOL",
    "ChunkJSONError",
    "TokenChoice",
    "TokenChunk",
    "TokenDelta",
    "error_message",
    "error_status",
    "has_text",
    "inband_error",
    "json_depth_exceeds",
    "loads_chunk",
    "loads_chunk_bytes",
    "loads_token_chunk",
    "plain_answer",
    "token_position",
]

_REASONING_KEYS = ("reasoning_content", "reasoning")
_CONTENT_KEYS = ("content", *_REASONING_KEYS)

#: What a token position carries (:func:`has_text`'s answer; 0: not a token).
ANSWER = 1
"""Answer text (``content``, ``text``): the message a conversation sends back."""
REASONING = 2
"""Reasoning text (``reasoning_content``, vLLM's ``reasoning``; a dialect's reasoning deltas)."""
TOOL = 3
"""Tool-call arguments or a tool's name."""
# The characters that matter to nesting: quotes and backslashes (strings), brackets.
_SPECIAL = re.compile(r'["\\\[\]{}]')


class ChunkJSONError(ValueError):
    """A chunk that is not JSON we accept (syntax, depth, or a non-finite constant)."""


def _reject_constant(name: str) -> NoReturn:
    raise ChunkJSONError(f"non-standard JSON constant {name}")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)
_FAST: Callable[[str], Any] | None = (
    None if os.environ.get("STREAMSLO_CHUNK_JSON") == "stdlib" else msgspec.json.Decoder().decode
)
_FAST_BYTES: Callable[[bytes], Any] = msgspec.json.Decoder().decode


def json_depth_exceeds(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether ``text`` opens more than ``limit`` nested arrays/objects (strings skipped).

    Linear in the text, with no backtracking: it visits only quotes, backslashes and
    brackets, and stops as soon as the limit is passed.
    """
    if text.count("[") + text.count("{") <= limit:
        return False  # cheap and by far the common case: not enough brackets to be deep
    depth = 0
    in_string = False
    escaped_at = -1  # the position a backslash in a string escapes
    for m in _SPECIAL.finditer(text):
        pos = m.start()
        if pos == escaped_at:
            continue
        c = text[pos]
        if in_string:
            if c == "\\":
                escaped_at = pos + 1
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c == "[" or c == "{":
            depth += 1
            if depth > limit:
                return True
        elif c == "]" or c == "}":
            depth -= 1
    return False


def loads_chunk(text: str) -> Any:
    """Decode one chunk's JSON.

    Raises:
        ChunkJSONError: not JSON, nested deeper than ``MAX_JSON_DEPTH``, or holding
            ``Infinity``/``NaN``.
    """
    # The bracket count first (inline: it runs for every chunk): deep needs many brackets.
    if text.count("[") + text.count("{") > MAX_JSON_DEPTH and json_depth_exceeds(text):
        raise ChunkJSONError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
    if _FAST is not None:
        try:
            return _FAST(text)
        except Exception:  # refused (or out of its range): the full parse decides
            pass
    return _full_parse(text)


def loads_chunk_bytes(raw: bytes) -> Any:
    """Decode one chunk's JSON straight from the bytes read, or return ``None`` where only
    :func:`loads_chunk` of the decoded text may decide (a refusal, an error, a deep text, invalid
    UTF-8: the caller decodes the text, invalid bytes as U+FFFD, and reads it the usual way).
    A chunk that is JSON ``null`` returns ``None`` too, and is read the usual way.

    What it returns is what :func:`loads_chunk` returns for the same text: msgspec reads UTF-8
    bytes as it reads the text they encode, and refuses invalid UTF-8."""
    if _FAST is None or raw.count(b"[") + raw.count(b"{") > MAX_JSON_DEPTH:
        return None
    try:
        return _FAST_BYTES(raw)
    except Exception:  # refused: the text path decides
        return None


# The typed token chunk below holds only values of bounded depth: every key it knows has a
# scalar, a list of integers or a flat object as its type, and a key it does not know refuses the
# decode. So a chunk it decodes is nested four levels deep at most, and it needs no bracket count
# before the decode (``loads_chunk_bytes`` does, for the dict decode); a deeper or unknown shape
# is refused at the first value that breaks it, and the dict decode decides.
_Scalar = str | int | float | bool | None
_Flat = dict[str, _Scalar | dict[str, _Scalar]]  # a usage or timings object


class TokenDelta(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """A chat delta, as far as a token chunk's reading needs it (the other keys servers send
    beside a content token, scalars or null). Reasoning and tool calls are null or absent: a
    delta that carries them beside its content is no plain answer token (:func:`plain_answer`),
    so its type says so, at no cost per chunk, and the dict decode reads it."""

    content: _Scalar = None
    role: _Scalar = None
    refusal: _Scalar = None
    reasoning_content: None = None
    reasoning: None = None
    tool_calls: list[None] | None = None  # (a list of nulls carries no tool call)
    function_call: None = None


class TokenChoice(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """A choice, as far as a token chunk's reading needs it (UNSET: the key is absent)."""

    delta: TokenDelta | msgspec.UnsetType = msgspec.UNSET
    finish_reason: _Scalar | msgspec.UnsetType = msgspec.UNSET
    text: _Scalar | msgspec.UnsetType = msgspec.UNSET
    token_ids: list[int] | msgspec.UnsetType | None = msgspec.UNSET
    index: _Scalar = None
    logprobs: None = None  # (logprobs asked for: the dict decode reads them)
    stop_reason: _Scalar = None
    matched_stop: _Scalar = None
    prompt_token_ids: list[int] | None = None


class TokenChunk(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """An OpenAI chunk, as far as a token chunk's reading needs it: every key that can make a
    chunk anything but one plain token (UNSET: absent), and the keys servers send beside one
    (``id``, ``model``...: scalars). ``usage: null`` (OpenAI's, on every chunk before the last
    when usage is asked for) reads as no usage, as in the dict reading."""

    choices: list[TokenChoice] | msgspec.UnsetType = msgspec.UNSET
    usage: _Flat | None = None
    error: _Scalar | _Flat | msgspec.UnsetType = msgspec.UNSET
    timings: _Flat | msgspec.UnsetType | None = msgspec.UNSET
    object: _Scalar | msgspec.UnsetType = msgspec.UNSET
    id: _Scalar = None
    created: _Scalar = None
    model: _Scalar = None
    system_fingerprint: _Scalar = None
    service_tier: _Scalar = None
    obfuscation: _Scalar = None
    prompt_token_ids: list[int] | None = None
    prompt_text: _Scalar = None


_TYPED: Callable[[bytes], TokenChunk] = msgspec.json.Decoder(TokenChunk).decode
TOKEN_CHUNK_DECODE: Callable[[bytes], TokenChunk] | None = None if _FAST is None else _TYPED
"""msgspec's decode into :class:`TokenChunk`, raising on anything it does not hold (what
:func:`loads_token_chunk` calls), for a caller that calls it inline; None where the fast path
is off (``STREAMSLO_CHUNK_JSON=stdlib``, read at import)."""


def loads_token_chunk(raw: bytes) -> TokenChunk | None:
    """A chunk's JSON from the bytes read, into :class:`TokenChunk` (no dicts made), or None
    where :func:`loads_chunk_bytes` must decide: not JSON, a key the class does not know, a
    value deeper or of another type than it holds (a choice or delta that is not an object,
    logprobs, tool calls...). Keys repeated: the last one counts, as in ``json``. What it holds
    is what :func:`loads_chunk_bytes` holds under those keys."""
    if _FAST is None:
        return None
    try:
        return _TYPED(raw)
    except Exception:  # refused, or not this shape: the dict decode decides
        return None


def _full_parse(text: str) -> Any:
    """``json``'s decode, every failure a :class:`ChunkJSONError` (the reference reading)."""
    try:
        return _DECODER.decode(text)
    except RecursionError:  # a backstop: the depth scan above should have caught it
        raise ChunkJSONError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels") from None
    except ChunkJSONError:
        raise
    except ValueError as exc:
        raise ChunkJSONError(str(exc)[:120]) from None


def has_text(choice: dict[str, Any]) -> int:
    """Whether one choice of a chunk carries text in any field (a content chunk), and which
    kind: :data:`ANSWER`, :data:`REASONING` or :data:`TOOL` (all truthy), else 0."""
    text = choice.get("text")
    if isinstance(text, str) and text:
        return ANSWER
    delta = choice.get("delta")
    if not isinstance(delta, dict):
        return 0
    v = delta.get("content")
    if isinstance(v, str) and v:
        return ANSWER
    for key in _REASONING_KEYS:
        v = delta.get(key)
        if isinstance(v, str) and v:
            return REASONING
    calls = delta.get("tool_calls")
    if isinstance(calls, list):
        for call in calls:
            fn = call.get("function") if isinstance(call, dict) else None
            if isinstance(fn, dict) and (fn.get("arguments") or fn.get("name")):
                return TOOL
    return 0


#: What one choice of a chunk is (:func:`token_position`): not a token (the role announcement,
#: a delta with no text field, ``{}``) ...
NOT_A_TOKEN = 0
#: ... a token position (text in any field, or an empty text field: a token whose text the
#: server's detokenizer holds back, as vLLM sends for byte pieces and special tokens) ...
TOKEN = 1
#: ... or a chunk with no text that carries the ``finish_reason`` (an empty text field, or a
#: delta with no fields): a token only when the server's count says so (vLLM puts the finish on
#: its last token's chunk; OpenAI and llama.cpp send a separate finish chunk with no text). The
#: tracker decides at the end.
EMPTY_FINISH = 2
#: ... or a delta with no fields (``{}``) that carries the ``finish_reason``: the bare finish
#: chunk OpenAI and llama.cpp send after the last token; no token (a stream that ends inside an
#: unfinished UTF-8 sequence has its unsent tokens here: docs/outcomes.md).
BARE_FINISH = 3


def token_position(choice: dict[str, Any]) -> int:
    """Whether one choice of a chunk is a token position (docs/outcomes.md, "Token positions").

    Returns:
        :data:`TOKEN`, :data:`NOT_A_TOKEN`, :data:`EMPTY_FINISH` or :data:`BARE_FINISH`.
    """
    text = choice.get("text")
    if isinstance(text, str):  # completions: every text field is a token, an empty one too
        if text:
            return TOKEN
        return EMPTY_FINISH if choice.get("finish_reason") is not None else TOKEN
    delta = choice.get("delta")
    if not isinstance(delta, dict):
        return NOT_A_TOKEN
    empty = False
    for key in _CONTENT_KEYS:
        v = delta.get(key)
        if isinstance(v, str):
            if v:
                return TOKEN
            empty = True
    calls = delta.get("tool_calls")
    if isinstance(calls, list):
        for call in calls:
            fn = call.get("function") if isinstance(call, dict) else None
            if isinstance(fn, dict) and (fn.get("arguments") or fn.get("name")):
                return TOKEN
    if "role" in delta:
        return NOT_A_TOKEN  # the role announcement
    if choice.get("finish_reason") is not None:
        # The finish chunk: vLLM sends the last token's delta there ({"content": ""} when its
        # text was held back); OpenAI and llama.cpp a bare {} after the last token.
        return EMPTY_FINISH if empty else BARE_FINISH
    return TOKEN if empty else NOT_A_TOKEN  # {} / only nulls mid-stream: a keep-alive


def plain_answer(choice: dict[str, Any]) -> str | None:
    """The answer text of a choice that is plainly one answer token, recognised in one pass
    (most chunks of a chat stream), or None where the general rule must read the choice.

    Plainly an answer token: no ``text`` field, and a chat delta whose ``content`` is a
    non-empty string beside no other text (no reasoning, no tool call). The general rule says
    the same of such a choice: :func:`token_position` TOKEN, :func:`has_text` ANSWER, and its
    text of every kind is the content (``tests/stream/test_answer_rule.py`` holds them equal, and
    the typed token chunk's copy in :meth:`OpenAIChunks.read_bytes
    <streamslo.stream.chunks.OpenAIChunks.read_bytes>` to this). What it pays where a chunk is
    decoded as a dict: 15,300-15,800 instructions a token, 29-34 % of the read
    (bench/RESULTS.md, "What each shortcut of the read path pays").
    """
    if "text" in choice:
        return None
    delta = choice.get("delta")
    if type(delta) is not dict:
        return None
    content = delta.get("content")
    if (
        type(content) is str
        and content
        and not delta.get("reasoning_content")
        and not delta.get("reasoning")
        and not delta.get("tool_calls")
    ):
        return content
    return None


def inband_error(obj: dict[str, Any], event: str = "message") -> tuple[str, int | None] | None:
    """The server's error, if this JSON object (an SSE event's data, a WS message, an error
    body) is one, in any of the shapes servers send (docs/outcomes.md, "Errors"):

    * OpenAI: ``{"error": {"message", "type", "code"}}``;
    * vLLM: ``{"object": "error", "message", "type", "code"}``;
    * TGI: ``{"error": "...", "error_type": "..."}``;
    * an SSE event named ``error`` (``event: error``), whatever its data.

    Returns:
        (message, the status its ``code`` carries or None), or None when it is no error.
    """
    err = obj.get("error")
    if err is not None:
        message = error_message(err)
        if isinstance(err, str):
            etype = obj.get("error_type")
            if isinstance(etype, str) and etype:
                message = f"{message} ({etype[:40]})"
            return message, error_status(obj, 0) or None
        return message, error_status(err, 0) or None
    if obj.get("object") == "error":
        message = error_message(obj)
        etype = obj.get("type")
        if isinstance(etype, str) and etype:
            message = f"{message} ({etype[:40]})"
        return message, error_status(obj, 0) or None
    if event == "error":
        message = error_message(obj) or error_message(obj.get("detail"))
        return message or "an SSE error event", error_status(obj, 0) or None
    return None


def error_status(error: Any, default: int) -> int:
    """The HTTP-like status an error object carries in ``code``, else ``default``.

    Only a whole number from 400 to 599 (an int, an integral finite float, or up to three
    digits as a string) counts; anything else (``1e400``, a 5,000-digit string) is no status.
    """
    if not isinstance(error, dict):
        return default
    code = error.get("code")
    value: int | None = None
    if isinstance(code, bool):
        value = None
    elif isinstance(code, int):
        value = code
    elif (isinstance(code, float) and math.isfinite(code) and code.is_integer()) or (
        isinstance(code, str) and 1 <= len(code) <= 3 and code.isascii() and code.isdigit()
    ):
        value = int(code)
    if value is not None and 400 <= value <= 599:
        return value
    return default


def error_message(error: Any) -> str:
    """A short message for an error object (never the repr of a big or deep structure)."""
    if isinstance(error, dict):
        msg = error.get("message")
        return msg[:200] if isinstance(msg, str) else ""
    if isinstance(error, str):
        return error[:200]
    if isinstance(error, (int, float)):
        return str(error)[:200]
    return f"an error that is a JSON {type(error).__name__}"
