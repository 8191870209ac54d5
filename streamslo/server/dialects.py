"""The bundled server's OpenAI Responses (``POST /v1/responses``) and Anthropic Messages
(``POST /v1/messages``) dialects, without I/O: request validation and the event streams.

Both reuse the one generation path (the same :class:`~streamslo.server.engine.TokenStream`,
the same pump and back-pressure), so naive and fixed modes behave the same in every dialect;
only the bytes around each token differ. Each token is one delta event; with
``--reasoning-tokens N`` the first N are reasoning deltas (``response.reasoning_text.delta``;
``thinking_delta`` in a ``thinking`` block). ``ignore_eos`` (the extension the OpenAI dialects
take) is honoured; a forced length ends as the dialect ends a length: ``response.incomplete``
with ``incomplete_details.reason: "max_output_tokens"``; ``stop_reason: "max_tokens"``. Usage is
always sent (in the final response object; in ``message_delta``), counting every token,
reasoning included, as both APIs count output tokens.
"""

from __future__ import annotations

import json
import random
from typing import Any

from streamslo.server.config import MAX_PROMPT_CHARS, MAX_TOKENS_LIMIT, MODEL_ID
from streamslo.server.protocol import (
    APIError,
    ChunkFactory,
    ParsedRequest,
    field_of,
    load_json_object,
    parse_temperature,
    parse_tools,
    tool_arguments,
)

__all__ = [
    "DIALECT_KINDS",
    "EventChunks",
    "MessagesChunks",
    "ResponsesChunks",
    "anthropic_error_body",
    "anthropic_request_id",
    "chunk_factory",
    "parse_dialect_request",
]

#: Request kinds of the event dialects (``ParsedRequest.kind``).
DIALECT_KINDS = ("responses", "messages")

_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}


def anthropic_error_body(
    status: int, message: str, request_id: str | None = None
) -> dict[str, object]:
    """Anthropic's error object: ``{"type": "error", "error": {"type", "message"}}``, with the
    ``request_id`` an HTTP error body carries (an in-stream ``error`` event has none). Other
    4xx statuses are ``invalid_request_error``, as Anthropic's errors page says."""
    default = "invalid_request_error" if 400 <= status < 500 else "api_error"
    body: dict[str, object] = {
        "type": "error",
        "error": {"type": _ANTHROPIC_TYPES.get(status, default), "message": message},
    }
    if request_id is not None:
        body["request_id"] = request_id
    return body


def anthropic_request_id() -> str:
    """A ``req_...`` id for an HTTP error body (and its ``request-id`` header)."""
    return f"req_{random.getrandbits(96):024x}"


def _bad(msg: str) -> APIError:
    return APIError(400, msg, param=field_of(msg))


