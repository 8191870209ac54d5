"""The wire protocol (``docs/server.md``), without I/O: request validation and chunks.

Model names: any ``model`` is accepted and served by ``streamslo-tiny`` (a missing one means
the default); chunks echo the name the client asked for. Load tools pointed at the bundled
server with another target's model name keep working.

Errors are :class:`APIError` with the HTTP status; :meth:`APIError.body` is the
``{"error": {"message", "type", "code"}}``, with ``code`` the status.
"""

from __future__ import annotations

import itertools
import json
import random
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from streamslo.server.config import MAX_PROMPT_CHARS, MAX_TOKENS_LIMIT, MODEL_ID

__all__ = [
    "APIError",
    "ChunkFactory",
    "ParsedRequest",
    "error_body",
    "field_of",
    "load_json_object",
    "parse_request",
    "parse_temperature",
    "parse_tools",
    "tool_arguments",
]

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "method_not_allowed",
    408: "request_timeout",
    413: "request_too_large",
    415: "unsupported_media_type",
    429: "rate_limit_error",
    499: "client_closed_request",
    500: "server_error",
    503: "service_unavailable",
}
_ids = itertools.count(1)


def error_body(
    status: int, message: str, type_: str | None = None, param: str | None = None
) -> dict[str, object]:
    """OpenAI's error object: ``{"error": {"message", "type", "param", "code"}}``, with
    ``param`` the request field at fault (null when no one field is) and ``code`` the HTTP
    status, as vLLM sends it."""
    return {
        "error": {
            "message": message,
            "type": type_ or _TYPES.get(status, "error"),
            "param": param,
            "code": status,
        }
    }


def field_of(message: str) -> str | None:
    """The request field a validation message names first (``'max_tokens' must be...`` gives
    ``max_tokens``; ``'messages[0].content' ...`` gives ``messages``), or None."""
    m = _FIELD.search(message)
    return m.group(1) if m else None


_FIELD = re.compile(r"'([A-Za-z_][A-Za-z0-9_]*)")


class APIError(Exception):
    """A request the server refuses, with its HTTP status (and WebSocket close code) and, for
    a bad field, the field's name (``param``)."""

    def __init__(
        self, status: int, message: str, type_: str | None = None, param: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type_ or _TYPES.get(status, "error")
        self.param = param

    def body(self) -> dict[str, object]:
        """``{"error": {...}}`` for this error."""
        return error_body(self.status, self.message, self.type, self.param)

    @property
    def ws_close_code(self) -> int:
        """1013 for 429/503 (try later), 1009 for 413, 1011 for 5xx, else 1008."""
        if self.status in (429, 503):
            return 1013
        if self.status == 413:
            return 1009
        return 1011 if self.status >= 500 else 1008


@dataclass(frozen=True)
class ParsedRequest:
    """A validated request body."""

    kind: str
    """``chat`` or ``completion``."""
    model: str
    prompt: str
    max_tokens: int
    temperature: float
    seed: int
    ignore_eos: bool
    stream: bool
    include_usage: bool
    tools: bool = False
    """The request offered tools (and did not forbid them with ``tool_choice: "none"``): the
    answer ends with a streamed tool call, and that end is a natural one."""


def _bad(msg: str) -> APIError:
    return APIError(400, msg, param=field_of(msg))


def parse_tools(body: Mapping[str, object]) -> bool:
    """Whether a request offers tools: ``tools``, an array of objects (each dialect's shape),
    not turned off by ``tool_choice: "none"`` (Anthropic: ``{"type": "none"}``).

    Raises:
        APIError: 400 for ``tools`` that is not an array of objects.
    """
    tools = body.get("tools")
    if tools is None:
        return False
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise _bad("'tools' must be an array of objects")
    choice = body.get("tool_choice")
    off = choice == "none" or (isinstance(choice, dict) and choice.get("type") == "none")
    return bool(tools) and not off


def load_json_object(raw: bytes | str) -> dict[str, Any]:
    """A request body that must be one JSON object.

    Raises:
        APIError: 400 for bytes that are not JSON, JSON nested too deeply, or not an object.
    """
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise _bad(f"body is not valid JSON: {exc}") from None
    except RecursionError:
        # json's C scanner recurses per nesting level; 100,000 '[' used to be a 500.
        raise _bad("body is not valid JSON: nested too deeply") from None
    if not isinstance(body, dict):
        raise _bad("body must be a JSON object")
    return body


def parse_temperature(body: Mapping[str, object]) -> float:
    """A request's ``temperature`` (default 1.0, ``null`` too), a number in [0, 2].

    Raises:
        APIError: 400 for anything else.
    """
    temperature = body.get("temperature", 1.0)
    if temperature is None:
        return 1.0
    if (
        isinstance(temperature, bool)
        or not isinstance(temperature, int | float)
        or not 0 <= temperature <= 2
    ):
        raise _bad("'temperature' must be a number between 0 and 2")
    return float(temperature)


def _int(body: dict[str, Any], key: str, default: int | None) -> int | None:
    v = body.get(key, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int):
        raise _bad(f"'{key}' must be an integer, got {type(v).__name__}")
    return v


def _chat_prompt(messages: Any) -> str:
    if not isinstance(messages, list) or not messages:
        raise _bad("'messages' must be a non-empty array")
    parts: list[str] = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise _bad(f"'messages[{i}]' must be an object with a string 'role'")
        content = m.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):  # OpenAI content parts: keep the text ones
            for p in content:
                if not isinstance(p, dict) or not isinstance(p.get("text", ""), str):
                    raise _bad(f"'messages[{i}].content' parts must be objects with 'text'")
                parts.append(p.get("text", ""))
        elif content is not None:
            raise _bad(f"'messages[{i}].content' must be a string, an array or null")
    return "\n".join(parts)


