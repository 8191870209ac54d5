"""Thresholds and rates checked on running totals (merged histograms), while a run goes.

The live ``abortOnFail`` of ``streamslo run``, the Locust web UI's Stream SLOs tab and the
progress line read the totals of :class:`streamslo.figures.windows.WindowBook` (or ``live.json``), never
the whole results. The populations are those of :mod:`streamslo.figures.metrics`; the one difference is
precision: a percentile here is within the histogram's 1 % of the exact one that ``verify``
computes at the end (:mod:`streamslo.figures.histogram`). Rates and counts are exact.

Not checked live (they need more than counts and histograms): ``goodput_fraction`` and
``goodput_per_s``, the session metrics (a session is judged when all its steps have ended), and a
selector on a key the groups do not carry. Such thresholds are
checked at the end only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from streamslo.figures.metrics import metric_kind
from streamslo.figures.windows import GROUP_KEYS, Group, GroupAggregate, counts_of, merge_groups
from streamslo.slo.thresholds import SLO, CheckResult, Threshold
from streamslo.stream.outcome import EXCLUDED_OUTCOMES

__all__ = [
    "LIVE_UNSUPPORTED",
    "counts_of",
    "evaluate_live",
    "live_abort_check",
    "rate_from_counts",
    "select_groups",
    "threshold_label",
    "totals_from_wire",
    "totals_to_wire",
]

#: Metrics that cannot be checked on running totals.
LIVE_UNSUPPORTED = frozenset(
    {
        "goodput_fraction",
        "goodput_per_s",
        # A session is judged when all its steps have ended: at the run's end, not by window.
        "session_success_rate",
        "session_e2e_ms",
        "sessions",
        "session_goodput_per_s",
        # Which ok streams stopped on their own unchecked is read from streams.csv at the end.
        "unchecked_stop_rate",
    }
)


def select_groups(
    groups: Mapping[Group, GroupAggregate], selector: Iterable[tuple[str, str]]
) -> dict[Group, GroupAggregate]:
    """The groups matching every ``key: value`` of a threshold selector."""
    sel = [(GROUP_KEYS.index(k), str(v)) for k, v in selector]
    return {g: a for g, a in groups.items() if all(g[i] == v for i, v in sel)}


def rate_from_counts(name: str, outcomes: Mapping[str, int], began: int) -> tuple[int, int]:
    """(numerator, denominator) of a rate metric from outcome counts, as
    :func:`streamslo.figures.metrics.rate_value` computes it from ``streams.csv``.

    Args:
        name: a rate metric (not ``goodput_fraction``).
        outcomes: requests by outcome.
        began: streams that began and were not cancelled.

    Raises:
        KeyError: not a rate metric, or ``goodput_fraction``.
    """
    if metric_kind(name) != "rate" or name in LIVE_UNSUPPORTED:
        raise KeyError(name)
    counted = sum(v for k, v in outcomes.items() if k not in EXCLUDED_OUTCOMES)
    if name == "truncation_rate":
        return began - int(outcomes.get("ok", 0)), began
    if name == "error_rate":
        return counted - int(outcomes.get("ok", 0)), counted
    return int(outcomes.get(name[: -len("_rate")], 0)), counted


def threshold_label(th: Threshold) -> str:
    """``truncation_rate``, ``itl_ms p(99)``: a threshold's metric and aggregation, for a table."""
    agg = th.expression.split(th.op, 1)[0]
    return th.metric_key if metric_kind(th.metric) == "rate" else f"{th.metric_key} {agg}"


def _fmt(v: float) -> str:
    return str(int(v)) if v.is_integer() and abs(v) < 1e15 else f"{v:.6g}"


_COMPARE = {
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
}