def _text_of(content: Any, where: str) -> str:
    """The text of a message's content: a string, or content blocks / parts with ``text``."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for i, block in enumerate(content):
            if not isinstance(block, dict):
                raise _bad(f"'{where}[{i}]' must be an object")
            text = block.get("text", "")
            if not isinstance(text, str):
                raise _bad(f"'{where}[{i}].text' must be a string")
            parts.append(text)
        return "\n".join(parts)
    if content is None:
        return ""
    raise _bad(f"'{where}' must be a string or an array")


def _int(body: dict[str, Any], key: str) -> int | None:
    v = body.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise _bad(f"'{key}' must be an integer, got {type(v).__name__}")
    return v


def parse_dialect_request(
    raw: bytes | str,
    kind: str,
    default_max_tokens: int,
    rng: random.Random,
    max_tokens_limit: int = MAX_TOKENS_LIMIT,
) -> ParsedRequest:
    """Validate a Responses (``kind="responses"``) or Messages (``kind="messages"``) body.

    Responses: ``input`` (a string, or message items whose ``content`` is a string or parts with
    ``text``), ``instructions``, ``max_output_tokens`` (default: the server's), ``stream``.
    Messages: ``messages`` (required), ``system``, ``max_tokens`` (required, as Anthropic's API
    requires it), ``stream``. Both: ``model``, ``temperature``, ``ignore_eos``.

    Raises:
        APIError: 400 naming the field.
    """
    body = load_json_object(raw)
    parts: list[str] = []
    if kind == "responses":
        if isinstance(body.get("instructions"), str):
            parts.append(body["instructions"])
        items = body.get("input")
        if isinstance(items, str):
            parts.append(items)
        elif isinstance(items, list) and items:
            for i, item in enumerate(items):
                if not isinstance(item, dict):
                    raise _bad(f"'input[{i}]' must be an object")
                parts.append(
                    _text_of(item.get("content", item.get("output")), f"input[{i}].content")
                )
        else:
            raise _bad("'input' is required: a string or a non-empty array")
        max_tokens = _int(body, "max_output_tokens")
        if max_tokens is None:
            max_tokens = default_max_tokens
        name = "max_output_tokens"
    else:
        system = body.get("system")
        if system is not None:
            parts.append(_text_of(system, "system"))
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise _bad("'messages' must be a non-empty array")
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or m.get("role") not in ("user", "assistant"):
                raise _bad(f"'messages[{i}]' must be an object with role 'user' or 'assistant'")
            parts.append(_text_of(m.get("content"), f"messages[{i}].content"))
        max_tokens = _int(body, "max_tokens")
        if max_tokens is None:
            raise _bad("'max_tokens' is required")
        name = "max_tokens"
    prompt = "\n".join(parts)
    if len(prompt) > MAX_PROMPT_CHARS:
        raise APIError(
            400,
            f"prompt is {len(prompt)} characters; the limit is {MAX_PROMPT_CHARS}",
            "context_length_exceeded",
            "input" if kind == "responses" else "messages",
        )
    if not 1 <= max_tokens <= max_tokens_limit:
        raise _bad(f"'{name}' must be between 1 and {max_tokens_limit}, got {max_tokens}")
    model = body.get("model", MODEL_ID)
    if model is None:
        model = MODEL_ID
    if not isinstance(model, str) or not model:
        raise _bad("'model' must be a non-empty string")
    temperature = parse_temperature(body)
    for key in ("ignore_eos", "stream"):
        if key in body and body[key] is not None and not isinstance(body[key], bool):
            raise _bad(f"'{key}' must be a boolean")
    seed = _int(body, "seed")
    return ParsedRequest(
        kind=kind,
        model=model,
        prompt=prompt,
        max_tokens=max_tokens,
        temperature=float(temperature),
        seed=(rng.getrandbits(32) if seed is None else seed) % (1 << 32),
        ignore_eos=bool(body.get("ignore_eos") or False),
        stream=bool(body.get("stream") or False),
        include_usage=True,
        tools=parse_tools(body),
    )


def _event(name: str, obj: dict[str, Any]) -> str:
    return f"event: {name}\ndata: {json.dumps(obj, separators=(',', ':'))}\n\n"


class EventChunks(ChunkFactory):
    """What the event dialects' writers share: whole SSE events (``event:`` lines, no
    ``[DONE]``), an id of their own, and which token is a reasoning, an answer or a tool-call
    delta (``--reasoning-tokens``, ``--tool-call-tokens``: in every event dialect, unlike the
    OpenAI ones, where only chat has them).

    Args:
        req: the request.
        prompt_tokens: the prompt's length in tokens (usage).
        reasoning: the first this many tokens are reasoning deltas.
        tool: the last this many tokens (of ``max_tokens``) are tool-call argument deltas.
        cached_tokens: prompt tokens served from the prefix cache (usage).
    """

    framed = True
    done = b""
    id_prefix = ""
    """The id's prefix (``resp``, ``msg``), before 16 random hex digits."""

    def __init__(
        self,
        req: ParsedRequest,
        prompt_tokens: int,
        reasoning: int = 0,
        tool: int = 0,
        cached_tokens: int = 0,
    ) -> None:
        super().__init__(req, prompt_tokens, cached_tokens)
        self.id = f"{self.id_prefix}_{random.getrandbits(64):016x}"
        self._left = reasoning
        """Reasoning tokens still to come."""
        # The token index where the tool call starts (None: never).
        self._tool_from = max(reasoning, req.max_tokens - tool) if tool else None
        self._i = 0
        self._phase = ""
        """The block or item open now ("": none yet)."""
        self._texts: list[str] = []
        """The answer's tokens (for the final object)."""

    def _tool_piece(self, text: str) -> str:
        """The arguments' piece of the tool token just taken by :meth:`_next_kind`."""
        assert self._tool_from is not None
        return tool_arguments(text, self._i - 1, self._tool_from, self.req.max_tokens)

    def _next_kind(self) -> str:
        """What the next token is: ``tool``, ``reasoning`` or ``answer``."""
        if self._tool_from is not None:
            i = self._i
            self._i += 1
            if i >= self._tool_from:
                return "tool"
        if self._left:
            self._left -= 1
            return "reasoning"
        return "answer"