def parse_request(
    raw: bytes | str,
    kind: str | None,
    default_max_tokens: int,
    default_stream: bool,
    rng: random.Random,
    max_tokens_limit: int = MAX_TOKENS_LIMIT,
) -> ParsedRequest:
    """Validate a JSON body.

    Args:
        raw: the body (HTTP) or text frame (WebSocket).
        kind: ``chat`` or ``completion``; None lets the body decide (``messages`` -> chat).
        default_max_tokens: used when ``max_tokens`` is absent.
        default_stream: used when ``stream`` is absent.
        rng: draws a seed for requests that bring none.
        max_tokens_limit: the largest ``max_tokens`` accepted.

    Raises:
        APIError: 400 with a message naming the field.
    """
    body = load_json_object(raw)
    if kind is None:
        kind = "chat" if "messages" in body else "completion"
    if kind == "chat":
        prompt = _chat_prompt(body.get("messages"))
    else:
        p = body.get("prompt")
        if isinstance(p, list) and len(p) == 1 and isinstance(p[0], str):
            p = p[0]
        if not isinstance(p, str):
            raise _bad("'prompt' is required and must be a string")
        prompt = p
    if len(prompt) > MAX_PROMPT_CHARS:
        raise APIError(
            400,
            f"prompt is {len(prompt)} characters; the limit is {MAX_PROMPT_CHARS}",
            "context_length_exceeded",
            "messages" if kind == "chat" else "prompt",
        )
    model = body.get("model", MODEL_ID)
    if model is None:
        model = MODEL_ID
    if not isinstance(model, str) or not model:
        raise _bad("'model' must be a non-empty string")
    max_tokens = _int(body, "max_tokens", None)
    if max_tokens is None:
        max_tokens = _int(body, "max_completion_tokens", default_max_tokens)
    if max_tokens is None or not 1 <= max_tokens <= max_tokens_limit:
        raise _bad(f"'max_tokens' must be between 1 and {max_tokens_limit}, got {max_tokens}")
    n = _int(body, "n", 1)
    if n != 1:
        raise _bad("only 'n': 1 is supported")
    temperature = parse_temperature(body)
    seed = _int(body, "seed", None)
    if seed is None:
        seed = rng.getrandbits(32)
    for key in ("ignore_eos", "stream"):
        if key in body and body[key] is not None and not isinstance(body[key], bool):
            raise _bad(f"'{key}' must be a boolean")
    opts = body.get("stream_options")
    if opts is not None and (
        not isinstance(opts, dict) or not isinstance(opts.get("include_usage", False), bool)
    ):
        raise _bad("'stream_options' must be an object with a boolean 'include_usage'")
    stream = body.get("stream")
    return ParsedRequest(
        kind=kind,
        model=model,
        prompt=prompt,
        max_tokens=max_tokens,
        temperature=float(temperature),
        seed=seed % (1 << 32),
        ignore_eos=bool(body.get("ignore_eos") or False),
        stream=default_stream if stream is None else stream,
        include_usage=bool((opts or {}).get("include_usage", False)),
        tools=parse_tools(body) if kind == "chat" else False,
    )


def tool_arguments(text: str, i: int, first: int, max_tokens: int) -> str:
    """The piece of a tool call's arguments that token ``i`` carries (``--tool-call-tokens``).

    Every dialect documents the arguments as JSON text that the deltas build up (OpenAI's
    ``arguments``, Anthropic's ``partial_json`` whose whole is the ``input`` object): the first
    tool token opens ``{"query": "``, each token adds its text inside that string, and the last
    one a forced length allows (``max_tokens - 1``) closes it, so a client that parses the
    arguments (the official SDKs do) gets an object. One token, one delta, as before.
    """
    inner = json.dumps(text, ensure_ascii=False)[1:-1]
    head = '{"query": "' if i == first else ""
    tail = '"}' if i == max_tokens - 1 else ""
    return head + inner + tail


