"""The streaming dialects other than OpenAI's chunks: their events mapped onto the one outcome
taxonomy (docs/outcomes.md, "Dialects side by side"), Sans-I/O like the rest of the core.

``--api`` picks a dialect. ``openai-chat`` and ``openai-completions`` are the plain
:class:`~streamslo.stream.tracker.StreamTracker` (their hot path is untouched: the dialect is
chosen once per request, by :func:`tracker_for`). The two event dialects get a tracker here
that keeps every transport rule of the plain one (heads, framing, caps, EOF, the read after the
terminal event) and replaces only what one message means:

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

from collections.abc import Mapping
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
from streamslo.stream.counts import EndRules, judge_end
from streamslo.stream.outcome import Outcome
from streamslo.stream.sse import DEFAULT_MAX_EVENT_BYTES
from streamslo.stream.timing import StreamExpectations, StreamRecord
from streamslo.stream.tracker import StreamTracker, TrackerState

__all__ = [
    "ANTHROPIC_VERSION",
    "APIS",
    "API_PATHS",
    "ENDPOINT_APIS",
    "EVENT_APIS",
    "AnthropicTracker",
    "Dialect",
    "EventTracker",
    "ResponsesTracker",
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
#: The dialects whose streams are typed events (a tracker of this module reads them).
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


class EventTracker(StreamTracker):
    """A tracker for a dialect of typed events (``{"type": ...}`` per SSE event or WS message).

    Subclasses say what each event type means (:meth:`_event`) and what their stop reasons
    mean (:attr:`RULES`). Progress for the stall
    rule is a token (or the response head), not any complete line.
    """

    __slots__ = ("_kept_alive", "_tok_t")

    DIALECT = ""
    """The ``--api`` name (for messages)."""
    TERMINAL = ""
    """The terminal event's name (for messages)."""

    def __init__(
        self,
        record: StreamRecord,
        expect: StreamExpectations,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        collect_text: bool = False,
    ) -> None:
        super().__init__(record, expect, max_event_bytes, collect_text)
        self._tok_t = record.t0  # the last token (or head): the stall timer counts from here
        self._kept_alive = ""  # the last thing that arrived that was not a token

    # ------------------------------------------------------- progress is a token
    def on_response(self, t: float, status: int, content_type: str | None) -> None:
        super().on_response(t, status, content_type)
        self._tok_t = t

    def on_ws_accepted(self, t: float) -> None:
        super().on_ws_accepted(t)
        self._tok_t = t

    def on_sse_bytes(self, t: float, data: bytes) -> None:
        super().on_sse_bytes(t, data)
        if self._decoder.completed_line and self._tok_t != t and not self._kept_alive:
            self._kept_alive = "SSE comments"
        self.progress_t = self._tok_t

    def on_ws_message(self, t: float, payload: bytes, text: bool) -> None:
        super().on_ws_message(t, payload, text)
        self.progress_t = self._tok_t

    def on_ws_text(self, t: float, text: str) -> None:
        super().on_ws_text(t, text)
        self.progress_t = self._tok_t

    def on_ws_close(self, t: float, code: int | None, reason: str = "") -> None:
        if self.rec.outcome is None and self._ws_content_seen:
            shown = 1006 if code is None else code
            detail = f"ws close {shown}" + (f": {reason[:120]}" if reason else "")
            self._finish(t, Outcome.TRUNCATED, f"{detail} before {self.TERMINAL}")
            return
        super().on_ws_close(t, code, reason)

    def _began(self) -> None:
        """The dialect's first event (``response.created``, ``message_start``): on WebSocket
        the stream has begun, so an error from here on is ``error_event``, as after an SSE
        stream's 200."""
        self._ws_content_seen = True

    def on_eof(self, t: float, body_complete: bool) -> None:
        if self.rec.outcome is None and not (
            not self._expect.done_marker and body_complete and self.began
        ):
            what = (
                f"body ended before {self.TERMINAL}"
                if body_complete
                else "connection closed mid-body"
            )
            self._finish(t, Outcome.TRUNCATED, what)
            return
        super().on_eof(t, body_complete)

    def on_stall(self, t: float, stall_timeout: float) -> None:
        if self.rec.outcome is not None or not self.began:
            super().on_stall(t, stall_timeout)
            return
        what = "token" if self.rec.tokens else "first token"
        detail = f"no {what} for {stall_timeout:g}s after the stream began"
        if self._kept_alive:
            detail += f" (kept alive by {self._kept_alive})"
        self._finish(t, Outcome.STALLED, detail)

    def _token(self, t: float, kind: int = ANSWER, n: int = 1) -> None:
        super()._token(t, kind, n)
        self._tok_t = t

    # ------------------------------------------------------------------ events
    def _message(self, t: float, data: str, event: str = "message") -> None:
        # The SSE event name repeats the JSON's "type" in both dialects: the type decides.
        if self._done:
            if data.strip() == _DONE:
                return  # a [DONE] after the dialect's own terminal event changes nothing
            self._after_done_malformed(f"data after {self.TERMINAL}")
            return
        if data.strip() == _DONE:
            self._finish(
                t,
                Outcome.MALFORMED,
                f"[DONE] before {self.TERMINAL} ({self.DIALECT} ends with {self.TERMINAL})",
            )
            return
        try:
            obj = loads_chunk(data)
        except ValueError as exc:
            self._finish(t, Outcome.MALFORMED, f"event is not JSON ({exc}): {data[:80]!r}")
            return
        if not isinstance(obj, dict):
            self._finish(t, Outcome.MALFORMED, f"event is not a JSON object: {data[:80]!r}")
            return
        kind = obj.get("type")
        if not isinstance(kind, str):
            if "error" in obj and obj["error"] is not None:  # an OpenAI-style error object
                self._dialect_error(t, obj["error"])
                return
            self._finish(t, Outcome.MALFORMED, f"event has no string 'type': {data[:80]!r}")
            return
        self._event(t, kind, obj)

    def _event(self, t: float, kind: str, obj: dict[str, Any]) -> None:
        """One event of type ``kind``."""
        raise NotImplementedError

    def _delta(self, t: float, text: object, kind: int, event: str) -> None:
        """A delta event: a token when its text is not empty."""
        if not isinstance(text, str):
            self._finish(t, Outcome.MALFORMED, f"{event}: the delta's text is not a string")
            return
        if not text:
            self._kept_alive = f"{event} with empty text"
            return
        if kind == ANSWER and self.text is not None:
            self.text.append(text)
        self._ledger.add_text(text)
        self._token(t, kind)

    def _other(self, kind: str) -> None:
        """An event that is neither a token nor an end: remembered for the stall message."""
        self._kept_alive = f"{kind!r} events"

    def _dialect_error(self, t: float, error: object, message: str | None = None) -> None:
        """An in-band error: ``error_event`` (on WS before the first token, the stream never
        began, as for OpenAI's error chunk)."""
        text = message if message is not None else error_message(error)
        if self.rec.protocol == "ws" and not self._ws_content_seen:
            status = error_status(error, 500)
            outcome = Outcome.HTTP_4XX if status < 500 else Outcome.HTTP_5XX
            self._finish(t, outcome, f"error {status}: {text}")
            return
        self._finish(t, Outcome.ERROR_EVENT, f"error event: {text}")

    def _usage(self, usage: object, prompt_key: str, output_key: str, t: float) -> bool:
        """Record a usage object's counts; False (and ``malformed``) when it is not an object."""
        if usage is None:
            return True
        if not isinstance(usage, dict):
            self._finish(t, Outcome.MALFORMED, "usage is not an object")
            return False
        out = usage.get(output_key)
        if isinstance(out, int) and not isinstance(out, bool):
            self.rec.usage_completion_tokens = out
        inp = usage.get(prompt_key)
        if isinstance(inp, int) and not isinstance(inp, bool):
            self.rec.usage_prompt_tokens = inp
        self._cached(usage)
        return True

    def _cached(self, usage: dict[str, Any]) -> None:
        """Prompt tokens the server served from its cache: Responses'
        ``input_tokens_details.cached_tokens``, Anthropic's ``cache_read_input_tokens``."""
        details = usage.get("input_tokens_details")
        cached = (
            details.get("cached_tokens")
            if isinstance(details, dict)
            else usage.get("cache_read_input_tokens")
        )
        if isinstance(cached, int) and not isinstance(cached, bool):
            self.rec.cached_tokens = cached

    def _reason(self, t: float, reason: object, where: str) -> bool:
        """Record a stop reason; False (and ``malformed``) when it is not a string."""
        if reason is None:
            return True
        if not isinstance(reason, str):
            self._finish(t, Outcome.MALFORMED, f"{where} is not a string")
            return False
        self.rec.finish_reason = reason
        return True

    def _end(self, t: float) -> None:
        """The terminal event arrived."""
        rec = self.rec
        self._done = True
        rec.e2e_s = t - rec.t0
        self._terminal(t)
        if rec.protocol == "sse" and rec.outcome != Outcome.MALFORMED.value:
            self.state = TrackerState.AFTER_DONE

    def _terminal(self, t: float) -> None:
        """The terminal event (or, with ``--no-done-marker``, the body's end): judge the stop
        reason and the counts (docs/outcomes.md)."""
        rec = self.rec
        if self._done is False:
            self._done = True
            rec.e2e_s = t - rec.t0
        outcome, error = judge_end(rec, self._expect, self.RULES, self._ledger)
        self._finish(t, outcome, error)


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


