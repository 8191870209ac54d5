"""When one rule explains most of a run's failures, say so, what it means, and the flag or the
cause (docs/servers.md): "97.0 % of streams (…): the server counts more tokens than it sent
token positions; it packs several tokens into one chunk: run with --coalesced-chunks".

A rule that holds for nearly every stream (:data:`EVERY`) is a server that needs a flag; one
that explains most of the failures (:data:`MOST`) of a share that matters (:data:`NOTABLE`) is
said with both readings: the failure the run is there to catch, or a server that needs the
flag. Stop reasons that say the server gave up, and stop reasons streamslo does not know, are
counted and said too.

Pure: it reads ``streams.csv``'s columns, prints nothing. :func:`server_hints` goes to
``summary.json`` (``server_hints``) and the terminal summary.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from streamslo.stream.counts import GAVE_UP_REASONS, KNOWN_REASONS

__all__ = ["EVERY", "MOST", "NOTABLE", "server_hints", "unknown_stop_reasons"]

#: A rule "explains most failures" when it holds for at least this share of the failed streams
#: ...
MOST = 0.5
#: ... and it names a flag outright when it holds for this share of all the run's streams: a
#: server that needs a flag needs it for nearly every stream. A cut stream that says "stop" on
#: some of a run's streams is the silent truncation the run is there to catch (the bundled naive
#: server: 59 % of its streams), not a server that ignores ``ignore_eos``: below this share the
#: hint gives both readings.
EVERY = 0.9
#: Below this share of the run's streams (and 3 streams) a rule is not worth a hint.
NOTABLE = 0.01


class _Rule:
    """One way streams fail, and what it means."""

    __slots__ = ("fix", "matches", "maybe", "what")

    def __init__(
        self,
        what: str,
        matches: Callable[[pd.DataFrame], pd.Series[bool]],
        fix: str,
        maybe: str,
    ) -> None:
        self.what = what
        self.matches = matches
        self.fix = fix
        """What to do when nearly every stream fails so (the server's way)."""
        self.maybe = maybe
        """What it means when some streams fail so: both readings."""


def _text(s: pd.DataFrame) -> pd.Series[str]:
    return s["error"].fillna("").astype(str)


def _num(s: pd.DataFrame, col: str) -> pd.Series[float]:
    return pd.to_numeric(s[col], errors="coerce")


_RULES: tuple[_Rule, ...] = (
    _Rule(
        "the server counts more tokens (usage.completion_tokens) than it sent token positions",
        lambda s: (
            (s["outcome"] == "silent_truncation")
            & (_num(s, "usage_completion_tokens") > _num(s, "tokens"))
        ),
        "it packs several tokens into one chunk: run with --coalesced-chunks",
        "tokens the server generated never reached the client (lost between them), or the "
        "server packs several tokens into one chunk without saying so (then --coalesced-chunks)",
    ),
    _Rule(
        "the stream ended with finish_reason 'stop' under ignore_eos",
        lambda s: (s["outcome"] == "silent_truncation") & (s["finish_reason"] == "stop"),
        "the server does not honour ignore_eos: run with --no-ignore-eos",
        "streams cut short that still say 'stop' (a silent truncation), or a server that "
        "sometimes ignores ignore_eos (then --no-ignore-eos)",
    ),
    _Rule(
        "the server gave up on the stream (its stop reason said so)",
        lambda s: (
            (s["outcome"] == "error_event") & s["finish_reason"].isin(sorted(GAVE_UP_REASONS))
        ),
        "the server aborts its requests: see its log (preemption, a full KV cache, an engine "
        "error, a timeout)",
        "the server aborted these requests: see its log (preemption, a full KV cache, an "
        "engine error, a timeout)",
    ),
    _Rule(
        "the body ended without a [DONE] marker",
        lambda s: (
            (s["outcome"] == "truncated")
            & _text(s).str.contains("body ended before [DONE]", regex=False)
        ),
        "the server ends its streams without [DONE]: run with --no-done-marker",
        "streams cut at a clean end of the body, or a server that sometimes ends without "
        "[DONE] (then --no-done-marker)",
    ),
    _Rule(
        "the server refused stream_options",
        lambda s: (
            s["outcome"].isin(["http_4xx", "error_event"])
            & _text(s).str.contains("stream_options", regex=False)
        ),
        "run with --no-usage",
        "run with --no-usage",
    ),
    _Rule(
        "the server refused ignore_eos",
        lambda s: (
            s["outcome"].isin(["http_4xx", "error_event"])
            & _text(s).str.contains("ignore_eos", regex=False)
        ),
        "run with --no-ignore-eos",
        "run with --no-ignore-eos",
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


def server_hints(streams: pd.DataFrame) -> list[str]:
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
        for c in ("tokens", "usage_completion_tokens", "finish_reason", "error")
        if c not in failed
    }
    if missing:
        failed = failed.assign(**missing)
    n = len(counted)
    for rule in _RULES if len(failed) else ():
        hits = int(rule.matches(failed).sum())
        if not hits or hits < MOST * len(failed) or hits < max(3, NOTABLE * n):
            continue
        share = hits / n * 100.0
        advice = rule.fix if hits >= EVERY * n else rule.maybe
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
