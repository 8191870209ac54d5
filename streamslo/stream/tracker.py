"""The outcome-and-timing machine of one stream: exactly one outcome (docs/outcomes.md).

The stream core is one pipeline, Sans-I/O from end to end:

* **the exchange** (:mod:`streamslo.stream.exchange` for HTTP, :mod:`streamslo.stream.ws` for
  WebSocket) takes the bytes a transport read, stamped with a ``perf_counter()`` time, and
  applies the rules of an exchange: the head, an error body, the body's end, the short read
  after the terminal marker, transport errors and the waits;
* **the framing** (the SSE decoder, WebSocket messages) yields messages;
* **a dialect object** (:mod:`streamslo.stream.chunks` for OpenAI's chunks,
  :mod:`streamslo.stream.dialects` for the Responses and Messages events,
  :mod:`streamslo.stream.envelope` for a gateway's WebSocket envelope) says what one message
  means: a token of a kind and a count, the terminal marker, an in-band error, a keep-alive,
  or a malformed message;
* **this machine** times the tokens and decides the outcome: :meth:`StreamTracker.token`,
  :meth:`StreamTracker.end` and :meth:`StreamTracker.finish` exist once, for every dialect.

It does no I/O and reads no clock; tests drive it with a scripted clock. Life of a request::

    start ─ begin (2xx event-stream head / WS accepted) ─ message* ─┬─ end (terminal) ─ (read to the body's end)
             └─ non-2xx: exchange.http_error                        ├─ body end / transport error
                                                                    └─ expire: stall / deadline / cancel

A request the client hangs up on (``--cancel-after``: after a time, or after N content chunks)
ends ``client_cancelled``: after N chunks the machine finishes itself at the Nth; after a time the
transport reads only until :meth:`StreamTracker.deadline`, and the expiry there is the client's
hang-up, not a ``timeout``. The first thing that ends the stream decides its outcome; after the
terminal marker an SSE client reads on briefly to the body's end, and data there is
``malformed`` (:meth:`StreamTracker.finish` lets that one outcome replace the terminal's).
:attr:`StreamTracker.progress_t` is when the stream last made progress (the stall rule: the
response head, then only tokens: SSE comments, messages without a token, WS pings and bytes of
a line that never ends are not progress). Nothing a server sends makes a method here raise.
"""

from __future__ import annotations

import math
from enum import Enum
from typing import Literal, Protocol

from streamslo.stream.cause import Cause, default_cause, status_cause
from streamslo.stream.chunkjson import ANSWER, REASONING
from streamslo.stream.chunks import DialectReader, OpenAIChunks
from streamslo.stream.counts import Ledger, judge_end
from streamslo.stream.outcome import Outcome, status_began
from streamslo.stream.sse import DEFAULT_MAX_EVENT_BYTES
from streamslo.stream.timing import StreamExpectations, StreamRecord, Wire

__all__ = ["Expiry", "Framing", "StreamTracker", "TrackerState"]

_NEVER_N = 1 << 62  # no count limit

Expiry = Literal["stall", "deadline", "cancel"]
"""Why a stream ended from outside: no progress for the stall timeout, a deadline (the
request's, or the client's hang-up time), or the load test stopping it."""


class TrackerState(Enum):
    """Where one request is (the outcome, once decided, is in the record)."""

    WAITING = "waiting"
    """Started; no response head (WS: no accepted handshake) yet."""
    STREAMING = "streaming"
    """The stream began: reading events / messages."""
    AFTER_DONE = "after_done"
    """The terminal marker decided the outcome; an SSE client reads on, briefly, to the body's
    end (data there is ``malformed``)."""
    FINISHED = "finished"
    """The outcome is final; nothing more is read."""


_FINISHED = TrackerState.FINISHED  # (module constants: the hot path reads them per event)
_AFTER_DONE = TrackerState.AFTER_DONE
_MALFORMED = Outcome.MALFORMED
_SSE, _WS = Wire.SSE, Wire.WS


class Framing(Protocol):
    """What the framing that feeds the messages says of what it held back (the SSE decoder)."""

    @property
    def comments(self) -> int:
        """Comment lines seen (keep-alives)."""

    @property
    def pending_bytes(self) -> int:
        """Bytes of an unfinished line."""


class _NoFraming:
    """The framing of a stream whose transport counts no comments (WebSocket)."""

    comments = 0
    pending_bytes = 0


_NO_FRAMING: Framing = _NoFraming()


