"""The streaming dialects (``--api``) and the dialect objects of the event dialects: their
events mapped onto the one outcome taxonomy (docs/outcomes.md, "Dialects side by side"),
Sans-I/O like the rest of the core.

A dialect object says what one message means and tells the stream's machine
(:class:`~streamslo.stream.tracker.StreamTracker`); every transport rule (heads, framing, caps,
EOF, the read after the terminal event) and every outcome rule stays the machine's and the
exchange's. OpenAI's chunks (``openai-chat``, ``openai-completions``) are read by
:class:`~streamslo.stream.chunks.OpenAIChunks`; here:

- **OpenAI Responses** (``/v1/responses``): ``response.output_text.delta`` (and
  ``response.refusal.delta``) are answer tokens, ``response.reasoning_text.delta`` and
  ``response.reasoning_summary_text.delta`` reasoning tokens,
  ``response.function_call_arguments.delta`` (and the hosted tools' input deltas) tool tokens;
  ``response.completed`` and ``response.incomplete`` are the terminal marker (with the usage
  of the response they carry); ``response.failed`` and ``error`` are in-band errors.
- **Anthropic Messages** (``/v1/messages``): ``content_block_delta`` with ``text_delta``
  (answer), ``thinking_delta`` (reasoning) or ``input_json_delta`` (tool) is a token;
  ``message_delta`` carries ``stop_reason`` and the cumulative ``usage.output_tokens``;
  ``message_stop`` is the terminal marker; ``error`` an in-band error.

Every other event (``response.created``, ``response.in_progress``, ``*.added``/``*.done``,
``message_start``, ``content_block_start``/``stop``, ``ping``, a delta with empty text) is not a
token and not progress: a stream kept alive by them alone ends ``stalled`` after the stall
timeout, naming what kept it alive. The stop reasons a dialect names are kept as they are in
``finish_reason`` (``max_output_tokens``, ``end_turn``...).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from enum import StrEnum
from typing import Any

from streamslo.stream.chunkjson import (
    ANSWER,
    REASONING,
    TOOL,
    error_message,
    error_status,
    loads_chunk,
)
from streamslo.stream.chunks import DialectReader, Machine, OpenAIChunks, record_usage
from streamslo.stream.counts import EndRules
from streamslo.stream.outcome import Outcome
from streamslo.stream.sse import DEFAULT_MAX_EVENT_BYTES
from streamslo.stream.timing import StreamExpectations, StreamRecord
from streamslo.stream.tracker import StreamTracker

__all__ = [
    "ANTHROPIC_VERSION",
    "APIS",
    "API_PATHS",
    "ENDPOINT_APIS",
    "EVENT_APIS",
    "Dialect",
    "EventDialect",
    "MessagesEvents",
    "ResponsesEvents",
    "reader_for",
    "tracker_for",
]


class Dialect(StrEnum):
    """The streaming dialects (``--api``), in the documented order; each is its ``--api`` name,
    and compares equal to it."""

    CHAT = "openai-chat"
    COMPLETIONS = "openai-completions"
    RESPONSES = "openai-responses"
    MESSAGES = "anthropic-messages"


#: Every ``--api`` name, in the documented order.
APIS: tuple[str, ...] = tuple(d.value for d in Dialect)
#: The dialects whose streams are typed events (a dialect object of this module reads them).
EVENT_APIS: frozenset[str] = frozenset({Dialect.RESPONSES, Dialect.MESSAGES})
#: Each dialect's path (``--path`` replaces it).
API_PATHS: Mapping[str, str] = {
    Dialect.CHAT: "/v1/chat/completions",
    Dialect.COMPLETIONS: "/v1/completions",
    Dialect.RESPONSES: "/v1/responses",
    Dialect.MESSAGES: "/v1/messages",
}
#: ``--endpoint`` (the older option) -> the dialect it speaks.
ENDPOINT_APIS: Mapping[str, str] = {
    "chat": Dialect.CHAT,
    "completions": Dialect.COMPLETIONS,
    "stream": Dialect.COMPLETIONS,
}
#: The ``anthropic-version`` header sent with every Anthropic Messages request.
ANTHROPIC_VERSION = "2023-06-01"

_DONE = "[DONE]"


class EventDialect:
    """A dialect of typed events (``{"type": ...}`` per SSE event or WS message).

    Subclasses say what each event type means (:meth:`on_event`) and what their stop reasons
    mean (:attr:`rules`). The SSE event name repeats the JSON's ``type`` in both dialects: the
    type decides. A ``[DONE]`` after the terminal event changes nothing; before it, it is
    ``malformed``.
    """

    __slots__ = ()

    name = ""
    """The ``--api`` name (for messages)."""
    terminal = ""
    """The terminal event's name."""
    rules: EndRules
    after_end: str | None = _DONE

    def read(self, m: Machine, t: float, data: str, event: str) -> None:
        if data.strip() == _DONE:
            m.finish(
                t,
                Outcome.MALFORMED,
                f"[DONE] before {self.terminal} ({self.name} ends with {self.terminal})",
            )
            return
        try:
            obj = loads_chunk(data)
        except ValueError as exc:
            m.finish(t, Outcome.MALFORMED, f"event is not JSON ({exc}): {data[:80]!r}")
            return
        if not isinstance(obj, dict):
            m.finish(t, Outcome.MALFORMED, f"event is not a JSON object: {data[:80]!r}")
            return
        kind = obj.get("type")
        if not isinstance(kind, str):
            if "error" in obj and obj["error"] is not None:  # an OpenAI-style error object
                self.error(m, t, obj["error"])
                return
            m.finish(t, Outcome.MALFORMED, f"event has no string 'type': {data[:80]!r}")
            return
        self.on_event(m, t, kind, obj)

    def on_event(self, m: Machine, t: float, kind: str, obj: dict[str, object]) -> None:
        """One event of type ``kind``."""
        raise NotImplementedError

    @staticmethod
    def delta(m: Machine, t: float, text: object, kind: int, event: str) -> None:
        """A delta event: a token when its text is not empty."""
        if not isinstance(text, str):
            m.finish(t, Outcome.MALFORMED, f"{event}: the delta's text is not a string")
            return
        if not text:
            EventDialect.other(m, f"{event!r} events with empty text")
            return
        if kind == ANSWER and m.text is not None:
            m.text.append(text)
        m.ledger.add_text(text)
        m.token(t, kind)

    @staticmethod
    def other(m: Machine, what: str) -> None:
        """A message that is neither a token nor an end: a keep-alive, named for the stall
        message."""
        m.idle += 1
        m.idle_what = what

    @staticmethod
    def error(m: Machine, t: float, error: object, message: str | None = None) -> None:
        """An in-band error, with the status its error object names (500 when none)."""
        text = message if message is not None else error_message(error)
        m.error(t, text, error_status(error, 500))

    @staticmethod
    def usage(m: Machine, t: float, usage: object) -> bool:
        """Record a usage object's counts; False (and ``malformed``) when it is not an object."""
        if usage is None:
            return True
        if not isinstance(usage, dict):
            m.finish(t, Outcome.MALFORMED, "usage is not an object")
            return False
        record_usage(m, usage, "input_tokens", "output_tokens")
        return True

    @staticmethod
    def reason(m: Machine, t: float, reason: object, where: str) -> bool:
        """Record a stop reason; False (and ``malformed``) when it is not a string."""
        if reason is None:
            return True
        if not isinstance(reason, str):
            m.finish(t, Outcome.MALFORMED, f"{where} is not a string")
            return False
        m.rec.finish_reason = reason
        return True


