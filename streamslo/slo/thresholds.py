"""SLO thresholds (docs/thresholds.md): k6's grammar in a TOML file, parsed once, evaluated over a run.

An SLO file::

    [thresholds]
    truncation_rate = ["rate<0.001"]
    "itl_ms{protocol:ws}" = ["p(99)<200", "p(99.9)<=500"]
    ttft_ms = ["p(95)<2000", { threshold = "p(99)<5000", abortOnFail = true, delayAbortEval = "10s" }]

- A key is a metric of :mod:`streamslo.figures.metrics`, optionally with a selector in k6 tags style,
  ``metric{key:value,key:value}`` over :data:`streamslo.figures.metrics.SELECTOR_KEYS` (TOML needs such
  a key quoted).
- An expression is ``AGGREGATION OPERATOR NUMBER``. Aggregations by metric kind: a *rate*
  takes ``rate``; a *trend* takes ``p(N)`` (N in [0, 100], fractions allowed), ``avg``,
  ``min``, ``max``, ``med`` and ``count``; a *counter* takes ``count`` and ``rate`` (per second
  of the run); a *gauge* (``requests_per_s``, ``tokens_per_s``, ``goodput_per_s``) takes
  ``value``. Operators: ``<  <=  >  >=  ==  !=``, compared exactly like k6: ``p(99)<200``
  fails at exactly 200 and ``p(99)<=200`` passes.
- Percentiles are numpy's default ``linear`` over every sample (:func:`streamslo.figures.metrics.percentile`),
  the same everywhere (summary, verify, report).
- A metric with no data (a rate with no denominator, a trend with no sample) has the observed
  value ``None`` and its thresholds fail with "no data"; a count is 0, never ``None``.

Errors are :class:`~streamslo.errors.SLOFileError`, naming the file, the line and what was
expected. :func:`evaluate` checks a finished run; :func:`abort_check` is the live check a
runner calls while a run goes (``abortOnFail`` after ``delayAbortEval``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streamslo.figures import metrics
from streamslo.slo._parse import (
    AGGREGATIONS,
    DEFAULT_SLO,
    OPERATORS,
    SLO,
    Threshold,
    _known_metrics,
    load_slo,
    parse_expression,
    parse_metric_key,
    parse_slo,
    parse_thresholds_table,
    slo_of,
    thresholds_of,
    truth_of,
)

if TYPE_CHECKING:
    from streamslo.results.layout import RunData

__all__ = [
    "AGGREGATIONS",
    "DEFAULT_SLO",
    "OPERATORS",
    "SLO",
    "CheckResult",
    "Threshold",
    "abort_check",
    "evaluate",
    "evaluate_threshold",
    "load_slo",
    "parse_expression",
    "parse_metric_key",
    "parse_slo",
    "parse_thresholds_table",
    "slo_of",
    "thresholds_of",
    "truth_of",
    "unmet_requirements",
    "write_slo_json",
]


@dataclass(frozen=True, slots=True)
class CheckResult:
    """The outcome of one threshold over one run."""

    threshold: Threshold
    observed: float | None
    """The aggregated value; None when the metric has no data."""
    passed: bool
    samples: int
    """Trend: samples aggregated; rate: the denominator; counter: requests in the run."""
    numerator: int | None
    """Rate metrics: how many of :attr:`samples` counted; None otherwise."""
    message: str
    """One readable line: observed vs threshold, and how much data it rests on."""

    @property
    def metric(self) -> str:
        """The metric with its selector."""
        return self.threshold.metric_key

    @property
    def expression(self) -> str:
        return self.threshold.expression

    def as_dict(self) -> dict[str, object]:
        """The ``slo.json`` entry."""
        th = self.threshold
        return {
            "metric": th.metric_key,
            "expression": th.expression,
            "observed": self.observed,
            "passed": self.passed,
            "samples": self.samples,
            "numerator": self.numerator,
            "message": self.message,
            "abort_on_fail": th.abort_on_fail,
            "source": th.where,
        }


# --------------------------------------------------------------------------- evaluation
_COMPARE = {
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
}


def _fmt(v: float) -> str:
    if v.is_integer() and abs(v) < 1e15:
        return str(int(v))
    return f"{v:.6g}"


def evaluate_threshold(
    threshold: Threshold, data: RunData, *, duration_s: float | None = None
) -> CheckResult:
    """Check one threshold against a run.

    Args:
        threshold: the threshold.
        data: the run (:class:`streamslo.results.layout.RunData`).
        duration_s: the run's length for counter ``rate`` (per second); by default measured
            from the run.

    Returns:
        The :class:`CheckResult`; no data means ``observed`` None and a failure.
    """
    th = threshold
    sub = metrics.select(data, dict(th.selector)) if th.selector else data
    kind = metrics.metric_kind(th.metric)
    observed: float | None
    numerator: int | None = None
    unit = ""
    if kind == "rate":
        num, den = metrics.rate_value(sub, th.metric)
        observed, samples, numerator = (None if den == 0 else num / den), den, num
        basis = f"{num} of {den} streams"
    elif kind == "trend":
        values = metrics.trend_samples(sub, th.metric)
        samples, unit = int(values.size), " ms"
        streams = len(
            metrics.latency_pool(sub.streams)
        )  # began, not cancelled: the samples' streams
        if th.aggregation == "count":
            observed, unit = float(values.size), ""
        elif values.size == 0:
            observed = None
        elif th.aggregation == "p":
            observed = metrics.percentile(values, th.percentile or 0.0)
        elif th.aggregation == "med":
            observed = metrics.percentile(values, 50.0)
        elif th.aggregation == "avg":
            observed = float(values.mean())
        elif th.aggregation == "min":
            observed = float(values.min())
        else:
            observed = float(values.max())
        noun = "gaps" if th.metric == "itl_ms" else "samples"
        basis = f"{samples} {noun} from {streams} streams"
    elif kind == "counter":
        total = metrics.counter_value(sub, th.metric)
        samples = len(sub.streams)
        if th.aggregation == "count":
            observed = total
            basis = f"{samples} requests"
        else:
            dur = duration_s if duration_s is not None else metrics.run_duration_s(sub)
            observed = None if not dur else total / dur
            unit = "/s"
            basis = f"{_fmt(total)} over {_fmt(dur)} s" if dur else "no run duration"
    elif kind == "gauge":
        samples = len(sub.streams)
        observed = metrics.gauge_value(sub, th.metric)
        unit = "/s"
        basis = (
            f"{samples} requests"
            if observed is not None
            else "no run duration or no goodput bounds"
        )
    else:  # parse_* never builds such a threshold; a hand-built one gets a clear error
        raise ValueError(f"unknown metric {th.metric!r}; known metrics: {_known_metrics()}")
    label = f"{th.metric_key} {th.expression.split(th.op, 1)[0]}"
    if observed is None:
        if th.selector and len(sub.streams) == 0:
            basis = _no_match(dict(th.selector), len(data.streams))
        return CheckResult(
            th,
            None,
            False,
            samples,
            numerator,
            f"{label}: no data ({basis}); threshold {th.expression} cannot hold",
        )
    passed = bool(_COMPARE[th.op](observed, th.value))
    verdict = "ok" if passed else "FAILED"
    message = f"{label} = {_fmt(observed)}{unit} ({basis}); threshold {th.expression}: {verdict}"
    return CheckResult(th, observed, passed, samples, numerator, message)


def _no_match(selector: dict[str, str], total: int) -> str:
    """Why a selected metric has no data: its selector matched no stream of the run."""
    if set(selector) == {"protocol"}:
        what = f"no {selector['protocol']} streams in this run"
    else:
        what = (
            "no streams with " + ", ".join(f"{k}={v}" for k, v in selector.items()) + " in this run"
        )
    return f"{what}: the selector matched none of its {total} streams"


def evaluate(slo: SLO, data: RunData, *, duration_s: float | None = None) -> list[CheckResult]:
    """Check every threshold of an SLO against a run.

    Args:
        slo: the SLO.
        data: the run (:class:`streamslo.results.layout.RunData`).
        duration_s: the run's length for counter ``rate`` thresholds (default: measured).

    Returns:
        One :class:`CheckResult` per threshold, in the SLO's order.
    """
    return [evaluate_threshold(th, data, duration_s=duration_s) for th in slo.thresholds]


def unmet_requirements(slo: SLO, run: Mapping[str, object]) -> list[str]:
    """What ``[truth] require`` asks of a run that it could not check, one sentence each (empty:
    every requirement met, or none).

    Args:
        slo: the SLO (its :attr:`SLO.require`).
        run: the run's ``run.json`` (its ``truth``).
    """
    from streamslo.stream.truth import Truth

    if not slo.require:
        return []
    truth = Truth.from_dict(run.get("truth"))
    if truth is None:
        return [
            f"{slo.require_where} requires that a run sees {', '.join(slo.require)}; this results "
            "directory does not say what its run could check (written before streamslo kept it)"
        ]
    out = []
    for check in slo.require:
        if not truth.sees(check):
            why = truth.why_not.get(check, "no means")
            out.append(
                f"{slo.require_where} requires that a run sees {check.replace('_', ' ')}; "
                f"this run could not: {why}"
            )
    return out


def abort_check(slo: SLO, data: RunData, elapsed_s: float) -> list[CheckResult]:
    """The live check: the ``abortOnFail`` thresholds that fail now and may stop the run.

    A threshold is considered once ``elapsed_s`` reaches its ``delayAbortEval``. A metric with
    no data yet aborts nothing (like k6, which evaluates a threshold only on samples); the
    final :func:`evaluate` still fails it.

    Args:
        slo: the SLO.
        data: what the run has measured so far (:class:`streamslo.results.layout.RunData`).
        elapsed_s: seconds since the run started (also the duration for counter ``rate``).

    Returns:
        The failed results; empty when the run may go on.
    """
    due = [th for th in slo.thresholds if th.abort_on_fail and elapsed_s >= th.delay_abort_eval_s]
    failed: list[CheckResult] = []
    for th in due:
        res = evaluate_threshold(th, data, duration_s=elapsed_s if elapsed_s > 0 else None)
        if res.observed is not None and not res.passed:
            failed.append(res)
    return failed


def write_slo_json(
    directory: str | Path,
    results: Sequence[CheckResult],
    *,
    source: str | None = None,
    extra: Mapping[str, object] | None = None,
) -> Path:
    """Write ``DIR/slo.json``: every threshold checked (docs/results.md).

    Args:
        directory: the results directory.
        results: the checks, as :func:`evaluate` returns them.
        source: the SLO's source to record (default: the first threshold's file).
        extra: more top-level fields (e.g. ``{"aborted": true, "valid": false}``).

    Returns:
        The path written.

    Raises:
        OSError: the directory cannot be written.
    """
    from streamslo.results.layout import Layout, write_json

    path = Layout(Path(directory)).slo_json
    if source is None:
        source = results[0].threshold.source if results else "<default>"
    doc: dict[str, Any] = {
        "checked_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "slo": source,
        "passed": all(r.passed for r in results),
        "thresholds": [r.as_dict() for r in results],
    }
    if extra:
        doc.update(extra)
    write_json(path, doc)
    return path
