"""The report's failures section: the most frequent error texts of each failure outcome.

:func:`top_errors` counts streams.csv's ``error`` column per outcome, so it works on any
results directory; :func:`failure_groups` prefers ``summary.json``'s ``top_errors`` (the
run's own count, shape ``{"<outcome>": [{"error": text, "count": n}, ...]}``) when the run
wrote one, and falls back to streams.csv otherwise. Pure: nothing here prints or writes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from streamslo.reports.load import LoadedRun
from streamslo.reports.model import ErrorText, FailureGroup
from streamslo.results.layout import Layout
from streamslo.stream.outcome import OUTCOMES

#: The results files' names (the one Layout names them).
_FILES = Layout(Path())

__all__ = ["NO_TEXT", "TOP_ERRORS", "failure_groups", "top_errors"]

#: Error texts kept per outcome (the rest are counted as "other texts").
TOP_ERRORS = 5
#: What a failed stream with an empty ``error`` is listed as.
NO_TEXT = "(no error text recorded)"
#: A number inside an error text (a count, a port, a duration).
_NUMBER = r"\d+(?:\.\d+)?"
#: Outcomes that are not failures.
_NOT_FAILURES = ("ok", "cancelled", "client_cancelled")


def _rank(outcome: str) -> int:
    return OUTCOMES.index(outcome) if outcome in OUTCOMES else len(OUTCOMES)


def top_errors(streams: pd.DataFrame, limit: int = TOP_ERRORS) -> dict[str, list[tuple[str, int]]]:
    """``{outcome: [(error text, streams), ...]}`` for every failure outcome in ``streams``,
    most frequent first (ties by text), at most ``limit`` texts each.

    A failed stream without an error text counts as :data:`NO_TEXT`. Texts that differ only in
    their numbers count as one cause, shown as the most frequent of them with ``(and K similar
    texts)``.
    """
    if streams.empty or "outcome" not in streams:
        return {}
    failed = streams[~streams["outcome"].isin(_NOT_FAILURES) & streams["outcome"].notna()]
    if failed.empty:
        return {}
    errors = (
        failed["error"]
        if "error" in failed
        else pd.Series([None] * len(failed), index=failed.index)
    )
    text = errors.astype("object").where(errors.notna(), NO_TEXT).astype(str).str.strip()
    text = text.where(text != "", NO_TEXT)
    # Texts that differ only in their numbers ("after 6 of 64 tokens", "after 7 of 64 tokens")
    # are one cause: counted together and shown as the most frequent of them, with how many
    # other texts like it there were.
    key = text.str.replace(_NUMBER, "N", regex=True)
    frame = pd.DataFrame({"outcome": failed["outcome"].astype(str), "key": key, "text": text})
    per_text = frame.groupby(["outcome", "key", "text"]).size().reset_index(name="m")
    per_text = per_text.sort_values(["m", "text"], ascending=[False, True])
    grouped = (
        per_text.groupby(["outcome", "key"], sort=False)
        .agg(n=("m", "sum"), texts=("text", "size"), top=("text", "first"))
        .reset_index()
    )
    grouped["error"] = [
        top if k == 1 else f"{top} (and {k - 1} similar text{'s' if k > 2 else ''})"
        for top, k in zip(grouped["top"], grouped["texts"], strict=True)
    ]
    counts = grouped[["outcome", "error", "n"]]
    out: dict[str, list[tuple[str, int]]] = {}
    for outcome in sorted(counts["outcome"].unique(), key=lambda o: (_rank(o), o)):
        sub = counts[counts["outcome"] == outcome].sort_values(
            ["n", "error"], ascending=[False, True]
        )
        out[str(outcome)] = [(str(e), int(n)) for e, n in zip(sub["error"], sub["n"], strict=True)][
            :limit
        ]
    return out


def _from_summary(raw: Any, limit: int) -> dict[str, list[tuple[str, int]]] | None:
    """summary.json's ``top_errors`` when it has the documented shape, else None."""
    if not isinstance(raw, Mapping):
        return None
    out: dict[str, list[tuple[str, int]]] = {}
    for outcome, items in raw.items():
        if not isinstance(items, list):
            return None
        rows = []
        for item in items:
            if not isinstance(item, Mapping) or not isinstance(item.get("count"), int):
                return None
            rows.append((str(item.get("error") or NO_TEXT), int(item["count"])))
        if rows and str(outcome) not in _NOT_FAILURES:
            out[str(outcome)] = rows[:limit]
    return out


def failure_groups(runs: Sequence[LoadedRun], limit: int = TOP_ERRORS) -> tuple[FailureGroup, ...]:
    """One :class:`FailureGroup` per run and failure outcome that occurred, after run first."""
    groups: list[FailureGroup] = []
    for run in reversed(runs):
        s = run.streams
        totals = s["outcome"].value_counts() if len(s) else pd.Series(dtype="int64")
        texts = _from_summary(run.top_errors, limit)
        source = _FILES.summary_json.name
        if texts is None:
            texts, source = top_errors(s, limit), _FILES.streams_csv.name
        for outcome, rows in sorted(texts.items(), key=lambda kv: (_rank(kv[0]), kv[0])):
            total = int(totals.get(outcome, sum(n for _, n in rows)))
            if total == 0:
                continue
            shown = tuple(ErrorText(e, n) for e, n in rows)
            groups.append(
                FailureGroup(
                    run.label,
                    run.name,
                    outcome,
                    total,
                    shown,
                    max(0, total - sum(n for _, n in rows)),
                    source,
                )
            )
    return tuple(groups)