class StreamTracker:
    """Times one request and decides its outcome.

    Args:
        record: the record to fill in (holds the start time and identity).
        expect: what the request asked for.
        max_event_bytes: the largest SSE event the framing accepts (WS: the protocol's cap).
        collect_text: keep the answer's text in :attr:`text` (a multi-turn conversation
            sends it back as the assistant's message).
        dialect: what the messages mean (default: OpenAI's chunks; see
            :func:`streamslo.stream.dialects.tracker_for`).
    """

    __slots__ = (
        "_check_n",
        "_check_t",
        "_comments_at_token",
        "_last_token_t",
        "content_seen",
        "dialect",
        "done",
        "expect",
        "first_token_timeout",
        "framing",
        "idle",
        "idle_what",
        "ledger",
        "max_event_bytes",
        "pending_t",
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
        dialect: DialectReader | None = None,
    ) -> None:
        self.rec = record
        self.dialect: DialectReader = OpenAIChunks() if dialect is None else dialect
        self.text: list[str] | None = [] if collect_text else None
        """With ``collect_text``: the answer text of each content message, in order."""
        self.expect = expect
        """What the request asked for."""
        self.max_event_bytes = max_event_bytes
        self.framing: Framing = _NO_FRAMING
        """The framing that feeds the messages (its ``comments`` and ``pending_bytes`` name what
        kept a stalled stream alive): the SSE decoder, set by the exchange."""
        self.state = TrackerState.WAITING
        self.progress_t = record.t0
        """When the stall clock last restarted: the request's start, the final response head
        (moved by ``first_token_timeout - stall_timeout``: the first token has its own bound),
        then each token. Nothing else a server sends is progress."""
        self.stall_timeout: float | None = None
        """The stall timeout the reader applies (set by it; for the texts and the cancel rule)."""
        self.first_token_timeout: float | None = None
        """The bound from the head to the first token (None: the stall timeout)."""
        self.pings = 0
        """WebSocket pings (and pongs) since the last token (keep-alives, no progress)."""
        self.idle = 0
        """Messages without a token since the last token (keep-alives, no progress)."""
        self.idle_what = "chunks without a token"
        """What those messages were, for the stall message."""
        self.done = False
        """The terminal marker arrived (the body's end, with ``--no-done-marker``)."""
        self.content_seen = False
        """A token, or the dialect's first event, arrived: on WebSocket the stream has begun, so
        an error from here on is ``error_event``, as after an SSE stream's 200."""
        self.pending_t: float | None = None
        """When a message arrived that is the last token only if the server's count at the
        terminal says exactly one more (an empty chunk carrying the stop reason)."""
        self.ledger = Ledger()
        """What the arrivals can account for beyond one token each (merged chunks)."""
        self._last_token_t: float | None = None
        self._comments_at_token = 0
        # Where token() must look at the request's limits (:meth:`_past_limit`): the count
        # past max_tokens or at --cancel-after Ntok, the time of --cancel-after. Where chunks
        # are not tokens (--coalesced-chunks: a server that packs several tokens in a chunk, or
        # sends chunks that carry none), their count says nothing of max_tokens.
        mt, after_n, after_s = expect.max_tokens, expect.cancel_after_tokens, expect.cancel_after_s
        if expect.coalesced_chunks:
            mt = None
        self._check_n = min(
            _NEVER_N if mt is None else mt + 1, _NEVER_N if after_n is None else after_n
        )
        # (a microsecond early: _past_limit decides by the exact difference)
        self._check_t = math.inf if after_s is None else record.t0 + after_s - 1e-6
        if expect.forced_length and expect.max_tokens is not None:
            record.expected_tokens = expect.max_tokens

    @property
    def finished(self) -> bool:
        """The outcome is decided (after the terminal marker the SSE exchange may still read
        on to the body's end: :attr:`state` is then ``AFTER_DONE``)."""
        return self.rec.outcome is not None

    # ------------------------------------------------------------ what the exchange says
    def begin(self, t: float, status: int) -> None:
        """The stream began: a 2xx head (the exchange checked it is an event stream) or an
        accepted WebSocket (``101``). The first token has its own bound from here."""
        self.rec.status = status
        self.state = TrackerState.STREAMING
        ftt, stall = self.first_token_timeout, self.stall_timeout
        self.progress_t = t + (0.0 if ftt is None or stall is None else ftt - stall)

    def message(self, t: float, data: str, event: str = "message") -> None:
        """One framed message (an SSE event's data and name, a WebSocket text message): its
        dialect says what it means."""
        if self.done:
            dialect = self.dialect
            if dialect.after_end is None or data.strip() != dialect.after_end:
                self.finish(t, _MALFORMED, f"data after {dialect.terminal}", Cause.DATA_AFTER_END)
            return
        self.dialect.read(self, t, data, event)

    def expire(self, t: float, why: Expiry, timeout: float = 0.0) -> None:
        """A wait ran out at ``t``: no progress for ``timeout`` (``stall``), the request's
        deadline ``timeout`` or the client's hang-up time (``deadline``), or the load test
        stopped the stream (``cancel``: ``stalled`` if it had made no progress for the stall
        timeout, else ``cancelled``)."""
        rec = self.rec
        if rec.outcome is not None:
            self.stop_reading()
            return
        if why == "deadline":
            after = self.expect.cancel_after_s
            if after is not None and after < timeout and t - rec.t0 >= after:
                self.finish(t, Outcome.CLIENT_CANCELLED, f"the client hung up after {after:g}s")
            else:
                self.finish(t, Outcome.TIMEOUT, f"request still streaming after {timeout:g}s")
            return
        if why == "cancel":
            stall = self.stall_timeout
            if stall is None or t - self.progress_t < stall:
                self.finish(t, Outcome.CANCELLED, "stopped by the load test")
                return
            timeout = stall
        cause, text = self._stall_text(timeout)
        self.finish(t, Outcome.STALLED, text, cause)

    def stop_reading(self) -> None:
        """The exchange stops reading after the terminal marker (the body ended, or the short
        wait for its end ran out): the outcome stays what the marker made it."""
        if self.rec.outcome is not None:
            self.state = _FINISHED

    def deadline(self, request_timeout: float) -> float:
        """When the transport stops reading (``perf_counter``): the request's deadline, or the
        client's hang-up (``--cancel-after`` a time) if that comes first."""
        end = self.rec.t0 + request_timeout
        after = self.expect.cancel_after_s
        return end if after is None else min(end, self.rec.t0 + after)

    # --------------------------------------------------------------- what a dialect says
    def token(self, t: float, kind: int = ANSWER, n: int = 1) -> None:
        """Tokens arrived at ``t``: one arrival (one ITL gap) holding ``n`` tokens (a chunk
        listing several token ids, a server's running count); ``kind``: what they carried
        (chunkjson's ``ANSWER``, ``REASONING``, ``TOOL``)."""
        rec = self.rec
        tokens = rec.tokens + n
        rec.tokens = tokens
        self.progress_t = t
        if self.idle:
            self.idle = 0
        if self.pings:
            self.pings = 0
        self._comments_at_token = self.framing.comments
        last = self._last_token_t
        self._last_token_t = t
        if last is not None:
            rec.gap_s.append(t - last)
            rec.gap_t.append(t)
        else:
            rec.ttft_s = t - rec.t0
            self.content_seen = True
        if kind != ANSWER:
            self._other_kind(t, kind, n)
        elif rec.ttfo_s is None:
            rec.ttfo_s = t - rec.t0
        if tokens >= self._check_n or t >= self._check_t:
            self._past_limit(t)

    def _other_kind(self, t: float, kind: int, n: int) -> None:
        """Tokens of reasoning or of a tool call: counted apart (time to first tool call)."""
        rec = self.rec
        if kind == REASONING:
            rec.reasoning_tokens += n
        else:
            rec.tool_tokens += n
            if rec.ttftc_s is None:
                rec.ttftc_s = t - rec.t0

    def _past_limit(self, t: float) -> None:
        """A token took the count to a limit the request set, or arrived past its hang-up
        time: more positions than ``max_tokens`` (``malformed``) or the client's hang-up."""
        rec = self.rec
        ex = self.expect
        mt = None if ex.coalesced_chunks else ex.max_tokens
        if mt is not None and rec.tokens > mt:
            self.finish(
                t,
                _MALFORMED,
                f"more token positions ({rec.tokens}) than max_tokens ({mt})",
                Cause.OVER_MAX_TOKENS,
            )
        elif ex.cancel_after_tokens is not None and rec.tokens >= ex.cancel_after_tokens:
            self.finish(
                t, Outcome.CLIENT_CANCELLED, f"the client hung up after {rec.tokens} tokens"
            )
        elif ex.cancel_after_s is not None and t - rec.t0 >= ex.cancel_after_s:
            # The hang-up time passed while this read was on its way: the client is gone.
            self.finish(
                t, Outcome.CLIENT_CANCELLED, f"the client hung up after {ex.cancel_after_s:g}s"
            )

    def error(self, t: float, message: str, status: int | None) -> None:
        """An in-band error (an error chunk or event): ``error_event``; on WebSocket before the
        stream began (no token, no first event) it answers the request as a refused handshake
        would: ``http_4xx`` / ``http_5xx`` by its status (500 when it names none)."""
        if self.rec.protocol == _WS and not self.content_seen:
            code = status if status is not None else 500
            outcome = Outcome.HTTP_4XX if code < 500 else Outcome.HTTP_5XX
            cause = status_cause(code, message) if code < 500 else Cause.HTTP_STATUS
            self.finish(t, outcome, f"error {code}: {message}", cause)
        else:
            self.finish(t, Outcome.ERROR_EVENT, f"error event: {message}")

    def end(self, t: float) -> None:
        """The terminal marker arrived (or, with ``--no-done-marker``, the body ended): judge the
        stop reason and the counts (docs/outcomes.md), the dialect's rules."""
        rec, ex = self.rec, self.expect
        self.done = True
        rec.e2e_s = t - rec.t0
        pending = self.pending_t
        if pending is not None:
            # An empty chunk carrying the stop reason is the last token when the server's count
            # says exactly one more (vLLM: the stop rides on its last token's chunk), and a bare
            # finish chunk otherwise (OpenAI, llama.cpp): docs/outcomes.md.
            self.pending_t = None
            self.ledger.tail = True
            counted = rec.usage_completion_tokens
            if counted is None and ex.forced_length and rec.finish_reason == "length":
                counted = ex.max_tokens
            if counted is not None and counted == rec.tokens + 1:
                self.token(pending)
                if rec.outcome is not None:
                    return
        outcome, cause, error = judge_end(rec, ex, self.dialect.rules, self.ledger, self.text)
        self.finish(t, outcome, error, cause)
        if rec.protocol == _SSE and rec.outcome != _MALFORMED:
            self.state = _AFTER_DONE

    def finish(
        self, t: float, outcome: Outcome, error: str = "", cause: Cause | None = None
    ) -> None:
        """Decide the outcome at ``t`` and its cause (default: the outcome's own,
        :func:`~streamslo.stream.cause.default_cause`). The first decision stands; only data
        after the terminal marker, ``malformed``, replaces the marker's outcome while the body
        is read on."""
        rec = self.rec
        if rec.outcome is not None:
            if outcome is _MALFORMED and self.state is _AFTER_DONE:
                self.state = _FINISHED
                rec.outcome = outcome
                rec.cause = Cause.DATA_AFTER_END
                rec.error = error
            return
        self.state = _FINISHED
        rec.outcome = outcome
        rec.cause = cause if cause is not None else default_cause(outcome)
        if error and not rec.error:
            rec.error = error
        if self.done:
            return
        rec.e2e_s = t - rec.t0
        if (
            outcome is not Outcome.OK
            and outcome is not Outcome.CANCELLED
            and outcome is not Outcome.CLIENT_CANCELLED
            and self._last_token_t is not None
        ):
            # A failed stream's last, open gap: from its last token to the moment it ended.
            rec.gap_s.append(max(0.0, t - self._last_token_t))
            rec.gap_t.append(t)
            rec.open_gap = True

    def _stall_text(self, stall_timeout: float) -> tuple[Cause, str]:
        """Why the stream stalled (its cause), and what kept its connection alive meanwhile."""
        rec = self.rec
        if not status_began(rec.status):
            what = "response head" if rec.protocol == _SSE else "handshake answer"
            return Cause.NO_HEAD, f"no {what} for {stall_timeout:g}s waiting for headers"
        if self._last_token_t is None:
            ftt = self.first_token_timeout
            cause = Cause.NO_FIRST_TOKEN
            text = f"no first token for {ftt if ftt is not None else stall_timeout:g}s after the stream began"
        else:
            cause = Cause.NO_TOKEN
            text = f"no token for {stall_timeout:g}s after {rec.tokens} tokens"
        framing = self.framing
        alive: list[str] = []
        comments = framing.comments - self._comments_at_token
        if comments:
            alive.append(f"{comments} SSE comments")
        if self.idle:
            alive.append(f"{self.idle} {self.idle_what}")
        if self.pings:
            alive.append(f"{self.pings} WebSocket pings")
        pending = framing.pending_bytes
        if pending:
            alive.append(f"an unfinished line ({pending} bytes, no complete SSE line)")
        if alive:
            text += "; " + ", ".join(alive) + " kept the connection alive"
        return cause, text
