"""The report's tables as rows of text, shared by the HTML page, the Markdown and the terminal
summary: numbers with their units, metric ids beside their names, change judged by direction,
run.json values in words, and the headline.

Nothing here computes a figure or prints: the numbers come from the report model.
"""

from __future__ import annotations

import math
from typing import Any

from streamslo.reports.glossary import OUTCOME_MEANINGS, metric_label, metric_unit, protocol_text
from streamslo.reports.model import (
    Difference,
    FailureGroup,
    OutcomeCount,
    Report,
    RunInfo,
    SessionSummary,
)
from streamslo.stream.error_groups import with_similar

__all__ = [
    "ci_text",
    "fmt",
    "headline",
    "judged",
    "report_rows",
    "run_title",
    "session_rows",
    "value_text",
]


def fmt(v: object, digits: int = 1, signed: bool = False, pct: bool = False) -> str:
    """Format a number for a table (``—`` for missing)."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if not isinstance(v, (int, float)):
        return str(v)
    x = float(v) * (100.0 if pct else 1.0)
    sign = "+" if signed else ""
    text = f"{x:{sign},.{digits}f}"
    return text + (" %" if pct else "")


def value_text(metric: str, v: float | None, signed: bool = False) -> str:
    """A threshold's or metric's value with its unit (rates in %)."""
    unit = metric_unit(metric)
    if unit == "%":
        return fmt(v, _pct_digits(v), signed, pct=True)
    text = fmt(v, 1, signed)
    return text if v is None or not unit else f"{text} {unit}"


def _pct_digits(v: float | None) -> int:
    """Two decimals of a percentage; four for a rate under 0.01 % that is not zero (a threshold
    such as ``rate<0.0001`` must not read 0.00 % when it failed)."""
    return 4 if v is not None and 0 < abs(v) < 1e-4 else 2


def _observed(metric: str, v: float | None) -> str:
    """A threshold's observed value; ``no data`` when the run had nothing to measure."""
    return "no data" if v is None else value_text(metric, v)


def ci_text(d: Difference | None, pct: bool = False) -> str:
    """``[low, high]`` of a change's interval (``—`` without one)."""
    if d is None or d.ci_low is None:
        return "—"
    digits = 2 if pct else 1
    return f"[{fmt(d.ci_low, digits, True, pct)}, {fmt(d.ci_high, digits, True, pct)}]"


def judged(d: Difference | None) -> str:
    """``better`` / ``worse`` (a real change, by the metric's direction) or ``within noise``."""
    if d is None or d.significant is None:
        return "—"
    return d.change or ("real" if d.significant else "within noise")


def _named(metric: str) -> str:
    """``Time to first token (ttft_ms)``: the name a person reads and the id a threshold uses."""
    label = metric_label(metric)
    return metric if label == metric else f"{label} ({metric})"


_RUN_FIELDS = (
    ("valid", "valid"),
    ("target", "target"),
    ("scenario", "scenario"),
    ("users", "users"),
    ("protocol", "protocol"),
    ("start", "start (UTC)"),
    ("duration_s", "duration"),
    ("requests", "requests"),
    ("streams_began", "streams that began"),
    ("tokens", "tokens"),
    ("generator", "load generator"),
    ("path", "results"),
)


