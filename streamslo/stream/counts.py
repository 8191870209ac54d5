"""How a stream's end is judged: its stop reason and its token counts, the same rules for every
dialect (docs/outcomes.md, "Token positions" and "Stop reasons").

The stream's machine (:class:`~streamslo.stream.tracker.StreamTracker`) calls :func:`judge_end`
once, when the terminal marker arrives, for every dialect; a dialect object only says which
stop reasons mean what (:class:`EndRules`). Nothing here reads a clock or does I/O.

**Merged chunks.** An engine may put several tokens into one chunk: llama.cpp sends nothing for a
token whose text ends inside an unfinished UTF-8 sequence, and its bytes come with the next
token; vLLM's Responses and Messages streams send no delta for a token whose text its
detokenizer holds back. ``usage`` then counts more tokens than chunks arrived, though nothing
was lost. Where the server gives a per-chunk count (vLLM's ``token_ids``, llama.cpp's
``timings.predicted_n``, a cumulative ``usage`` on every chunk) the tracker counts from it, and a
jump is the server's word: a chunk holds the tokens counted since the one before (llama.cpp sends
no chunk for a token with no text, such as an end-of-sequence token under ``ignore_eos``), so a
chunk lost on the way cannot be told from such a token. Where the server gives none, a
shortfall against ``usage`` is
explained by the text that arrived (:class:`Ledger`): every byte of a multi-byte character in it
may have been a token held back, so a stream whose missing positions fit there is whole. What
cannot then be seen: a lost chunk whose tokens fit in the spare room that merged chunks left (one
lost event beside merged ones). A stream of plain ASCII text has no spare room: every missing
position is a loss.
"""

from __future__ import annotations

from dataclasses import dataclass

from streamslo.stream.cause import Cause
from streamslo.stream.outcome import Outcome
from streamslo.stream.timing import StreamExpectations, StreamRecord

__all__ = [
    "GAVE_UP_REASONS",
    "KNOWN_REASONS",
    "TAIL_TOKENS",
    "EndRules",
    "Ledger",
    "judge_end",
    "text_capacity",
]

#: Tokens an empty chunk can stand for at the end of a stream: the bytes of an unfinished UTF-8
#: sequence (at most 3) that a server never sends, though its ``usage`` counts their tokens.
TAIL_TOKENS = 3

#: Stop reasons that say the server gave up on the request (vLLM's ``abort`` when its engine
#: aborted it, ``error``; SGLang's ``abort``): the server's failure, whatever the counts say.
GAVE_UP_REASONS: frozenset[str] = frozenset(
    {"abort", "aborted", "error", "cancelled", "canceled", "failed", "timeout"}
)


def text_capacity(text: str) -> int:
    """How many tokens one arrival carrying ``text`` can hold.

    One, plus one for every byte of a multi-byte character in it: a token held back because its
    bytes ended inside an unfinished UTF-8 sequence comes with a later one, and every such token
    ends at a distinct byte of a multi-byte character (a replacement character, U+FFFD, stands
    for up to three bytes a server could not decode). Plain ASCII text holds one token.
    """
    if text.isascii():
        return 1
    return 1 + sum(len(c.encode("utf-8", "surrogatepass")) for c in text if not c.isascii())


@dataclass(frozen=True, slots=True)
class EndRules:
    """What a dialect's stop reasons mean."""

    terminal: str
    """The terminal marker's name, for messages (``[DONE]``, ``message_stop``...)."""
    noun: str
    """What the dialect's token arrivals are called in messages (``token positions``)."""
    length: frozenset[str]
    """Stop reasons that say the length limit ran out (a forced length's complete end)."""
    complete: frozenset[str]
    """Stop reasons of a complete stream when no length was forced."""
    cut: frozenset[str] = frozenset()
    """Stop reasons that say content was withheld (``content_filter``, ``refusal``): always a
    silent truncation."""
    complete_is_length_at_limit: str = ""
    """A stop reason that also ends a forced length when the usage reached the limit (the
    Responses API's ``completed``: vLLM and llama.cpp send it at ``max_output_tokens``)."""
    tool: frozenset[str] = frozenset()
    """Stop reasons that say the answer ended with a tool call: a complete step of an agent,
    also under a forced length (the model stops to let the tool run), never a truncation."""
    strict: bool = False
    """An unknown stop reason is a silent truncation (the event dialects name every reason); in
    the OpenAI chunk dialects an unknown one without a forced length is judged by the counts
    and reported in the summary."""


