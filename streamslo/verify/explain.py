"""Readable failure text for SLO checks: observed vs threshold, how much data, worst offenders.

Nothing here prints; the checks put the text into their failure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from streamslo.figures import metrics

if TYPE_CHECKING:
    from streamslo.results.layout import RunData
    from streamslo.slo.thresholds import CheckResult, Threshold

__all__ = [
    "explain_empty",
    "explain_incomplete",
    "explain_invalid",
    "explain_result",
    "outcome_counts",
    "worst_offenders",
]

#: The streams.csv column that ranks the streams behind each trend metric.
_RANK_COLUMN = {
    "itl_ms": "max_gap_ms",
    "max_gap_ms": "max_gap_ms",
    "ttft_ms": "ttft_ms",
    "ttft_sched_ms": "ttft_ms",
    "e2e_ms": "e2e_ms",
    "e2e_sched_ms": "e2e_ms",
    "tpot_ms": "e2e_ms",
    "connect_ms": "connect_ms",
}
_SHOWN = ("stream_id", "protocol", "user_class", "outcome", "status")


def _failing_mask(data: Any, metric: str) -> Any:
    """The streams that count against a rate (for goodput: every counted stream that was not
    good); for any other metric, every counted stream that did not end ok."""
    streams = data.streams
    if metric in ("goodput_fraction", "goodput_per_s"):
        bounds = metrics.GoodputBounds.from_run(data.run)
        return metrics.counted_mask(streams) & ~metrics.good_mask(streams, bounds)
    rate = metric if metrics.metric_kind(metric) == "rate" else "error_rate"
    return metrics.failure_mask(streams, rate)


def worst_offenders(
    data: RunData, threshold: Threshold, limit: int = 5
) -> tuple[str, list[dict[str, object]]]:
    """The streams that did most to break a threshold.

    Args:
        data: the run (:class:`streamslo.results.layout.RunData`).
        threshold: the :class:`streamslo.slo.thresholds.Threshold`.
        limit: how many streams at most.

    Returns:
        ``(what ranks them, rows)``: for a trend, the streams with the largest (for an upper
        bound; smallest for a lower bound) value of its column, e.g. ``max_gap_ms`` for
        ``itl_ms``; for a rate or counter, the streams with failing outcomes, earliest first.
    """
    sub = metrics.select(data, dict(threshold.selector)) if threshold.selector else data
    streams = sub.streams
    kind = metrics.metric_kind(threshold.metric)
    if kind == "trend":
        col = _RANK_COLUMN.get(threshold.metric, "max_gap_ms")
        ranked = streams[streams[col].notna()]
        ascending = threshold.op in (">", ">=")
        ranked = ranked.sort_values(col, ascending=ascending, kind="stable").head(limit)
        what = f"{'smallest' if ascending else 'largest'} {col}"
        extra: tuple[str, ...] = (col, "error")
    else:
        ranked = streams[_failing_mask(sub, threshold.metric).to_numpy(dtype=bool)]
        ranked = ranked.sort_values("started_at", kind="stable").head(limit)
        what = "failing streams, earliest first"
        extra = ("max_gap_ms", "error")
    rows = [
        {c: _cell(row[c]) for c in (*_SHOWN, *extra) if c in ranked.columns}
        for _, row in ranked.iterrows()
    ]
    return what, rows


def _cell(v: Any) -> Any:
    try:
        import pandas as pd

        if pd.isna(v):
            return ""
    except (TypeError, ValueError):
        pass
    if isinstance(v, float):
        return round(v, 3)
    return v


def _table(rows: Sequence[dict[str, Any]], indent: str = "    ") -> list[str]:
    if not rows:
        return []
    cols = list(rows[0])
    texts = [[str(r[c])[:60] for c in cols] for r in rows]
    widths = [max(len(c), *(len(t[i]) for t in texts)) for i, c in enumerate(cols)]
    out = [indent + "  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)).rstrip()]
    for t in texts:
        out.append(indent + "  ".join(x.ljust(w) for x, w in zip(t, widths, strict=True)).rstrip())
    return out


def outcome_counts(data: RunData) -> str:
    """``ok 236, truncated 3, http_5xx 1`` (most frequent first), or ``no streams``."""
    streams = data.streams
    if len(streams) == 0:
        return "no streams"
    counts = streams["outcome"].astype("string").fillna("<none>").value_counts()
    return ", ".join(f"{name} {int(n)}" for name, n in counts.items())


def explain_result(result: CheckResult, data: RunData, limit: int = 5) -> str:
    """The failure text of one threshold check.

    Args:
        result: the :class:`streamslo.slo.thresholds.CheckResult`.
        data: the run it was checked on.
        limit: how many offending streams to list.

    Returns:
        Several lines: the verdict, where the threshold was written, the run's outcomes and
        the worst offending streams.
    """
    th = result.threshold
    lines = [result.message, f"  threshold from {th.where}; run {data.path}"]
    lines.append(f"  outcomes: {outcome_counts(data)}")
    what, rows = worst_offenders(data, th, limit)
    if rows:
        lines.append(f"  worst streams ({what}):")
        lines.extend(_table(rows))
    return "\n".join(lines)


def explain_empty(data: RunData) -> str:
    """The failure text of a run with no streams."""
    return (
        f"the run in {data.path} has no streams: streams.csv holds no request, so no SLO can "
        "be checked (did the load generator reach the target? see run.json and the run's log)"
    )


def explain_invalid(data: RunData, allowed: bool = False) -> str:
    """The text of a run whose load generator was saturated: the failure, or (``allowed``:
    checked anyway) the warning."""
    reason = data.run.get("invalid_reason") or data.run.get("reason") or "no reason recorded"
    peak = data.run.get("generator_peak_cpu")
    extra = f"; generator peak CPU {peak}" if peak is not None else ""
    head = (
        f"the run in {data.path} is INVALID (run.json valid: false): {reason}{extra}. Its "
        "latencies measure the load generator, not the server"
    )
    if allowed:
        return head + "; its thresholds were checked anyway (--allow-invalid)"
    return head + (
        "; rerun with fewer users or more processes, or pass --allow-invalid to check it anyway"
    )


def explain_incomplete(data: RunData) -> str:
    """The failure text of a run that was not finalized."""
    return (
        f"the run in {data.path} was not finalized (run.json complete: false): it was killed, "
        "or is still running, so its figures may miss its last streams and its end. Finalize it "
        f"with `streamslo finalize {data.path}` (its end becomes its last record), or pass "
        "--allow-incomplete to check it as it is"
    )
