"""When one cause explains most of a run's failures, say so, what it means, and the flag or the
cause (docs/servers.md): "97.0 % of streams (…): the server counts more tokens than it sent
token positions; it packs several tokens into one chunk: run with --coalesced-chunks".

Each rule reads ``streams.csv``'s ``cause`` (decided once by the stream core, never matched
in the error's words) and what the preflight's contract probes proved of the server
(``run.json``'s ``contract``). Advice rests on that proof: a forced length the probes showed
the server honours is never called ignored, however many streams stop early under it (the
bundled naive server cuts most of its streams under load and says ``stop``: those are the
silent truncations the run is there to catch). Where the probes did not show it, a rule that
holds for nearly every stream (:data:`EVERY`) names the flag; one that explains most of the
failures (:data:`MOST`) of a share that matters (:data:`NOTABLE`) gives both readings. Stop
reasons that say the server gave up, and stop reasons streamslo does not know, are counted and
said too.

Pure: it reads ``streams.csv``'s columns and ``run.json``, prints nothing.
:func:`server_hints` goes to ``summary.json`` (``server_hints``) and the terminal summary.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import pandas as pd

from streamslo.stream.cause import Cause
from streamslo.stream.counts import GAVE_UP_REASONS, KNOWN_REASONS

__all__ = ["EVERY", "MOST", "NOTABLE", "Proven", "server_hints", "unknown_stop_reasons"]

#: A rule "explains most failures" when it holds for at least this share of the failed streams
#: ...
MOST = 0.5
#: ... and it names a flag outright when it holds for this share of all the run's streams (and
#: the probes did not prove otherwise): a server that needs a flag needs it for nearly every
#: stream.
EVERY = 0.9
#: Below this share of the run's streams (and 3 streams) a rule is not worth a hint.
NOTABLE = 0.01


@dataclass(frozen=True)
class Proven:
    """What the preflight's probes proved of the server (``run.json``'s ``contract``)."""

    forced: str = ""
    """The forced length the run used, when the probes showed (or the engine is known for) its
    effect; empty otherwise."""
    done_marker: bool = False
    """The probes saw the server end its streams with the terminal marker."""

    @classmethod
    def of(cls, run: Mapping[str, object] | None) -> Proven:
        contract = (run or {}).get("contract")
        if not isinstance(contract, dict) or contract.get("failure"):
            return cls()
        forced = str(contract.get("forced_length") or "")
        status = next(
            (
                m.get("status")
                for m in contract.get("means") or ()
                if isinstance(m, dict) and m.get("means") == forced
            ),
            None,
        )
        return cls(
            forced=forced if status in ("proven", "known") else "",
            done_marker=contract.get("done_marker") is True,
        )


class _Rule:
    """One way streams fail, and what it means."""

    __slots__ = ("advice", "matches", "what")

    def __init__(
        self,
        what: str,
        matches: Callable[[pd.DataFrame], pd.Series[bool]],
        advice: Callable[[Proven, bool], str],
    ) -> None:
        self.what = what
        self.matches = matches
        self.advice = advice
        """What it means, given what the probes proved and whether nearly every stream fails
        so."""


def _num(s: pd.DataFrame, col: str) -> pd.Series[float]:
    return pd.to_numeric(s[col], errors="coerce")


def _cause(s: pd.DataFrame, *causes: Cause) -> pd.Series[bool]:
    return s["cause"].isin([str(c) for c in causes]).fillna(False).astype(bool)


def _merged(proven: Proven, every: bool) -> str:
    if every:
        return "it packs several tokens into one chunk: run with --coalesced-chunks"
    return (
        "tokens the server generated never reached the client (lost between them), or the "
        "server packs several tokens into one chunk without saying so (then --coalesced-chunks)"
    )


def _stopped(proven: Proven, every: bool) -> str:
    if proven.forced:
        return (
            "streams cut short that still say 'stop': silent truncations (before the load the "
            f"probes showed the server honours {proven.forced}: an idle stream runs to its length)"
        )
    if every:
        return (
            "the server does not honour the forced length: run with --forced-length none (and "
            "let `streamslo check URL` find one it honours)"
        )
    return (
        "streams cut short that still say 'stop' (a silent truncation), or a server that "
        "sometimes ignores the forced length (its effect was not shown before the load)"
    )


def _no_terminal(proven: Proven, every: bool) -> str:
    if proven.done_marker:
        return (
            "streams cut at a clean end of the body (before the load the probes saw the "
            "server end its streams with [DONE])"
        )
    if every:
        return "the server ends its streams without [DONE]: run with --no-done-marker"
    return (
        "streams cut at a clean end of the body, or a server that sometimes ends without "
        "[DONE] (then --no-done-marker)"
    )


def _gave_up(proven: Proven, every: bool) -> str:
    return (
        "the server aborts its requests: see its log (preemption, a full KV cache, an engine "
        "error, a timeout)"
    )


_RULES: tuple[_Rule, ...] = (
    _Rule(
        "the server counts more tokens (usage.completion_tokens) than it sent token positions",
        lambda s: (
            _cause(s, Cause.POSITIONS_MISSING)
            & (_num(s, "usage_completion_tokens") > _num(s, "tokens"))
        ),
        _merged,
    ),
    _Rule(
        "the stream ended with an ordinary stop reason before its forced length",
        lambda s: _cause(s, Cause.STOPPED_EARLY, Cause.COUNTED_SHORT),
        _stopped,
    ),
    _Rule(
        "the server gave up on the stream (its stop reason said so)",
        lambda s: _cause(s, Cause.GAVE_UP),
        _gave_up,
    ),
    _Rule(
        "the body ended without a [DONE] marker",
        lambda s: _cause(s, Cause.NO_TERMINAL),
        _no_terminal,
    ),
)


def unknown_stop_reasons(streams: pd.DataFrame) -> dict[str, int]:
    """Stop reasons (``finish_reason``) that no dialect documents, with their stream counts,
    most frequent first: judged by their counts, never silently taken as an ordinary end."""
    if streams.empty or "finish_reason" not in streams:
        return {}
    reasons = streams["finish_reason"].dropna().astype(str)
    unknown = reasons[~reasons.isin(sorted(KNOWN_REASONS | GAVE_UP_REASONS))]
    counts = unknown.value_counts()
    ranked = sorted(counts.items(), key=lambda kv: (-int(kv[1]), str(kv[0])))
    return {str(k): int(v) for k, v in ranked}


def server_hints(streams: pd.DataFrame, run: Mapping[str, object] | None = None) -> list[str]:
    """One sentence per rule that explains most of the failed streams, and one for stop reasons
    streamslo does not know, e.g. ``"97.0 % of streams (…): the server counts more tokens …;
    it packs …"``.
    """
    if streams.empty or "outcome" not in streams:
        return []
    hints: list[str] = []
    counted = streams[streams["outcome"] != "cancelled"]
    failed = counted[counted["outcome"] != "ok"]
    # An older or hand-made streams table may lack a column a rule reads: it matches nothing.
    missing = {
        c: None
        for c in ("tokens", "usage_completion_tokens", "finish_reason", "error", "cause")
        if c not in failed
    }
    if missing:
        failed = failed.assign(**missing)
    n = len(counted)
    proven = Proven.of(run)
    for rule in _RULES if len(failed) else ():
        hits = int(rule.matches(failed).sum())
        if not hits or hits < MOST * len(failed) or hits < max(3, NOTABLE * n):
            continue
        share = hits / n * 100.0
        advice = rule.advice(proven, hits >= EVERY * n)
        hints.append(f"{share:.1f} % of streams ({hits} of {n}): {rule.what}; {advice}")
    unknown = unknown_stop_reasons(counted)
    if unknown:
        listed = ", ".join(f"{r!r} ({k})" for r, k in list(unknown.items())[:5])
        hints.append(
            f"{sum(unknown.values())} of {n} streams ended with a stop reason streamslo does not "
            f"know: {listed}; they were judged by their token counts: check what the server "
            "means by it"
        )
    return hints