class ResponsesChunks(EventChunks):
    """One Responses API stream: ``response.created`` ... deltas ... ``response.completed``
    or ``response.incomplete``."""

    id_prefix = "resp"

    def __init__(
        self,
        req: ParsedRequest,
        prompt_tokens: int,
        reasoning: int = 0,
        tool: int = 0,
        cached_tokens: int = 0,
    ) -> None:
        super().__init__(req, prompt_tokens, reasoning, tool, cached_tokens)
        self._args: list[str] = []
        self._fc_id = f"fc_{random.getrandbits(64):016x}"
        self._reasoning = 0
        self._seq = 0
        self._thoughts: list[str] = []
        self._msg_id = f"msg_{random.getrandbits(64):016x}"
        self._rs_id = f"rs_{random.getrandbits(64):016x}"
        self._item_status = "completed"  # "incomplete" when the length runs out
        # The answer delta's fixed part, encoded once (a token's event is this plus its text).
        self._delta_head = (
            'event: response.output_text.delta\ndata: {"type":"response.output_text.delta",'
            f'"item_id":"{self._msg_id}","output_index":OUT,"content_index":0,"logprobs":[],"delta":'
        )

    def _ev(self, name: str, **fields: Any) -> str:
        obj = {"type": name, **fields, "sequence_number": self._seq}
        self._seq += 1
        return _event(name, obj)

    def _response(self, status: str, **extra: Any) -> dict[str, Any]:
        # Every field the Response object's reference marks required (the nullable ones
        # included): a client that validates it (the OpenAI SDKs' models) accepts it.
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created,
            "status": status,
            "error": None,
            "incomplete_details": None,
            "instructions": None,
            "max_output_tokens": self.req.max_tokens,
            "metadata": {},
            "model": self.req.model,
            "output": [],
            "parallel_tool_calls": True,
            "temperature": self.req.temperature,
            "tool_choice": "auto",
            "tools": [],
            "top_p": 1.0,
            "usage": None,
            **extra,
        }

    def role(self) -> str | None:
        return self._ev("response.created", response=self._response("in_progress")) + self._ev(
            "response.in_progress", response=self._response("in_progress")
        )

    def _out_index(self) -> int:
        return 1 if self._reasoning else 0

    def _open_message(self) -> str:
        out = ""
        if self._phase == "reasoning":
            out += self._close_reasoning()
        self._phase = "message"
        i = self._out_index()
        self._delta_head = self._delta_head.replace("OUT", str(i))
        out += self._ev(
            "response.output_item.added",
            output_index=i,
            item={
                "id": self._msg_id,
                "type": "message",
                "status": "in_progress",
                "role": "assistant",
                "content": [],
            },
        )
        out += self._ev(
            "response.content_part.added",
            item_id=self._msg_id,
            output_index=i,
            content_index=0,
            part={"type": "output_text", "text": "", "annotations": []},
        )
        return out

    def _close_reasoning(self) -> str:
        text = "".join(self._thoughts)
        return self._ev(
            "response.reasoning_text.done",
            item_id=self._rs_id,
            output_index=0,
            content_index=0,
            text=text,
        ) + self._ev("response.output_item.done", output_index=0, item=self._reasoning_item())

    def _reasoning_item(self) -> dict[str, Any]:
        return {
            "id": self._rs_id,
            "type": "reasoning",
            "summary": [],
            "content": [{"type": "reasoning_text", "text": "".join(self._thoughts)}],
        }

    def _message_item(self) -> dict[str, Any]:
        return {
            "id": self._msg_id,
            "type": "message",
            # The last item ends as its response does; one closed before (a tool call came
            # after it) was complete.
            "status": self._item_status if self._phase == "message" else "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "".join(self._texts), "annotations": []}],
        }

    def _close_message(self) -> str:
        i = self._out_index()
        text = "".join(self._texts)
        return (
            self._ev(
                "response.output_text.done",
                item_id=self._msg_id,
                output_index=i,
                content_index=0,
                text=text,
                logprobs=[],
            )
            + self._ev(
                "response.content_part.done",
                item_id=self._msg_id,
                output_index=i,
                content_index=0,
                part={"type": "output_text", "text": text, "annotations": []},
            )
            + self._ev("response.output_item.done", output_index=i, item=self._message_item())
        )

    def _fc_index(self) -> int:
        return (1 if self._reasoning else 0) + (1 if self._texts else 0)

    def _fc_item(self, status: str) -> dict[str, Any]:
        return {
            "id": self._fc_id,
            "type": "function_call",
            "status": status,
            "call_id": f"call_{self._fc_id[-8:]}",
            "name": "lookup",
            "arguments": "".join(self._args),
        }

    def _tool(self, text: str) -> str:
        out = ""
        if self._phase != "tool":
            if self._phase == "reasoning":
                out += self._close_reasoning()
            elif self._phase == "message":
                out += self._close_message()
            self._phase = "tool"
            out += self._ev(
                "response.output_item.added",
                output_index=self._fc_index(),
                item=self._fc_item("in_progress"),
            )
        self._args.append(text)
        return out + self._ev(
            "response.function_call_arguments.delta",
            item_id=self._fc_id,
            output_index=self._fc_index(),
            delta=text,
        )

    def token(self, text: str) -> str:
        kind = self._next_kind()
        if kind == "tool":
            return self._tool(self._tool_piece(text))
        if kind == "reasoning":
            out = ""
            if not self._phase:
                self._phase = "reasoning"
                out = self._ev(
                    "response.output_item.added",
                    output_index=0,
                    item={"id": self._rs_id, "type": "reasoning", "summary": [], "content": []},
                )
            self._reasoning += 1
            self._thoughts.append(text)
            return out + self._ev(
                "response.reasoning_text.delta",
                item_id=self._rs_id,
                output_index=0,
                content_index=0,
                delta=text,
            )
        out = self._open_message() if self._phase != "message" else ""
        self._texts.append(text)
        seq = self._seq
        self._seq += 1
        return f'{out}{self._delta_head}{json.dumps(text)},"sequence_number":{seq}}}\n\n'

    def _output(self) -> list[dict[str, Any]]:
        items = [self._reasoning_item()] if self._reasoning else []
        if self._texts:
            items.append(self._message_item())
        if self._args:
            items.append(self._fc_item(self._item_status))
        return items

    def _usage_obj(self, n: int) -> dict[str, Any]:
        return {
            "input_tokens": self.prompt_tokens,
            "input_tokens_details": {"cached_tokens": self.cached_tokens, "cache_write_tokens": 0},
            "output_tokens": n,
            "output_tokens_details": {"reasoning_tokens": self._reasoning},
            "total_tokens": self.prompt_tokens + n,
        }

    def finish(self, reason: str, completion_tokens: int) -> str:
        out = ""
        if reason == "length" and self.req.tools and self._phase == "tool":
            reason = "stop"  # a tools request's answer ends with its call: a natural end
        if reason == "length":  # the item the length cut ends "incomplete", as its response
            self._item_status = "incomplete"
        if self._phase == "reasoning":
            out += self._close_reasoning()
        elif self._phase == "message":
            out += self._close_message()
        elif self._phase == "tool":
            i = self._fc_index()
            out += self._ev(
                "response.function_call_arguments.done",
                item_id=self._fc_id,
                output_index=i,
                arguments="".join(self._args),
            )
            out += self._ev(
                "response.output_item.done", output_index=i, item=self._fc_item(self._item_status)
            )
        usage = self._usage_obj(completion_tokens)
        if reason == "length":
            final = self._response(
                "incomplete",
                output=self._output(),
                usage=usage,
                incomplete_details={"reason": "max_output_tokens"},
            )
            return out + self._ev("response.incomplete", response=final)
        return out + self._ev(
            "response.completed",
            response=self._response("completed", output=self._output(), usage=usage),
        )

    def error(self, message: str) -> str:
        return self._ev("error", code="server_error", message=message, param=None)

    def complete(self, text: str, reason: str, completion_tokens: int) -> dict[str, object]:
        self._texts = [text]
        self._phase = "message"
        status = "incomplete" if reason == "length" else "completed"
        self._item_status = status
        details = {"reason": "max_output_tokens"} if reason == "length" else None
        return self._response(
            status,
            output=[self._message_item()],
            usage=self._usage_obj(completion_tokens),
            incomplete_details=details,
        )