def report_rows(report: Report) -> dict[str, list[list[str]]]:
    """Every table of the report as rows of text (shared by HTML, Markdown and the terminal)."""
    two = report.before is not None
    t: dict[str, list[list[str]]] = {}
    if two:
        t["verdicts"] = [["SLO", "threshold", "before", "after", "change", "verdict"]] + [
            [
                v.metric,
                v.expression,
                _observed(v.metric, v.before),
                _observed(v.metric, v.after),
                value_text(v.metric, v.delta, True),
                v.verdict,
            ]
            for v in report.verdicts
        ]
        t["rates"] = [["rate", "before", "after", "change", "95 % CI of change", "judged"]] + [
            [
                _named(r.metric),
                _rate_cell(r.before, r.before_counts),
                _rate_cell(r.after, r.after_counts),
                fmt(
                    r.difference.delta if r.difference else None,
                    _pct_digits(r.difference.delta if r.difference else None),
                    True,
                    True,
                ),
                ci_text(r.difference, True),
                judged(r.difference),
            ]
            for r in report.rates
        ]
        t["throughput"] = [["", "before", "after", "change"]] + [
            [
                _named(s.metric),
                value_text(s.metric, s.before),
                value_text(s.metric, s.after),
                value_text(s.metric, s.delta, True),
            ]
            for s in report.throughput
        ]
        lat = [
            [
                "metric",
                "stat",
                "before (ms)",
                "after (ms)",
                "change (ms)",
                "95 % CI of change",
                "judged",
            ]
        ]
        for lc in report.latency:
            if lc.after.count == 0 and (lc.before is None or lc.before.count == 0):
                continue
            for i, d in enumerate(lc.differences):  # the metric's name on its first row only
                lat.append(
                    [
                        _named(lc.metric) if i == 0 else "",
                        d.stat,
                        fmt(d.before),
                        fmt(d.after),
                        fmt(d.delta, 1, True),
                        ci_text(d),
                        judged(d),
                    ]
                )
            lat.append(["", "max (samples)", _max_n(lc.before), _max_n(lc.after), "", "", ""])
        t["latency"] = lat
        t["outcomes"] = [["outcome", "protocol", "before", "after", "meaning"]] + [
            [
                o.outcome,
                _proto(o.protocol),
                fmt(o.before, 0),
                fmt(o.after, 0),
                OUTCOME_MEANINGS.get(o.outcome, ""),
            ]
            for o in _outcome_rows(report)
        ]
    else:
        t["verdicts"] = [["SLO", "threshold", "observed", "verdict"]] + [
            [v.metric, v.expression, _observed(v.metric, v.after), v.verdict]
            for v in report.verdicts
        ]
        t["rates"] = [["rate", "value"]] + [
            [_named(r.metric), _rate_cell(r.after, r.after_counts)] for r in report.rates
        ]
        t["throughput"] = [["", "value"]] + [
            [_named(s.metric), value_text(s.metric, s.after)] for s in report.throughput
        ]
        lat = [["metric (ms)", "p50", "p90", "p95", "p99", "max", "mean", "samples"]]
        for lc in report.latency:
            a = lc.after
            if a.count == 0:
                continue
            lat.append(
                [
                    _named(lc.metric),
                    fmt(a.p50),
                    fmt(a.p90),
                    fmt(a.p95),
                    fmt(a.p99),
                    fmt(a.max),
                    fmt(a.mean),
                    fmt(a.count, 0),
                ]
            )
        t["latency"] = lat
        t["outcomes"] = [["outcome", "protocol", "requests", "meaning"]] + [
            [o.outcome, _proto(o.protocol), fmt(o.after, 0), OUTCOME_MEANINGS.get(o.outcome, "")]
            for o in _outcome_rows(report)
        ]
    t["runs"] = [["", *[run_title(r) for r in report.runs]]] + [
        [label, *[_run_field(r, key) for r in report.runs]] for key, label in _RUN_FIELDS
    ]
    t["failures"] = (
        [["run", "outcome", "cause", "streams", "error text (the group's most frequent)"]]
        + [
            [
                run_title(g),
                g.outcome,
                e.cause or "—",
                fmt(e.count, 0),
                with_similar(e.error, e.texts),
            ]
            for g in report.failures
            for e in g.errors
        ]
        + [
            [run_title(g), g.outcome, "", fmt(g.other, 0), "(other groups)"]
            for g in report.failures
            if g.other
        ]
    )
    t["sessions"] = session_rows(report)
    t["glossary"] = [["id", "name", "unit", "meaning"]] + [
        [g.metric, g.name, g.unit, g.meaning] for g in report.glossary
    ]
    return t


def session_rows(report: Report) -> list[list[str]]:
    """The agentic sessions' summary, a row per run (only the header without sessions)."""
    rows = [
        [
            "run",
            "sessions",
            "whole",
            "session success rate",
            "session e2e p50 (ms)",
            "p99 (ms)",
            "max (ms)",
            "steps a session",
            "steps not sent",
            "deepest step",
            "tool time",
        ]
    ]
    for s in report.session_summary:
        rows.append(
            [
                run_title(s),
                fmt(s.sessions, 0),
                fmt(s.whole, 0),
                fmt(s.success_rate, 2, pct=True),
                fmt(s.e2e_p50_ms),
                fmt(s.e2e_p99_ms),
                fmt(s.e2e_max_ms),
                fmt(s.steps_mean),
                fmt(s.steps_not_sent, 0),
                fmt(s.max_depth, 0),
                fmt(s.tool_share, 1, pct=True),
            ]
        )
    return rows