def evaluate_live(
    th: Threshold, groups: Mapping[Group, GroupAggregate], elapsed_s: float
) -> CheckResult | None:
    """Check one threshold on running totals.

    Args:
        th: the threshold.
        groups: the totals by group.
        elapsed_s: seconds since the run started (counter ``rate`` and gauges divide by it).

    Returns:
        The result (``observed`` None and failed when there is no data yet), or None when the
        metric cannot be checked live (:data:`LIVE_UNSUPPORTED`).
    """
    if th.metric in LIVE_UNSUPPORTED or any(k not in GROUP_KEYS for k, _ in th.selector):
        return None  # a selector the groups do not carry: checked at the end
    sub = select_groups(groups, th.selector)
    kind = metric_kind(th.metric)
    numerator: int | None = None
    observed: float | None
    unit = ""
    if kind == "rate":
        outcomes, began_n = counts_of(sub)
        num, den = rate_from_counts(th.metric, outcomes, began_n)
        observed, samples, numerator = (None if den == 0 else num / den), den, num
        basis = f"{num} of {den} streams"
    elif kind == "trend":
        h = merge_groups(sub.values()).trends.get(th.metric)
        samples = h.count if h is not None else 0
        unit = " ms"
        if th.aggregation == "count":
            observed, unit = float(samples), ""
        elif h is None or samples == 0:
            observed = None
        elif th.aggregation == "p":
            observed = h.percentile(th.percentile or 0.0)
        elif th.aggregation == "med":
            observed = h.quantile(0.5)
        elif th.aggregation == "avg":
            observed = h.mean
        elif th.aggregation == "min":
            observed = h.min
        else:
            observed = h.max
        basis = f"{samples} samples, live (±1 %)"
    elif kind == "counter":
        total = merge_groups(sub.values())
        outcomes, began_n = counts_of(sub)
        value = {"requests": total.requests, "tokens": total.tokens, "streams_began": began_n}[
            th.metric
        ]
        samples = total.requests
        if th.aggregation == "count":
            observed, basis = float(value), f"{samples} requests"
        else:
            observed = value / elapsed_s if elapsed_s > 0 else None
            unit, basis = "/s", f"{value} over {elapsed_s:.0f} s"
    else:  # gauge: requests_per_s, tokens_per_s
        total = merge_groups(sub.values())
        outcomes, _ = counts_of(sub)
        value = (
            total.tokens
            if th.metric == "tokens_per_s"
            else total.requests - sum(outcomes.get(o, 0) for o in EXCLUDED_OUTCOMES)
        )
        samples = total.requests
        observed = value / elapsed_s if elapsed_s > 0 else None
        unit, basis = "/s", f"{value} over {elapsed_s:.0f} s"
    label = threshold_label(th)
    if observed is None:
        return CheckResult(th, None, False, samples, numerator, f"{label}: no data yet ({basis})")
    passed = bool(_COMPARE[th.op](observed, th.value))
    message = f"{label} = {_fmt(observed)}{unit} ({basis}); threshold {th.expression}: {'ok' if passed else 'FAILED'}"
    return CheckResult(th, observed, passed, samples, numerator, message)


def live_abort_check(
    slo: SLO, groups: Mapping[Group, GroupAggregate], elapsed_s: float
) -> list[CheckResult]:
    """The ``abortOnFail`` thresholds that fail now (after their ``delayAbortEval``), from the
    running totals. No data aborts nothing (as :func:`streamslo.slo.thresholds.abort_check`)."""
    failed = []
    for th in slo.thresholds:
        if not th.abort_on_fail or elapsed_s < th.delay_abort_eval_s:
            continue
        res = evaluate_live(th, groups, elapsed_s)
        if res is not None and res.observed is not None and not res.passed:
            failed.append(res)
    return failed


def totals_to_wire(groups: Mapping[Group, GroupAggregate]) -> list[list[object]]:
    """Totals as plain lists (``live.json``)."""
    return [[list(g), a.to_wire()] for g, a in groups.items()]


def totals_from_wire(data: Iterable[Any]) -> dict[Group, GroupAggregate]:
    """Raises ValueError for data that is not totals."""
    out: dict[Group, GroupAggregate] = {}
    try:
        for key, wire in data:
            group: Group = tuple(str(x) for x in key)  # type: ignore[assignment]
            if len(group) != len(GROUP_KEYS):
                raise ValueError(f"a group key has {len(group)} fields")
            out[group] = GroupAggregate.from_wire(wire)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"not window totals: {exc}") from None
    return out