#: Every stop reason some dialect documents as an ordinary end (a reason outside it and
#: :data:`GAVE_UP_REASONS` is reported as unknown in the run's summary).
KNOWN_REASONS: frozenset[str] = frozenset(
    {
        "stop",
        "length",
        "tool_calls",
        "function_call",
        "content_filter",
        "eos_token",
        "stop_sequence",
        "completed",
        "max_output_tokens",
        "end_turn",
        "tool_use",
        "max_tokens",
        "pause_turn",
        "refusal",
        "model_context_window_exceeded",
    }
)


class Ledger:
    """What the arrivals of one stream can account for, beyond one token each."""

    __slots__ = ("counted", "spare", "tail", "tool_end", "whole_text")

    def __init__(self) -> None:
        self.spare = 0
        """Tokens the text that arrived could hold beyond one an arrival (:func:`text_capacity`)."""
        self.counted = False
        """The server counted the tokens of its chunks itself, chunk by chunk: its count is
        the stream's."""
        self.tail = False
        """The stream ended with a chunk without text (where an unfinished UTF-8 sequence's
        tokens would be)."""
        self.tool_end = False
        """The terminal event says the answer ended with a tool call (a Responses final
        response whose last output is a function call)."""
        self.whole_text = False
        """The terminal event repeated the whole text, and it matched what arrived: nothing was
        lost in transit, whatever the count of deltas."""

    def add_text(self, text: str) -> None:
        """An arrival counted as one token carried ``text``."""
        if not text.isascii():
            self.spare += text_capacity(text) - 1

    def explains(self, missing: int) -> bool:
        """Whether ``missing`` positions fit in what the arrivals could hold."""
        if self.whole_text:
            return True
        if self.counted:
            # The server counted its tokens chunk by chunk: tokens after its last count that
            # came with no chunk are tokens with no text (llama.cpp sends none for an
            # end-of-sequence token under ignore_eos, nor for an unfinished UTF-8 sequence).
            return True
        room = self.spare
        if room and self.tail:
            room += TAIL_TOKENS  # (only beside multi-byte text: plain ASCII has no tail to hold)
        return missing <= room