def _outcome_rows(report: Report) -> list[OutcomeCount]:
    """Outcomes that occurred; with one protocol only its rows (the "all" rows repeat them)."""
    seen = [o for o in report.outcomes if o.before or o.after]
    protocols = {o.protocol for o in seen if o.protocol != "all"}
    return [o for o in seen if (o.protocol != "all") == (len(protocols) == 1)]


def _max_n(stats: Any) -> str:
    return "—" if stats is None else f"{fmt(stats.max)} ({fmt(stats.count, 0)})"


def _proto(protocol: str) -> str:
    return "all" if protocol == "all" else protocol_text(protocol)


def run_title(r: RunInfo | FailureGroup | SessionSummary) -> str:
    return r.label if r.name == r.label else f"{r.label} ({r.name})"


def _rate_cell(v: float | None, counts: tuple[int, int] | None) -> str:
    if counts is None:
        return "—"
    if counts[1] == 0:
        return "no data (0 of 0)"
    return f"{fmt(v, _pct_digits(v), pct=True)} ({counts[0]:,} of {counts[1]:,})"


def _generator(g: dict[str, Any]) -> str:
    parts = []
    if isinstance(g.get("peak_cpu_percent"), (int, float)):
        parts.append(f"peak CPU {g['peak_cpu_percent']:.0f} %")
    if isinstance(g.get("cpu_busy_fraction"), (int, float)):
        parts.append(f"saturated {g['cpu_busy_fraction'] * 100:.0f} % of the time")
    if isinstance(g.get("lag_p99_ms"), (int, float)):
        parts.append(f"event-loop lag p99 {g['lag_p99_ms']:.1f} ms")
    if isinstance(g.get("processes"), int):
        parts.append(f"{g['processes']} process{'es' if g['processes'] != 1 else ''}")
    return ", ".join(parts) or "—"


def _run_field(r: RunInfo, key: str) -> str:
    if key == "valid":
        return "yes" if r.valid else f"NO: {r.invalid_reason or 'no reason recorded'}"
    if key == "generator":
        return _generator(r.generator)
    if key == "duration_s":
        return fmt(r.duration_s, 1) + " s" if r.duration_s is not None else "—"
    if key == "protocol":
        return protocol_text(r.protocol)
    v = getattr(r, key)
    if isinstance(v, (dict, list, tuple)):
        return (
            ", ".join(f"{k} {x}" for k, x in v.items())
            if isinstance(v, dict)
            else ", ".join(map(str, v))
        )
    return fmt(v, 0) if isinstance(v, int) and not isinstance(v, bool) else fmt(v)


def _all_failed(report: Report) -> bool:
    a = report.after
    ok = sum(o.after for o in report.outcomes if o.protocol == "all" and o.outcome == "ok")
    return a.requests > 0 and ok == 0


def _failure_line(report: Report) -> str:
    """``Every request failed: 812 connect_error ("Connection refused").``, or ""."""
    if not _all_failed(report):
        return ""
    groups = sorted(
        (g for g in report.failures if g.label == report.after.label), key=lambda g: -g.count
    )
    if not groups:
        return f"Every one of its {report.after.requests:,} requests failed."
    top = groups[0]
    text = f' ("{top.errors[0].error}")' if top.errors else ""
    return f"Every one of its {report.after.requests:,} requests failed: {top.count:,} {top.outcome}{text}."


def headline(report: Report) -> str:
    text = _verdict_line(report)
    failed = _failure_line(report)
    if failed:
        text += " " + failed
    if not report.after.valid and any(lc.after.count for lc in report.latency):
        text += " But the run is INVALID: these latencies measure the load generator."
    return text


def _verdict_line(report: Report) -> str:
    failed = [v for v in report.verdicts if not v.after_passed]
    who = "the after run" if report.before is not None else "the run"
    if not report.verdicts:
        return "No SLO thresholds were checked."
    if not failed:
        fixed = [v for v in report.verdicts if v.verdict == "fixed"]
        extra = f" ({len(fixed)} fixed since the before run)" if fixed else ""
        return f"PASS: {who} met all {len(report.verdicts)} SLO thresholds{extra}."
    names = ", ".join(f"{v.metric} {v.expression}" for v in failed)
    return f"FAIL: {who} broke {len(failed)} of {len(report.verdicts)} thresholds: {names}."