# --------------------------------------------------------------------- OpenAI Responses
_RESPONSES_DELTAS: Mapping[str, int] = {
    "response.output_text.delta": ANSWER,
    "response.refusal.delta": ANSWER,
    "response.reasoning_text.delta": REASONING,
    "response.reasoning_summary_text.delta": REASONING,
    "response.function_call_arguments.delta": TOOL,
    "response.custom_tool_call_input.delta": TOOL,
    # Hosted tools whose input the model writes token by token: without them a long tool call
    # would look like a stall.
    "response.mcp_call_arguments.delta": TOOL,
    "response.code_interpreter_call_code.delta": TOOL,
}


#: The parts of a final response's ``output`` items whose text the deltas streamed, by kind.
_RESPONSES_PARTS: Mapping[str, int] = {
    "output_text": ANSWER,
    "refusal": ANSWER,
    "reasoning_text": REASONING,
    "summary_text": REASONING,
}


def _response_texts(response: Mapping[str, object]) -> tuple[str, str, str] | None:
    """The answer, reasoning and tool-input text a final response holds, in order; None when it
    holds no output to compare."""
    output = response.get("output")
    if not isinstance(output, list) or not output:
        return None
    texts: dict[int, list[str]] = {ANSWER: [], REASONING: [], TOOL: []}
    for item in output:
        if not isinstance(item, dict):
            return None
        if item.get("type") in ("function_call", "custom_tool_call"):
            args = item.get("arguments", item.get("input"))
            if isinstance(args, str):
                texts[TOOL].append(args)
            continue
        for key in ("summary", "content"):
            parts = item.get(key)
            if not isinstance(parts, list):
                continue
            for part in parts:
                if not isinstance(part, dict):
                    continue
                kind = _RESPONSES_PARTS.get(str(part.get("type")))
                value = part.get("refusal" if part.get("type") == "refusal" else "text")
                if kind is not None and isinstance(value, str):
                    texts[kind].append(value)
    return "".join(texts[ANSWER]), "".join(texts[REASONING]), "".join(texts[TOOL])


