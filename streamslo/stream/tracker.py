"""The stream state machine: timings as bytes arrive, and exactly one outcome (docs/outcomes.md).

A transport (gevent sockets in the Locust users, asyncio in the pytest probes) calls the
``on_*`` methods with a ``perf_counter()`` timestamp taken when the bytes were read. The tracker
does no I/O and reads no clock; tests drive it with a scripted clock.

Life of a request::

    start ─ on_connected ─ on_response ──┬─ 2xx event-stream ─ on_sse_bytes* ─┬─ [DONE] ─ (read to end)
             (WS: on_ws_accepted)        │  (WS: on_ws_text*)                 ├─ on_eof / on_transport_error
                                         └─ non-2xx ─ on_http_error           ├─ on_stall / on_deadline
                                                                              └─ on_cancel

A request the client hangs up on (``--cancel-after``: after a time, or after N content
chunks) ends ``client_cancelled``: after N chunks the tracker finishes itself at the Nth; after
a time the transport reads only until :meth:`StreamTracker.deadline`, and the watchdog's
expiry there is the client's hang-up, not a ``timeout``.

The first thing that ends the stream decides its outcome (docs/outcomes.md). After ``[DONE]``
an SSE client keeps reading to the end of the body, briefly (at most ``MAX_AFTER_DONE_BYTES``;
the transport waits at most ``AFTER_DONE_WAIT_S``): more data there is ``malformed``; a transport
error there changes nothing. :attr:`StreamTracker.wants_bytes` tells the transport whether to
keep reading, :attr:`StreamTracker.progress_t` when the stream last made progress (the stall
rule: the response head, then only tokens: SSE comments, chunks without a token position, WS
pings and empty messages, bytes of a line that never ends are not progress). Nothing a server sends makes a method
here raise: a chunk that is not JSON we accept (too deep, ``Infinity``) is ``malformed``.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum
from typing import cast

from streamslo.stream.caps import MAX_AFTER_DONE_BYTES, MAX_ERROR_BODY_BYTES
from streamslo.stream.chunkjson import (
    ANSWER,
    BARE_FINISH,
    NOT_A_TOKEN,
    REASONING,
    TOKEN,
    error_message,
    has_text,
    inband_error,
    loads_chunk,
    token_position,
)
from streamslo.stream.counts import EndRules, Ledger, judge_end
from streamslo.stream.outcome import Outcome, status_began
from streamslo.stream.sse import DEFAULT_MAX_EVENT_BYTES, SSEDecoder, SSEEvent, SSEProtocolError
from streamslo.stream.timing import StreamExpectations, StreamRecord

__all__ = ["WS_CLOSE_4XX", "WS_CLOSE_5XX", "StreamTracker", "TrackerState"]

#: WebSocket close codes that count as the client's fault before the first content chunk.
WS_CLOSE_4XX = frozenset({1008, 1009, 1013})
#: WebSocket close codes that count as the server's fault before the first content chunk.
WS_CLOSE_5XX = frozenset({1011})

_DONE = "[DONE]"

#: The OpenAI chunk dialects' stop reasons (docs/outcomes.md, "Stop reasons").
CHAT_RULES = EndRules(
    terminal="[DONE]",
    noun="token positions",
    length=frozenset({"length"}),
    complete=frozenset(
        {"stop", "length", "tool_calls", "function_call", "eos_token", "stop_sequence"}
    ),
    cut=frozenset({"content_filter"}),
)


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


def _server_count(chunk: dict[str, object], has_choices: bool) -> int:
    """The server's own count of the tokens it sent so far, carried on this chunk, or -1:
    llama.cpp's ``timings.predicted_n`` (asked with ``timings_per_token``), or a ``usage`` on
    a chunk that also carries a choice (vLLM's ``continuous_usage_stats``)."""
    timings = chunk.get("timings")
    if type(timings) is dict:
        n = timings.get("predicted_n")
        if type(n) is int and n >= 0:
            return n
    if has_choices:
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


class TrackerState(Enum):
    """Where one request is (the outcome, once decided, is in the record)."""

    WAITING = "waiting"
    """Started; no response head (WS: no accepted handshake) yet."""
    STREAMING = "streaming"
    """The stream began: reading events / messages."""
    AFTER_DONE = "after_done"
    """``[DONE]`` decided the outcome; an SSE client reads on, briefly, to the body's end
    (data there is ``malformed``)."""
    FINISHED = "finished"
    """The outcome is final; nothing more is read."""


_FINISHED = TrackerState.FINISHED  # (module constants: the hot path reads them per event)
_AFTER_DONE = TrackerState.AFTER_DONE


class StreamTracker:
    """Measures one request and decides its outcome.

    Args:
        record: the record to fill in (holds the start time and identity).
        expect: what the request asked for.
        max_event_bytes: the largest SSE event / WS message accepted.
        collect_text: keep the content's text in :attr:`text` (a multi-turn conversation
            sends it back as the assistant's message).
    """

    RULES: EndRules = CHAT_RULES
    """What the dialect's stop reasons mean (the OpenAI chunk dialects here)."""

    __slots__ = (
        "_comments_at_token",
        "_decoder",
        "_done",
        "_expect",
        "_idle",
        "_last_token_t",
        "_ledger",
        "_pending_finish_t",
        "_server_n",
        "_ws_content_seen",
        "first_token_timeout",
        "pings",
        "progress_t",
        "rec",
        "stall_timeout",
        "state",
        "text",
    )

    def __init__(
        self,
        record: StreamRecord,
        expect: StreamExpectations,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        collect_text: bool = False,
    ) -> None:
        self.rec = record
        self.text: list[str] | None = [] if collect_text else None
        """With ``collect_text``: the content text of each content chunk, in order."""
        self._expect = expect
        self._decoder = SSEDecoder(max_event_bytes=max_event_bytes)
        self.state = TrackerState.WAITING
        self.progress_t = record.t0
        """When the stall clock last restarted: the request's start, the final response head
        (moved by ``first_token_timeout - stall_timeout``: the first token has its own bound),
        then each token position. Nothing else a server sends is progress."""
        self.stall_timeout: float | None = None
        """The stall timeout the reader applies (set by it; for the texts and the cancel rule)."""
        self.first_token_timeout: float | None = None
        """The bound from the head to the first token (None: the stall timeout)."""
        self.pings = 0
        """WebSocket pings (and pongs) since the last token, counted by the reader (keep-alives,
        no progress)."""
        self._done = False  # the terminal marker arrived
        self._last_token_t: float | None = None
        self._ws_content_seen = False
        self._pending_finish_t: float | None = None  # an empty finish chunk, counted at the end
        self._ledger = Ledger()  # what the arrivals can account for (merged chunks)
        self._server_n = 0  # the server's own running count at its last counted chunk
        self._idle = 0  # chunks without a token position since the last token
        self._comments_at_token = 0
        if expect.ignore_eos and expect.max_tokens is not None:
            record.expected_tokens = expect.max_tokens

    # ---------------------------------------------------------------- state
    @property
    def finished(self) -> bool:
        """The outcome is decided (after ``[DONE]``, :attr:`reading_after_done` may still
        ask the transport to read on to the body's end)."""
        return self.rec.outcome is not None

    @property
    def reading_after_done(self) -> bool:
        """``[DONE]`` came and the SSE transport should read on to the end of the body."""
        return self.state is TrackerState.AFTER_DONE

    @property
    def wants_bytes(self) -> bool:
        """The transport should keep reading."""
        return self.state is not TrackerState.FINISHED and (
            self.rec.outcome is None or self.state is TrackerState.AFTER_DONE
        )

    @property
    def done_seen(self) -> bool:
        """The terminal marker arrived (the transport reads on to the end of the body)."""
        return self._done

    @property
    def began(self) -> bool:
        return status_began(self.rec.status)

    @property
    def pending_bytes(self) -> int:
        """Bytes of an unfinished SSE line held by the decoder."""
        return self._decoder.pending_bytes

    def _finish(self, t: float, outcome: Outcome, error: str = "") -> None:
        rec = self.rec
        if rec.outcome is not None:
            return
        self.state = TrackerState.FINISHED
        rec.outcome = outcome
        if error and not rec.error:
            rec.error = error
        if not self._done:
            rec.e2e_s = t - rec.t0
        if (
            outcome is not Outcome.OK
            and outcome is not Outcome.CANCELLED
            and outcome is not Outcome.CLIENT_CANCELLED
            and self._last_token_t is not None
            and not self._done
        ):
            # A failed stream's last, open gap: from its last chunk to the moment it ended.
            rec.gap_s.append(max(0.0, t - self._last_token_t))
            rec.gap_t.append(t)
            rec.open_gap = True

    def _after_done_malformed(self, detail: str) -> None:
        """Data after [DONE] overrides what [DONE] decided (the client reads to the body's end)."""
        self.state = TrackerState.FINISHED
        self.rec.outcome = Outcome.MALFORMED
        self.rec.error = detail

    def stop_reading(self) -> None:
        """The transport stops reading after ``[DONE]`` (the body ended, or the short wait
        for its end ran out): the outcome stays what ``[DONE]`` made it."""
        if self.rec.outcome is not None:
            self.state = TrackerState.FINISHED

    def deadline(self, request_timeout: float) -> float:
        """When the transport stops reading (``perf_counter``): the request's deadline, or the
        client's hang-up (``--cancel-after`` a time) if that comes first."""
        end = self.rec.t0 + request_timeout
        after = self._expect.cancel_after_s
        return end if after is None else min(end, self.rec.t0 + after)

    # ------------------------------------------------------------ transport
    def on_connected(self, t: float) -> None:
        """The TCP (and TLS) connection is up."""
        self.rec.connect_s = t - self.rec.t0

    def on_response(self, t: float, status: int, content_type: str | None) -> None:
        """HTTP response headers arrived (SSE)."""
        self.rec.status = status
        self.progress_t = t
        if 200 <= status < 300:
            self.state = TrackerState.STREAMING
            self.progress_t = t + self._first_token_grace()
            ctype = (content_type or "").split(";", 1)[0].strip().lower()
            if ctype != "text/event-stream":
                self._finish(
                    t,
                    Outcome.MALFORMED,
                    f"2xx body is not an event stream ({ctype or 'no content type'})",
                )
        elif status < 200 or status >= 600:
            self._finish(t, Outcome.MALFORMED, f"unexpected HTTP status {status}")

    def on_http_error(self, t: float, status: int, body: bytes | bytearray) -> None:
        """A non-2xx response (or a refused WS handshake) with the start of its body."""
        self.rec.status = status
        self.rec.bytes += len(body)
        message = ""
        text = body[:MAX_ERROR_BODY_BYTES].decode("utf-8", "replace")
        try:
            obj = loads_chunk(text)
            found = inband_error(obj) if isinstance(obj, dict) else None
            if found is not None:
                message = found[0]
            elif isinstance(obj, dict):
                message = error_message(obj.get("detail") or obj)  # FastAPI's {"detail": ...}
        except ValueError:
            message = text[:200].strip()
        detail = f"HTTP {status}" + (f": {message}" if message else "")
        if 400 <= status < 500:
            self._finish(t, Outcome.HTTP_4XX, detail)
        elif 500 <= status < 600:
            self._finish(t, Outcome.HTTP_5XX, detail)
        else:
            self._finish(t, Outcome.MALFORMED, f"unexpected {detail}")

    def on_sse_bytes(self, t: float, data: bytes) -> None:
        """Body bytes of an event stream, as read (one timestamp per read)."""
        self.rec.bytes += len(data)
        if self.state is _FINISHED:  # (an outcome is set only in FINISHED or AFTER_DONE)
            return
        decoder = self._decoder
        error: str | None = None
        try:
            events: Sequence[SSEEvent] = decoder.feed(data)
        except SSEProtocolError as exc:
            # Keep its text, not the exception: a local holding it would make a reference
            # cycle (exception -> traceback -> this frame) that keeps the decoder's buffers
            # alive until a full GC, and the load generator raises gen-0's threshold to 50,000.
            events, error = cast("Sequence[SSEEvent]", exc.events), str(exc)
        for ev in events:
            self._message(t, ev.data, ev.event)
            if self.state is _FINISHED:
                return
        if error is not None:
            if self.state is _AFTER_DONE:
                self._after_done_malformed(f"data after [DONE]: {error}")
            else:
                self._finish(t, Outcome.MALFORMED, error)
        elif self.state is _AFTER_DONE and decoder.bytes_since_event > MAX_AFTER_DONE_BYTES:
            self._after_done_malformed(f"data after [DONE]: more than {MAX_AFTER_DONE_BYTES} bytes")

    def on_ws_accepted(self, t: float) -> None:
        """The WebSocket handshake succeeded (status 101), or a reused connection is ready."""
        self.rec.status = 101
        self.state = TrackerState.STREAMING
        self.progress_t = t + self._first_token_grace()

    def on_ws_message(self, t: float, payload: bytes, text: bool) -> None:
        """One whole WebSocket data message (``text``: a text message, else binary)."""
        if not text:
            self.on_ws_binary(t, len(payload))
            return
        rec = self.rec
        try:
            decoded = payload.decode("utf-8")
        except UnicodeDecodeError as exc:
            rec.bytes += len(payload)
            self._finish(
                t, Outcome.MALFORMED, f"invalid UTF-8 in a text message at byte {exc.start}"
            )
            return
        rec.bytes += len(decoded)  # (on_ws_text inlined: this runs per message)
        if rec.outcome is None:
            self._message(t, decoded)

    def on_ws_text(self, t: float, text: str) -> None:
        """One WebSocket text message for this request."""
        self.rec.bytes += len(text)
        if self.rec.outcome is not None:
            return
        self._message(t, text)

    def on_ws_binary(self, t: float, size: int) -> None:
        """A binary WebSocket message: not the protocol."""
        self.rec.bytes += size
        self._finish(t, Outcome.MALFORMED, "binary WebSocket frame")

    def on_ws_close(self, t: float, code: int | None, reason: str = "") -> None:
        """The server closed the WebSocket (``code`` None: no close frame, 1006)."""
        if self.rec.outcome is not None:
            return
        shown = 1006 if code is None else code
        detail = f"ws close {shown}" + (f": {reason[:120]}" if reason else "")
        if not self._ws_content_seen:
            if shown in WS_CLOSE_4XX:
                self._finish(t, Outcome.HTTP_4XX, detail)
                return
            if shown in WS_CLOSE_5XX:
                self._finish(t, Outcome.HTTP_5XX, detail)
                return
        self._finish(t, Outcome.TRUNCATED, detail + " before [DONE]")

    def on_eof(self, t: float, body_complete: bool) -> None:
        """The body (or connection) ended.

        Args:
            body_complete: the HTTP framing says the body ended cleanly (the chunked
                terminator, the full Content-Length, or a close on a body framed by close).
        """
        if self.rec.outcome is not None:
            self.stop_reading()  # (an unfinished event after [DONE] is dropped, as SSE says)
            return
        if not self._expect.done_marker and body_complete and self.began:
            self._terminal(t)
            self.stop_reading()
            return
        self._finish(
            t,
            Outcome.TRUNCATED,
            "body ended before [DONE]" if body_complete else "connection closed mid-body",
        )

    def on_transport_error(self, t: float, exc: BaseException) -> None:
        """The connection failed (refused, reset, TLS error...)."""
        if self.rec.outcome is not None:
            self.stop_reading()  # after [DONE] a transport error changes nothing
            return
        detail = f"{type(exc).__name__}: {exc}"[:200]
        if self.rec.status is None:
            self._finish(t, Outcome.CONNECT_ERROR, detail)
        else:
            self._finish(t, Outcome.TRUNCATED, detail)

    def on_protocol_error(self, t: float, detail: str) -> None:
        """The bytes broke HTTP or WebSocket framing, or a cap (also after ``[DONE]``)."""
        if self.state is TrackerState.AFTER_DONE:
            self._after_done_malformed(f"data after [DONE]: {detail}"[:300])
            return
        self._finish(t, Outcome.MALFORMED, detail[:300])

    def on_stall(self, t: float, stall_timeout: float) -> None:
        """No progress (no head, then no token) for ``stall_timeout`` seconds (before the
        first token: ``first_token_timeout``)."""
        if self.rec.outcome is not None:
            self.stop_reading()
            return
        self._finish(t, Outcome.STALLED, self._stall_text(stall_timeout))

    def _first_token_grace(self) -> float:
        """How much longer than the stall timeout the first token may take after the head."""
        ftt, stall = self.first_token_timeout, self.stall_timeout
        return 0.0 if ftt is None or stall is None else ftt - stall

    def _stall_text(self, stall_timeout: float) -> str:
        """Why the stream stalled, and what kept its connection alive meanwhile."""
        rec = self.rec
        if not self.began:
            what = "response head" if rec.protocol == "sse" else "handshake answer"
            return f"no {what} for {stall_timeout:g}s waiting for headers"
        if self._last_token_t is None:
            bound = (
                self.first_token_timeout if self.first_token_timeout is not None else stall_timeout
            )
            text = f"no first token for {bound:g}s after the stream began"
        else:
            text = f"no token for {stall_timeout:g}s after {rec.tokens} tokens"
        alive: list[str] = []
        comments = self._decoder.comments - self._comments_at_token
        if comments:
            alive.append(f"{comments} SSE comments")
        if self._idle:
            alive.append(f"{self._idle} chunks without a token")
        if self.pings:
            alive.append(f"{self.pings} WebSocket pings")
        pending = self._decoder.pending_bytes
        if pending:
            alive.append(f"an unfinished line ({pending} bytes, no complete SSE line)")
        if alive:
            text += "; " + ", ".join(alive) + " kept the connection alive"
        return text

    def on_deadline(self, t: float, request_timeout: float) -> None:
        """The request ran past its deadline (or the client's hang-up time came)."""
        if self.rec.outcome is not None:
            self.stop_reading()
            return
        after = self._expect.cancel_after_s
        if after is not None and after < request_timeout and t - self.rec.t0 >= after:
            self._finish(t, Outcome.CLIENT_CANCELLED, f"the client hung up after {after:g}s")
            return
        self._finish(t, Outcome.TIMEOUT, f"request still streaming after {request_timeout:g}s")

    def on_cancel(self, t: float) -> None:
        """The load test stopped this stream: ``cancelled`` if it was still making progress,
        ``stalled`` if it had had no token (no head) for the stall timeout (docs/outcomes.md)."""
        if self.rec.outcome is not None:
            self.stop_reading()
            return
        stall = self.stall_timeout
        if stall is not None and t - self.progress_t >= stall:
            self._finish(t, Outcome.STALLED, self._stall_text(stall))
            return
        self._finish(t, Outcome.CANCELLED, "stopped by the load test")

    # ------------------------------------------------------------- messages
    def _message(self, t: float, data: str, event: str = "message") -> None:
        rec = self.rec
        if self._done:
            self._after_done_malformed("data after [DONE]")
            return
        if data == _DONE or (_DONE in data and data.strip() == _DONE):  # (no strip per chunk)
            self._done = True
            rec.e2e_s = t - rec.t0
            self._terminal(t)
            if rec.protocol == "sse" and rec.outcome != Outcome.MALFORMED.value:
                self.state = TrackerState.AFTER_DONE
            return
        if event == "ping":  # an SSE keep-alive event, whatever its data: not progress
            self._idle += 1
            return
        try:
            chunk = loads_chunk(data)
        except ValueError as exc:
            if event == "error":  # an SSE error event: its data is the server's message
                self._error(t, data.strip()[:200] or "an SSE error event", None)
            elif not data.strip():
                self._idle += 1  # an empty event / message: a keep-alive, not progress
            else:
                self._finish(t, Outcome.MALFORMED, f"chunk is not JSON ({exc}): {data[:80]!r}")
            return
        if not isinstance(chunk, dict):
            if event == "error":
                self._error(t, error_message(chunk), None)
            else:
                self._finish(t, Outcome.MALFORMED, f"chunk is not a JSON object: {data[:80]!r}")
            return
        if "error" in chunk or event != "message" or chunk.get("object") == "error":
            found = inband_error(chunk, event)
            if found is not None:
                self._error(t, *found)
                return
        choices = chunk.get("choices")
        usage = chunk.get("usage")
        if choices is None and usage is None:
            self._finish(t, Outcome.MALFORMED, "chunk has neither choices nor usage")
            return
        if isinstance(usage, dict):
            ct = usage.get("completion_tokens")
            if isinstance(ct, int) and not isinstance(ct, bool):
                rec.usage_completion_tokens = ct
            pt = usage.get("prompt_tokens")
            if isinstance(pt, int) and not isinstance(pt, bool):
                rec.usage_prompt_tokens = pt
            details = usage.get("prompt_tokens_details")
            cached = details.get("cached_tokens") if isinstance(details, dict) else None
            if isinstance(cached, int) and not isinstance(cached, bool) and cached >= 0:
                rec.cached_tokens = cached
        elif usage is not None:
            self._finish(t, Outcome.MALFORMED, "usage is not an object")
            return
        if choices is None:
            self._idle += 1
            return
        if not isinstance(choices, list):
            self._finish(t, Outcome.MALFORMED, "choices is not a list")
            return
        position = 0
        kind = 0  # the token's kind (chunkjson.ANSWER, REASONING, TOOL)
        listed = -1  # tokens the chunk lists in ``token_ids`` (vLLM's return_token_ids); -1: none
        text = ""  # the token's text, of any kind
        finish_here = False
        for choice in choices:
            if not isinstance(choice, dict):
                self._finish(t, Outcome.MALFORMED, "a choice is not an object")
                return
            fr = choice.get("finish_reason")
            if fr is not None:
                if not isinstance(fr, str):
                    self._finish(t, Outcome.MALFORMED, "finish_reason is not a string")
                    return
                rec.finish_reason = fr
                finish_here = True
            if position != TOKEN:
                delta = choice.get("delta")
                content = delta.get("content") if type(delta) is dict else None
                if type(content) is str and content and "text" not in choice:
                    # The common chunk, read in one pass: a chat delta with answer text is a
                    # token position of kind ANSWER (what token_position and has_text say).
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
            self._idle += 1
            return
        ledger = self._ledger
        if listed >= 0:
            # The server lists the chunk's tokens: that count is exact, whether it merged several
            # tokens into one chunk (vLLM, when its API server falls behind its engine) or held
            # a token's text back. A chunk listing none carries no token.
            ledger.counted = True
            if listed:
                if self.text is not None:
                    self.text.append(_content_text(choices))
                self._token(t, kind or has_text(choices[0]) or ANSWER, listed)
            else:
                self._idle += 1
            return
        # A count on the finish chunk is the final one (llama.cpp's last timings, a usage riding on
        # the last chunk), not a running count, unless the chunks before it carried one too.
        count = -1
        if (usage is not None or "timings" in chunk) and (ledger.counted or not finish_here):
            count = _server_count(chunk, True)  # (most chunks carry neither: no call)
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
            if self.text is not None:
                self.text.append(_content_text(choices))
            self._token(t, kind, n)
        elif count >= 0:  # the finish chunk, with the server's count: the unsent tail's tokens
            ledger.counted = True
            ledger.tail = True
            n = count - self._server_n
            self._server_n = count
            if n > 0:
                self._token(t, ANSWER, n)
        elif position == BARE_FINISH:
            ledger.tail = True
        else:
            self._pending_finish_t = t

    def _error(self, t: float, message: str, status: int | None) -> None:
        """An in-band error (any shape :func:`inband_error` knows)."""
        if self.rec.protocol == "ws" and not self._ws_content_seen:
            # WS: an error before the first content chunk means the stream never began.
            code = status if status is not None else 500
            outcome = Outcome.HTTP_4XX if code < 500 else Outcome.HTTP_5XX
            self._finish(t, outcome, f"error {code}: {message}")
        else:
            self._finish(t, Outcome.ERROR_EVENT, f"error event: {message}")

    def _token(self, t: float, kind: int = ANSWER, n: int = 1) -> None:
        """A token position at ``t`` (``n``: a chunk that lists several token ids is one arrival
        holding ``n`` positions: one ITL gap, ``n`` tokens); ``kind``: what it carried
        (chunkjson's kinds)."""
        rec = self.rec
        rec.tokens += n
        self._ws_content_seen = True
        self.progress_t = t
        if self._idle:
            self._idle = 0
        if self.pings:
            self.pings = 0
        self._comments_at_token = self._decoder.comments
        last = self._last_token_t
        if last is None:
            rec.ttft_s = t - rec.t0
        else:
            rec.gap_s.append(t - last)
            rec.gap_t.append(t)
        self._last_token_t = t
        if kind == ANSWER:
            if rec.ttfo_s is None:
                rec.ttfo_s = t - rec.t0
        elif kind == REASONING:
            rec.reasoning_tokens += n
        else:
            rec.tool_tokens += n
            if rec.ttftc_s is None:
                rec.ttftc_s = t - rec.t0
        ex = self._expect
        mt = ex.max_tokens
        if mt is not None and rec.tokens > mt:
            self._finish(
                t, Outcome.MALFORMED, f"more token positions ({rec.tokens}) than max_tokens ({mt})"
            )
            return
        if ex.cancel_after_tokens is not None and rec.tokens >= ex.cancel_after_tokens:
            self._finish(
                t, Outcome.CLIENT_CANCELLED, f"the client hung up after {rec.tokens} tokens"
            )
            return
        if ex.cancel_after_s is not None and t - rec.t0 >= ex.cancel_after_s:
            # The hang-up time passed while this read was on its way: the client is gone.
            self._finish(
                t, Outcome.CLIENT_CANCELLED, f"the client hung up after {ex.cancel_after_s:g}s"
            )

    def _terminal(self, t: float) -> None:
        """The terminal marker arrived: judge the stop reason and the counts (docs/outcomes.md)."""
        rec, ex = self.rec, self._expect
        if self._done is False:
            self._done = True  # body end acting as the marker (--no-done-marker)
            rec.e2e_s = t - rec.t0
        pending = self._pending_finish_t
        if pending is not None:
            # An empty chunk carrying the finish_reason is the last token when the server's
            # count says exactly one more (vLLM: the finish rides on its last token's chunk),
            # and a bare finish chunk otherwise (OpenAI, llama.cpp): docs/outcomes.md.
            self._pending_finish_t = None
            self._ledger.tail = True
            counted = rec.usage_completion_tokens
            if counted is None and ex.ignore_eos and rec.finish_reason == "length":
                counted = ex.max_tokens
            if counted is not None and counted == rec.tokens + 1:
                self._token(pending)
                if rec.outcome is not None:
                    return
        outcome, error = judge_end(rec, ex, self.RULES, self._ledger)
        self._finish(t, outcome, error)