class ResponsesTracker(EventTracker):
    """OpenAI Responses API streaming events (``/v1/responses``).

    The final response repeats the whole output: when the deltas' text matches it, nothing was
    lost in transit, and deltas fewer than ``output_tokens`` are tokens the server's
    detokenizer held back (vLLM sends no delta for them), not a truncation.
    """

    __slots__ = ("_streamed",)

    def _texts(self) -> dict[int, list[str]]:
        """The deltas' text so far, by kind (made at the first delta)."""
        try:
            return self._streamed
        except AttributeError:
            self._streamed: dict[int, list[str]] = {ANSWER: [], REASONING: [], TOOL: []}
            return self._streamed

    def _check_text(self, response: Mapping[str, object]) -> None:
        """Whether the final response's text is what the deltas brought."""
        final = _response_texts(response)
        if final is None:
            return
        s = self._texts()
        arrived = ("".join(s[ANSWER]), "".join(s[REASONING]), "".join(s[TOOL]))
        self._ledger.whole_text = any(final) and final == arrived

    DIALECT = Dialect.RESPONSES
    TERMINAL = "response.completed"
    RULES = EndRules(
        terminal="response.completed",
        noun="token deltas",
        length=frozenset({"max_output_tokens"}),
        complete=frozenset({"completed", "max_output_tokens"}),
        cut=frozenset({"content_filter"}),
        # vLLM and llama.cpp end a stream at max_output_tokens with response.completed.
        complete_is_length_at_limit="completed",
        strict=True,
    )

    def _event(self, t: float, kind: str, obj: dict[str, Any]) -> None:
        token = _RESPONSES_DELTAS.get(kind)
        if token is not None:
            delta = obj.get("delta")
            if isinstance(delta, str):
                self._texts()[token].append(delta)
            self._delta(t, delta, token, kind)
            return
        if kind in ("response.completed", "response.incomplete"):
            response = obj.get("response")
            if not isinstance(response, dict):
                self._finish(t, Outcome.MALFORMED, f"{kind} without a response object")
                return
            if not self._usage(response.get("usage"), "input_tokens", "output_tokens", t):
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
            self._check_text(response)
            self.rec.finish_reason = str(reason)
            self._end(t)
            return
        if kind == "response.created":
            self._began()
            self._other(kind)
            return
        if kind == "response.failed":
            response = obj.get("response")
            error = response.get("error") if isinstance(response, dict) else None
            message = (
                error_message(error) if error is not None else "response.failed without an error"
            )
            self._dialect_error(t, error, f"response.failed: {message}")
            return
        if kind == "error":
            # {"type": "error", "code", "message", "param"} (some servers nest an "error" object)
            inner = obj.get("error")
            self._dialect_error(t, inner if inner is not None else obj)
            return
        self._other(kind)


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