class ResponsesEvents(EventDialect):
    """OpenAI Responses API streaming events (``/v1/responses``).

    The final response repeats the whole output: when the deltas' text matches it, nothing was
    lost in transit, and deltas fewer than ``output_tokens`` are tokens the server's
    detokenizer held back (vLLM sends no delta for them), not a truncation.
    """

    __slots__ = ("_streamed",)

    name = Dialect.RESPONSES
    terminal = "response.completed"
    rules = EndRules(
        terminal="response.completed",
        noun="token deltas",
        length=frozenset({"max_output_tokens"}),
        complete=frozenset({"completed", "max_output_tokens"}),
        cut=frozenset({"content_filter"}),
        # vLLM and llama.cpp end a stream at max_output_tokens with response.completed.
        complete_is_length_at_limit="completed",
        strict=True,
    )

    def __init__(self) -> None:
        self._streamed: dict[int, list[str]] = {ANSWER: [], REASONING: [], TOOL: []}

    def on_event(self, m: Machine, t: float, kind: str, obj: dict[str, object]) -> None:
        token = _RESPONSES_DELTAS.get(kind)
        if token is not None:
            delta = obj.get("delta")
            if isinstance(delta, str):
                self._streamed[token].append(delta)
            self.delta(m, t, delta, token, kind)
            return
        if kind in ("response.completed", "response.incomplete"):
            self._completed(m, t, kind, obj.get("response"))
            return
        if kind == "response.created":
            m.content_seen = True  # the stream began (an error now is error_event on WS too)
            self.other(m, f"{kind!r} events")
            return
        if kind == "response.failed":
            response = obj.get("response")
            error = response.get("error") if isinstance(response, dict) else None
            message = (
                error_message(error) if error is not None else "response.failed without an error"
            )
            self.error(m, t, error, f"response.failed: {message}")
            return
        if kind == "error":
            # {"type": "error", "code", "message", "param"} (some servers nest an "error" object)
            inner = obj.get("error")
            self.error(m, t, inner if inner is not None else obj)
            return
        self.other(m, f"{kind!r} events")

    def _completed(self, m: Machine, t: float, kind: str, response: object) -> None:
        """The terminal event: its usage, its stop reason, whether its text is the deltas'."""
        if not isinstance(response, dict):
            m.finish(t, Outcome.MALFORMED, f"{kind} without a response object")
            return
        if not self.usage(m, t, response.get("usage")):
            return
        status = response.get("status")
        if kind == "response.completed" and status != "incomplete":
            reason: object = "completed"
        else:
            # response.incomplete, or (vLLM) response.completed holding an incomplete
            # response: the reason is in incomplete_details.
            details = response.get("incomplete_details")
            reason = details.get("reason") if isinstance(details, dict) else None
            reason = reason if isinstance(reason, str) and reason else "incomplete"
        output = response.get("output")
        if isinstance(output, list) and output and isinstance(output[-1], dict):
            # The answer ended with a tool call: a complete step, whatever the length asked.
            m.ledger.tool_end = output[-1].get("type") in ("function_call", "custom_tool_call")
        final = _response_texts(response)
        if final is not None:
            s = self._streamed
            arrived = ("".join(s[ANSWER]), "".join(s[REASONING]), "".join(s[TOOL]))
            m.ledger.whole_text = any(final) and final == arrived
        m.rec.finish_reason = str(reason)
        m.end(t)


