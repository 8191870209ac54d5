"""The timing record of one stream (docs/timing.md), and the request expectations it is judged by.

Durations are kept in seconds from :func:`time.perf_counter`; only ``started_at`` (and
``scheduled_at``) are wall-clock epoch seconds. Milliseconds appear only at the edges
(the ``streams.csv`` row, :func:`streamslo.results.columns.stream_row`; Locust's ``response_time``).
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from enum import StrEnum

from streamslo.stream.cause import Cause
from streamslo.stream.outcome import Outcome

__all__ = ["StreamExpectations", "StreamRecord", "Wire"]


@dataclass(frozen=True, slots=True)
class StreamExpectations:
    """What a request asked for, hence what a complete stream must look like."""

    max_tokens: int | None = None
    """The ``max_tokens`` sent, or None when the request set none."""
    cancel_after_s: float | None = None
    """``--cancel-after``: the client hangs up this long after the request started, unless
    the stream ended first (``client_cancelled``)."""
    cancel_after_tokens: int | None = None
    """``--cancel-after Ntok``: the client hangs up once this many content chunks arrived."""
    forced_length: bool = True
    """The request forced its length (``ignore_eos: true``, ``min_tokens``, a bias against the
    end-of-sequence token...: docs/servers.md): exactly ``max_tokens`` tokens, and the stop
    reason of the length limit."""
    coalesced_chunks: bool = False
    """The server may pack several tokens into one chunk: only count checks via usage apply."""
    done_marker: bool = True
    """The stream ends with ``[DONE]``; when False the clean end of the body is the marker."""
    stop_token_counted: bool = False
    """The server's usage counts the end-of-sequence token that ended an answer, a token with
    no text (llama.cpp): a natural end one token short of usage is whole."""
    reference: str | None = None
    """The reply this prompt got when the server was idle (greedy, seeded, one stream at a
    time): an ordinary stop while the answer is a strict prefix of it is a silent truncation
    (the tracker keeps the answer's text to compare). None: no reference."""


class Wire(StrEnum):
    """How a stream travels (``streams.csv``'s ``protocol``); each compares equal to its name."""

    SSE = "sse"
    """Server-sent events over HTTP/1.1."""
    WS = "ws"
    """A WebSocket, one request's messages after another's."""


@dataclass(slots=True)
class StreamRecord:
    """Everything measured about one request. Filled in by the tracker as bytes arrive."""

    stream_id: str
    protocol: Wire
    """``sse`` or ``ws`` (:class:`Wire`)."""
    user_class: str
    started_at: float
    """Unix epoch seconds when the request started."""
    t0: float
    """perf_counter() when the request started; every duration counts from here."""
    scheduled_at: float | None = None
    """Open-loop runs: the epoch second the arrival process scheduled this request for."""
    status: int | None = None
    outcome: Outcome | None = None
    cause: Cause | None = None
    """Why it ended as it did (:mod:`streamslo.stream.cause`), decided with the outcome."""
    connect_s: float | None = None
    ttft_s: float | None = None
    e2e_s: float | None = None
    tokens: int = 0
    """Content chunks received."""
    expected_tokens: int | None = None
    usage_completion_tokens: int | None = None
    usage_prompt_tokens: int | None = None
    """The server's ``usage.prompt_tokens`` (the prompt as the server counted it)."""
    conversation_id: str | None = None
    """Multi-turn runs: the conversation this request belongs to."""
    turn: int | None = None
    """Multi-turn runs: 1 for a conversation's first request, 2 for the next..."""
    scenario: str | None = None
    """The ``[scenarios.NAME]`` this stream belongs to; None outside scenarios."""
    session_id: str | None = None
    """Agentic sessions: the session this step belongs to."""
    step_id: str | None = None
    """Agentic sessions: the step's id in its session."""
    depth: int | None = None
    """Agentic sessions: 1 for a root step, one more than its deepest parent otherwise."""
    wait_s: float | None = None
    """Agentic sessions: the tool (or think) time the step waited after its parents ended."""
    session_steps: int | None = None
    """Agentic sessions: how many steps its session has (planned, sent or not)."""
    parent_ids: str | None = None
    """Agentic sessions: its parents' step ids, ``;``-joined, in the session's order."""
    cached_tokens: int | None = None
    """The server's ``usage.prompt_tokens_details.cached_tokens`` (prefix-cache hits)."""
    finish_reason: str | None = None
    bytes: int = 0
    error: str = ""
    gap_s: array[float] = field(default_factory=lambda: array("d"))
    """Each inter-token gap in seconds; index 0 is the gap before the second token. Doubles in
    an ``array`` (8 bytes a gap, not a list's pointer and float object: 32), since a stream
    holds them while it is open: 64 → 16 bytes per token received with :attr:`gap_t`
    (``bench/RESULTS.md``, memory per open stream)."""
    gap_t: array[float] = field(default_factory=lambda: array("d"))
    """perf_counter() at the end of each gap."""
    open_gap: bool = False
    """True when the last gap is a failed stream's open gap (last chunk to the end)."""
    reported_tokens: int | None = None
    """Token count for tpot: content chunks, or usage under coalesced chunks."""
    ttfo_s: float | None = None
    """Start to the first *answer* token (AIPerf's TTFO): reasoning and tool-call tokens come
    before it; None when no answer token arrived."""
    reasoning_tokens: int = 0
    """Token positions that carried reasoning (``reasoning_content``, reasoning deltas,
    ``thinking_delta``); part of :attr:`tokens`."""
    tool_tokens: int = 0
    """Token positions that carried tool-call arguments (or a tool's name); part of :attr:`tokens`."""
    ttftc_s: float | None = None
    """Start to the first tool-call token (time to first tool call); None without one."""
    reference: str | None = None
    """With a reference reply: ``match`` (the answer is its reference), ``prefix`` (an
    ordinary stop on a strict prefix of it: a silent truncation) or ``diverged`` (another
    text: this stream's silent stops could not be checked); None without one."""

    @property
    def max_gap_s(self) -> float | None:
        return max(self.gap_s) if self.gap_s else None

    @property
    def tpot_s(self) -> float | None:
        n = self.reported_tokens if self.reported_tokens is not None else self.tokens
        if self.ttft_s is None or self.e2e_s is None or n < 2:
            return None
        return (self.e2e_s - self.ttft_s) / (n - 1)