class MessagesChunks(EventChunks):
    """One Anthropic Messages stream: ``message_start``, ``content_block_*``,
    ``message_delta``, ``message_stop``."""

    id_prefix = "msg"

    def __init__(
        self,
        req: ParsedRequest,
        prompt_tokens: int,
        reasoning: int = 0,
        tool: int = 0,
        cached_tokens: int = 0,
    ) -> None:
        super().__init__(req, prompt_tokens, reasoning, tool, cached_tokens)
        self._index = -1
        self._text_head = ""

    def role(self) -> str | None:
        message: dict[str, Any] = {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": self.req.model,
            "stop_reason": None,
            "stop_sequence": None,
            # Anthropic's input_tokens leave out the tokens read from the cache: the prompt is
            # input_tokens + cache_creation_input_tokens + cache_read_input_tokens.
            "usage": {
                "input_tokens": self.prompt_tokens - self.cached_tokens,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": self.cached_tokens,
                "output_tokens": 0,
            },
        }
        return _event("message_start", {"type": "message_start", "message": message}) + _event(
            "ping", {"type": "ping"}
        )

    def _block(self, block: dict[str, Any]) -> str:
        out = self._stop_block()
        self._index += 1
        return out + _event(
            "content_block_start",
            {"type": "content_block_start", "index": self._index, "content_block": block},
        )

    def _stop_block(self) -> str:
        if self._index < 0:
            return ""
        out = ""
        if self._phase == "thinking":
            out = _event(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": self._index,
                    "delta": {"type": "signature_delta", "signature": "c3RyZWFtc2xv"},
                },
            )
        return out + _event(
            "content_block_stop", {"type": "content_block_stop", "index": self._index}
        )

    def token(self, text: str) -> str:
        t = json.dumps(text)
        kind = self._next_kind()
        if kind == "tool":
            t = json.dumps(self._tool_piece(text))
            out = ""
            if self._phase != "tool":
                out = self._block(
                    {
                        "type": "tool_use",
                        "id": f"toolu_{self.id[-12:]}",
                        "name": "lookup",
                        "input": {},
                    }
                )
                self._phase = "tool"
            return (
                f'{out}event: content_block_delta\ndata: {{"type":"content_block_delta","index":{self._index},'
                f'"delta":{{"type":"input_json_delta","partial_json":{t}}}}}\n\n'
            )
        if kind == "reasoning":
            out = ""
            if self._phase != "thinking":
                out = self._block({"type": "thinking", "thinking": "", "signature": ""})
                self._phase = "thinking"
            return (
                f'{out}event: content_block_delta\ndata: {{"type":"content_block_delta","index":{self._index},'
                f'"delta":{{"type":"thinking_delta","thinking":{t}}}}}\n\n'
            )
        out = ""
        if self._phase != "text":
            out = self._block({"type": "text", "text": ""})
            self._phase = "text"
            self._text_head = (
                'event: content_block_delta\ndata: {"type":"content_block_delta",'
                f'"index":{self._index},"delta":{{"type":"text_delta","text":'
            )
        self._texts.append(text)
        return f"{out}{self._text_head}{t}}}}}\n\n"

    def finish(self, reason: str, completion_tokens: int) -> str:
        if reason == "length" and self.req.tools and self._phase == "tool":
            reason = "stop"  # a tools request's answer ends with its call: a natural end
        stop = (
            "max_tokens"
            if reason == "length"
            else ("tool_use" if self._phase == "tool" else "end_turn")
        )
        out = self._stop_block()
        out += _event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": completion_tokens},
            },
        )
        return out + _event("message_stop", {"type": "message_stop"})

    def error(self, message: str) -> str:
        return _event("error", anthropic_error_body(500, message))

    def complete(self, text: str, reason: str, completion_tokens: int) -> dict[str, object]:
        return {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.req.model,
            "content": [{"type": "text", "text": text}],
            "stop_reason": "max_tokens" if reason == "length" else "end_turn",
            "stop_sequence": None,
            "usage": {
                "input_tokens": self.prompt_tokens - self.cached_tokens,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": self.cached_tokens,
                "output_tokens": completion_tokens,
            },
        }


def chunk_factory(
    req: ParsedRequest,
    prompt_tokens: int,
    reasoning: int = 0,
    tool: int = 0,
    cached_tokens: int = 0,
) -> ChunkFactory:
    """The chunk factory of a request's dialect (``reasoning``, ``tool``: ``--reasoning-tokens``,
    ``--tool-call-tokens``; ``cached_tokens``: prompt tokens the prefix cache served)."""
    if req.kind == "responses":
        return ResponsesChunks(req, prompt_tokens, reasoning, tool, cached_tokens)
    if req.kind == "messages":
        return MessagesChunks(req, prompt_tokens, reasoning, tool, cached_tokens)
    return ChunkFactory(req, prompt_tokens, cached_tokens, reasoning, tool)