# ---------------------------------------------------------------- Anthropic Messages
_ANTHROPIC_DELTAS: Mapping[str, tuple[str, int]] = {
    "text_delta": ("text", ANSWER),
    "thinking_delta": ("thinking", REASONING),
    "input_json_delta": ("partial_json", TOOL),
}
#: Anthropic's error types -> the HTTP status each stands for (its errors page); an in-band
#: ``error`` event carries only the type.
_ANTHROPIC_STATUS: Mapping[str, int] = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}


def _int_field(obj: Mapping[str, object], key: str) -> int | None:
    v = obj.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


class MessagesEvents(EventDialect):
    """Anthropic Messages streaming events (``/v1/messages``)."""

    __slots__ = ()

    name = Dialect.MESSAGES
    terminal = "message_stop"
    rules = EndRules(
        terminal="message_stop",
        noun="token deltas",
        length=frozenset({"max_tokens"}),
        complete=frozenset({"end_turn", "stop_sequence", "tool_use", "max_tokens", "pause_turn"}),
        cut=frozenset({"refusal", "model_context_window_exceeded"}),
        tool=frozenset({"tool_use"}),
        strict=True,
    )

    def on_event(self, m: Machine, t: float, kind: str, obj: dict[str, object]) -> None:
        if kind == "content_block_delta":
            delta = obj.get("delta")
            if not isinstance(delta, dict):
                m.finish(t, Outcome.MALFORMED, "content_block_delta without a delta object")
                return
            how = _ANTHROPIC_DELTAS.get(str(delta.get("type")))
            if how is None:  # signature_delta, citations_delta...: no token
                self.other(m, f"{str(delta.get('type'))!r} deltas")
                return
            self.delta(m, t, delta.get(how[0]), how[1], str(delta.get("type")))
            return
        if kind == "message_delta":
            delta = obj.get("delta")
            if isinstance(delta, dict) and not self.reason(
                m, t, delta.get("stop_reason"), "stop_reason"
            ):
                return
            usage = obj.get("usage")
            if self.usage(m, t, usage) and isinstance(usage, dict):
                _prompt(m, usage)
            return
        if kind == "message_stop":
            m.end(t)
            return
        if kind == "message_start":
            m.content_seen = True  # the stream began (an error now is error_event on WS too)
            message = obj.get("message")
            usage = message.get("usage") if isinstance(message, dict) else None
            if isinstance(usage, dict):
                record_usage(m, usage, "input_tokens", "output_tokens")
                _prompt(m, usage)
            self.other(m, f"{kind!r} events")
            return
        if kind == "error":
            error = obj.get("error")
            if isinstance(error, dict) and "code" not in error:
                status = _ANTHROPIC_STATUS.get(str(error.get("type")))
                if status is not None:
                    error = {**error, "code": status}
            self.error(m, t, error)
            return
        self.other(m, f"{kind!r} events")


def _prompt(m: Machine, usage: dict[str, Any]) -> None:
    """The prompt's tokens: Anthropic's ``input_tokens`` leave out the cache's, so the prompt is
    ``input_tokens + cache_creation_input_tokens + cache_read_input_tokens``."""
    inp = _int_field(usage, "input_tokens")
    if inp is None:
        return
    for key in ("cache_creation_input_tokens", "cache_read_input_tokens"):
        inp += _int_field(usage, key) or 0
    m.rec.usage_prompt_tokens = inp


_READERS: Mapping[str, Callable[[], DialectReader]] = {
    Dialect.CHAT: OpenAIChunks,
    Dialect.COMPLETIONS: OpenAIChunks,
    Dialect.RESPONSES: ResponsesEvents,
    Dialect.MESSAGES: MessagesEvents,
}


def reader_for(api: str) -> DialectReader:
    """A new dialect object for one stream of dialect ``api``.

    Raises:
        KeyError: an unknown ``api``.
    """
    return _READERS[api]()


def tracker_for(
    api: str,
    record: StreamRecord,
    expect: StreamExpectations,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    collect_text: bool = False,
) -> StreamTracker:
    """The machine for one request of dialect ``api``, with its dialect object.

    Raises:
        KeyError: an unknown ``api``.
    """
    return StreamTracker(record, expect, max_event_bytes, collect_text, reader_for(api))