def judge_end(
    rec: StreamRecord,
    expect: StreamExpectations,
    rules: EndRules,
    ledger: Ledger,
    text: list[str] | None = None,
) -> tuple[Outcome, Cause, str]:
    """The outcome of a stream whose terminal marker arrived, its cause, and its reason (empty
    for ok).

    Sets ``rec.reported_tokens`` where the count is the server's (``--coalesced-chunks``, or
    merged chunks that the text accounts for), and ``rec.reference`` where the request has a
    reference reply (``text``: the answer's text as it arrived).
    """
    usage = rec.usage_completion_tokens
    n = rec.tokens
    mt = expect.max_tokens
    noun = rules.noun
    if expect.coalesced_chunks and usage is not None:
        rec.reported_tokens = usage
    reason = rec.finish_reason
    if reason is None:
        if not expect.done_marker:
            # No terminal marker to wait for: the stop reason is the only sign of a whole
            # answer, and a body that ended before one was cut (a gateway that gave up).
            return (
                Outcome.TRUNCATED,
                Cause.NO_STOP_REASON,
                f"the body ended with no stop reason after {n} {noun}",
            )
        return Outcome.MALFORMED, Cause.NO_STOP_REASON, f"{rules.terminal} with no stop reason"
    if reason in GAVE_UP_REASONS:
        return (
            Outcome.ERROR_EVENT,
            Cause.GAVE_UP,
            f"the server gave up: stop reason {reason!r} after {n} {noun}",
        )
    if expect.coalesced_chunks:
        # The chunks are not tokens (several may share one, or one carry none): no count of
        # them is held against max_tokens or usage (a hosted API's usage may count more than
        # max_tokens: reasoning, a tool call's framing).
        pass
    elif mt is not None and n > mt:
        return Outcome.MALFORMED, Cause.OVER_MAX_TOKENS, f"more {noun} ({n}) than max_tokens ({mt})"
    elif usage is not None and n > usage:
        return Outcome.MALFORMED, Cause.OVER_USAGE, f"{n} {noun} but usage says {usage} tokens"
    tool_end = reason in rules.tool or ledger.tool_end
    forced = expect.forced_length and mt is not None and not tool_end
    if forced:
        at_limit = (
            reason == rules.complete_is_length_at_limit
            and usage is not None
            and mt is not None
            and usage >= mt
        )
        if reason not in rules.length and not at_limit:
            return (
                Outcome.SILENT_TRUNCATION,
                Cause.STOPPED_EARLY,
                f"stop reason {reason!r} under a forced length after {n} of {mt} tokens",
            )
        if usage is not None and mt is not None and usage < mt:
            return (
                Outcome.SILENT_TRUNCATION,
                Cause.COUNTED_SHORT,
                f"the server counted {usage} tokens, below the forced length {mt}",
            )
    elif reason in rules.cut:
        return Outcome.SILENT_TRUNCATION, Cause.WITHHELD, f"stop reason {reason!r} after {n} {noun}"
    elif rules.strict and reason not in rules.complete:
        return (
            Outcome.SILENT_TRUNCATION,
            Cause.UNKNOWN_STOP,
            f"stop reason {reason!r} after {n} {noun}",
        )
    elif expect.reference is not None and text is not None and not tool_end:
        found = _against_reference(rec, expect.reference, "".join(text), reason, rules)
        if found is not None:
            return found
    if expect.coalesced_chunks:
        return Outcome.OK, Cause.COMPLETE, ""
    counted = usage if usage is not None else (mt if forced else None)
    if counted is not None and n < counted:
        stop_token = (
            expect.stop_token_counted
            and not forced
            and reason in rules.complete
            and reason not in rules.length
            and counted - n == 1
        )
        if stop_token or ledger.explains(counted - n):
            # (stop_token: an engine that counts the end-of-sequence token that ended the
            # answer, a token with no text: llama.cpp.)
            # Merged chunks: the server's count is the stream's (docs/outcomes.md).
            rec.reported_tokens = counted
            return Outcome.OK, Cause.COMPLETE, ""
        if usage is not None:
            return (
                Outcome.SILENT_TRUNCATION,
                Cause.POSITIONS_MISSING,
                f"{n} {noun} arrived of {usage} the server counted",
            )
        return Outcome.SILENT_TRUNCATION, Cause.POSITIONS_MISSING, f"{n} {noun} of max_tokens {mt}"
    return Outcome.OK, Cause.COMPLETE, ""


def _against_reference(
    rec: StreamRecord, reference: str, answer: str, reason: str, rules: EndRules
) -> tuple[Outcome, Cause, str] | None:
    """A stream's end judged against the prompt's reference reply: an ordinary stop on a strict
    prefix of it is a silent truncation; the same text, or a prefix its own length ended,
    matches; any other text diverged (this stream's silent stops cannot be checked: counted
    apart, never taken as checked). Sets ``rec.reference``."""
    if answer == reference or (reason in rules.length and reference.startswith(answer)):
        # (a prefix that its own length ended: the reference ran on under a larger max_tokens)
        rec.reference = "match"
        return None
    if reference.startswith(answer):
        rec.reference = "prefix"
        return (
            Outcome.SILENT_TRUNCATION,
            Cause.REFERENCE_PREFIX,
            f"stop reason {reason!r} after {len(answer)} of the {len(reference)} characters of "
            "its reference reply (the text so far matches it)",
        )
    rec.reference = "diverged"
    return None