class AnthropicTracker(EventTracker):
    """Anthropic Messages streaming events (``/v1/messages``)."""

    __slots__ = ()

    DIALECT = Dialect.MESSAGES
    TERMINAL = "message_stop"
    RULES = EndRules(
        terminal="message_stop",
        noun="token deltas",
        length=frozenset({"max_tokens"}),
        complete=frozenset({"end_turn", "stop_sequence", "tool_use", "max_tokens", "pause_turn"}),
        cut=frozenset({"refusal", "model_context_window_exceeded"}),
        strict=True,
    )

    def _event(self, t: float, kind: str, obj: dict[str, Any]) -> None:
        if kind == "content_block_delta":
            delta = obj.get("delta")
            if not isinstance(delta, dict):
                self._finish(t, Outcome.MALFORMED, "content_block_delta without a delta object")
                return
            how = _ANTHROPIC_DELTAS.get(str(delta.get("type")))
            if how is None:  # signature_delta, citations_delta...: no token
                self._other(f"{delta.get('type')}")
                return
            self._delta(t, delta.get(how[0]), how[1], str(delta.get("type")))
            return
        if kind == "message_delta":
            delta = obj.get("delta")
            if isinstance(delta, dict) and not self._reason(
                t, delta.get("stop_reason"), "stop_reason"
            ):
                return
            usage = obj.get("usage")
            if self._usage(usage, "input_tokens", "output_tokens", t) and isinstance(usage, dict):
                self._prompt(usage)
            return
        if kind == "message_stop":
            self._end(t)
            return
        if kind == "message_start":
            self._began()
            message = obj.get("message")
            usage = message.get("usage") if isinstance(message, dict) else None
            if isinstance(usage, dict):
                self._prompt(usage)
                self._cached(usage)
            self._other(kind)
            return
        if kind == "error":
            error = obj.get("error")
            if isinstance(error, dict) and "code" not in error:
                status = _ANTHROPIC_STATUS.get(str(error.get("type")))
                if status is not None:
                    error = {**error, "code": status}
            self._dialect_error(t, error)
            return
        self._other(kind)

    def _prompt(self, usage: dict[str, Any]) -> None:
        """The prompt's tokens: Anthropic's ``input_tokens`` leave out the cache's, so the
        prompt is ``input_tokens + cache_creation_input_tokens + cache_read_input_tokens``."""
        inp = _int_field(usage, "input_tokens")
        if inp is None:
            return
        for key in ("cache_creation_input_tokens", "cache_read_input_tokens"):
            inp += _int_field(usage, key) or 0
        self.rec.usage_prompt_tokens = inp


_TRACKERS: Mapping[str, type[EventTracker]] = {
    Dialect.RESPONSES: ResponsesTracker,
    Dialect.MESSAGES: AnthropicTracker,
}


def tracker_for(
    api: str,
    record: StreamRecord,
    expect: StreamExpectations,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    collect_text: bool = False,
) -> StreamTracker:
    """The tracker for one request of dialect ``api`` (the plain one for OpenAI's chunks).

    Raises:
        KeyError: an unknown ``api``.
    """
    if api not in API_PATHS:
        raise KeyError(api)
    cls = _TRACKERS.get(api, StreamTracker)
    return cls(record, expect, max_event_bytes, collect_text)
