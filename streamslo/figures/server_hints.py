"""When one rule explains most of a run's failures, say so, and name the flag the server needs
(docs/servers.md): "the server counts more tokens than it sends positions in 97 % of streams:
it packs several tokens into one chunk: run with --coalesced-chunks".

Pure: it reads ``streams.csv``'s columns, prints nothing. :func:`server_hints` goes to
``summary.json`` (``server_hints``) and the terminal summary.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

__all__ = ["EVERY", "MOST", "server_hints"]

#: A rule "explains most failures" when it holds for at least this share of the failed streams
#: ...
MOST = 0.5
#: ... and of all the run's streams: a server that needs a flag needs it for nearly every
#: stream. A cut stream that says "stop" on some of a run's streams is the silent truncation
#: the run is there to catch (the bundled naive server: 59 % of its streams), not a server that
#: ignores ``ignore_eos``: advising ``--no-ignore-eos`` there would hide it.
EVERY = 0.9

_Rule = tuple[str, Callable[[pd.DataFrame], "pd.Series[bool]"], str]


def _text(s: pd.DataFrame) -> pd.Series[str]:
    return s["error"].fillna("").astype(str)


def _num(s: pd.DataFrame, col: str) -> pd.Series[float]:
    return pd.to_numeric(s[col], errors="coerce")


_RULES: tuple[_Rule, ...] = (
    (
        "the server counts more tokens (usage.completion_tokens) than it sent token positions",
        lambda s: (
            (s["outcome"] == "silent_truncation")
            & (_num(s, "usage_completion_tokens") > _num(s, "tokens"))
        ),
        "it packs several tokens into one chunk: run with --coalesced-chunks",
    ),
    (
        "the stream ended with finish_reason 'stop' under ignore_eos",
        lambda s: (s["outcome"] == "silent_truncation") & (s["finish_reason"] == "stop"),
        "the server does not honour ignore_eos: run with --no-ignore-eos",
    ),
    (
        "the body ended without a [DONE] marker",
        lambda s: (
            (s["outcome"] == "truncated")
            & _text(s).str.contains("body ended before [DONE]", regex=False)
        ),
        "the server ends its streams without [DONE]: run with --no-done-marker",
    ),
    (
        "the server refused stream_options",
        lambda s: (
            s["outcome"].isin(["http_4xx", "error_event"])
            & _text(s).str.contains("stream_options", regex=False)
        ),
        "run with --no-usage",
    ),
    (
        "the server refused ignore_eos",
        lambda s: (
            s["outcome"].isin(["http_4xx", "error_event"])
            & _text(s).str.contains("ignore_eos", regex=False)
        ),
        "run with --no-ignore-eos",
    ),
)


def server_hints(streams: pd.DataFrame) -> list[str]:
    """One sentence per rule that explains most of the failed streams (none when the run had
    no failure), e.g. ``"97.0 % of streams: the server counts more tokens ...; it packs ..."``.
    """
    if streams.empty or "outcome" not in streams:
        return []
    counted = streams[streams["outcome"] != "cancelled"]
    failed = counted[counted["outcome"] != "ok"]
    if failed.empty:
        return []
    # An older or hand-made streams table may lack a column a rule reads: it matches nothing.
    missing = {
        c: None
        for c in ("tokens", "usage_completion_tokens", "finish_reason", "error")
        if c not in failed
    }
    if missing:
        failed = failed.assign(**missing)
    hints: list[str] = []
    for what, rule, fix in _RULES:
        hits = int(rule(failed).sum())
        if hits and hits >= MOST * len(failed) and hits >= EVERY * len(counted):
            share = hits / len(counted) * 100.0
            hints.append(f"{share:.1f} % of streams ({hits} of {len(counted)}): {what}; {fix}")
    return hints