class ChunkFactory:
    """Builds one request's chunks (SSE data or WS frames) and its non-streaming response.

    Args:
        req: the request.
        prompt_tokens: the prompt's length in tokens (usage).
        cached_tokens: prompt tokens served from the prefix cache (usage).
        reasoning: play a reasoning model: the first this many tokens are reasoning deltas
            (chat: ``delta.reasoning_content``; completions have no such field).
        tool: play a tool-calling model: the last this many tokens (of ``max_tokens``) are
            tool-call argument deltas (chat: ``delta.tool_calls``; not on completions).
    """

    framed = False
    """Whether :meth:`token` and friends return whole SSE events (the event dialects, whose
    events carry ``event:`` lines) rather than one event's data."""
    done = b"data: [DONE]\n\n"
    """What ends an SSE stream after the last chunk (the event dialects: nothing more)."""

    def __init__(
        self,
        req: ParsedRequest,
        prompt_tokens: int,
        cached_tokens: int = 0,
        reasoning: int = 0,
        tool: int = 0,
    ) -> None:
        self.req = req
        self.cached_tokens = cached_tokens
        """Prompt tokens served from the prefix cache (``usage.prompt_tokens_details``)."""
        self.chat = req.kind == "chat"
        prefix = "chatcmpl" if self.chat else "cmpl"
        self.id = f"{prefix}-{next(_ids):x}{random.getrandbits(32):08x}"
        self.created = int(time.time())
        self.prompt_tokens = prompt_tokens
        self.object = "chat.completion.chunk" if self.chat else "text_completion"
        # Every chunk shares this prefix; pre-encoding it keeps the per-token cost low.
        self._head = (
            f'{{"id":"{self.id}","object":"{self.object}","created":{self.created},'
            f'"model":{json.dumps(req.model)},"choices":[{{"index":0,'
        )
        self._reasoning_left = reasoning if self.chat else 0
        # Tool mode only: the token index where the tool call starts (None: never).
        self._tool_from = max(reasoning, req.max_tokens - tool) if tool and self.chat else None
        self._i = 0
        self.tool_called = False
        """A tool call began (a natural end is then ``tool_calls``)."""

    def role(self) -> str | None:
        """The first chat chunk (role, no content); None for completions."""
        if not self.chat:
            return None
        return self._head + '"delta":{"role":"assistant"},"finish_reason":null}]}'

    def token(self, text: str) -> str:
        """One content chunk holding one token."""
        t = json.dumps(text)
        if self.chat:
            if self._tool_from is not None:
                i = self._i
                self._i += 1
                if i >= self._tool_from:
                    piece = tool_arguments(text, i, self._tool_from, self.req.max_tokens)
                    return self._tool_token(json.dumps(piece))
            if self._reasoning_left:
                self._reasoning_left -= 1
                return f'{self._head}"delta":{{"reasoning_content":{t}}},"finish_reason":null}}]}}'
            return f'{self._head}"delta":{{"content":{t}}},"finish_reason":null}}]}}'
        return f'{self._head}"text":{t},"logprobs":null,"finish_reason":null}}]}}'

    def _tool_token(self, t: str) -> str:
        if not self.tool_called:
            self.tool_called = True
            call = f'{{"index":0,"id":"call_{self.id[-8:]}","type":"function","function":{{"name":"lookup","arguments":{t}}}}}'
        else:
            call = f'{{"index":0,"function":{{"arguments":{t}}}}}'
        return f'{self._head}"delta":{{"tool_calls":[{call}]}},"finish_reason":null}}]}}'

    def error(self, message: str) -> str:
        """An in-stream error (the server failed mid-stream)."""
        return json.dumps(error_body(500, message, "server_error"))

    def _usage(self, completion: int) -> dict[str, Any]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": self.prompt_tokens + completion,
            "prompt_tokens_details": {"cached_tokens": self.cached_tokens},
        }

    def finish(self, reason: str, completion_tokens: int) -> str:
        """The last chunk: empty delta/text, ``finish_reason``, and usage when asked."""
        if self.tool_called and (reason == "stop" or (reason == "length" and self.req.tools)):
            reason = "tool_calls"  # a tools request's answer ends with its call, as a model's
        choice: dict[str, Any] = {"index": 0, "finish_reason": reason}
        if self.chat:
            choice["delta"] = {}
        else:
            choice.update(text="", logprobs=None)
        chunk: dict[str, Any] = {
            "id": self.id,
            "object": self.object,
            "created": self.created,
            "model": self.req.model,
            "choices": [choice],
        }
        if self.req.include_usage:
            chunk["usage"] = self._usage(completion_tokens)
        return json.dumps(chunk, separators=(",", ":"))

    def complete(self, text: str, reason: str, completion_tokens: int) -> dict[str, object]:
        """The whole non-streaming response (``stream: false``)."""
        if self.chat:
            choice: dict[str, Any] = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": reason,
            }
            obj = "chat.completion"
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": reason}
            obj = "text_completion"
        return {
            "id": self.id,
            "object": obj,
            "created": self.created,
            "model": self.req.model,
            "choices": [choice],
            "usage": self._usage(completion_tokens),
        }
