"""The history's outputs, and where they go: one self-contained HTML page with a trend chart
per metric, Markdown for a CI comment, and JSON (everything the page shows). Nothing here
computes a verdict; only :func:`write_history` writes, the rest return strings.

A trend chart: each run a point at its value with its interval (its own streams resampled), the
runs of the newest run's baseline in blue, a run that regressed in red, a run that failed its
thresholds hollow; the band is the newest run's baseline ± its margin.
"""

from __future__ import annotations

import html
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streamslo.history.series import HistoryReport
from streamslo.history.verdict import Change, RunJudgement
from streamslo.reports.charts import Chart, png_base64
from streamslo.reports.render import CSS, figures_html
from streamslo.results import markup
from streamslo.slo.regression import HISTORY_METRICS

__all__ = [
    "Written",
    "headline",
    "output_paths",
    "render_html",
    "render_json",
    "render_markdown",
    "summary_lines",
    "verdict_rows",
    "write_history",
]

_EXTRA_CSS = """
.v-regressed{background:#fbd3d0;color:#8e1b10}.v-improved{background:#d7f0db;color:#1b5e20}
.v-ok{background:#d7f0db;color:#1b5e20}
"""


def _num(metric: str, v: float | None, signed: bool = False) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    spec = HISTORY_METRICS[metric]
    sign = "+" if signed else ""
    if spec.unit == "ratio":
        return f"{v * 100:{sign}.3f} %"
    if spec.unit == "ms":
        return f"{v:{sign},.1f} ms"
    return f"{v:{sign},.1f}/s"


def _interval(metric: str, low: float | None, high: float | None, signed: bool = False) -> str:
    if low is None or high is None:
        return ""
    return f" [{_num(metric, low, signed)}, {_num(metric, high, signed)}]"


def _relative(c: Change) -> str:
    r = c.relative
    return "" if r is None else f" ({r * 100:+.1f} %)"


def verdict_rows(j: RunJudgement) -> list[list[str]]:
    """The newest run's table: each judged metric's value, baseline, change and verdict."""
    rows = [["metric", "this run [95 % CI]", "baseline", "change [CI]", "margin", "verdict"]]
    for mid, c in j.changes.items():
        rows.append(
            [
                mid,
                _num(mid, c.value) + _interval(mid, c.low, c.high),
                _num(mid, c.baseline),
                (
                    _num(mid, c.delta, True)
                    + _relative(c)
                    + _interval(mid, c.delta_low, c.delta_high, True)
                )
                if c.delta is not None
                else "—",
                _num(mid, c.margin) if c.margin is not None else "—",
                c.verdict,
            ]
        )
    return rows


def _thresholds(j: RunJudgement) -> str:
    return {True: "held", False: "failed", None: "—"}[j.run.passed]


def _run_rows(report: HistoryReport) -> list[list[str]]:
    rows = [["#", "started (UTC)", "code", "thresholds", "verdict", "regressed metrics"]]
    for i, j in enumerate(reversed(report.judgements)):
        rows.append(
            [
                str(report.series_runs - i),
                j.run.start.replace("T", " ")[:19],
                j.run.code_version or j.run.tool_version or "—",
                _thresholds(j),
                j.verdict,
                ", ".join(j.regressed) or "—",
            ]
        )
    return rows


def headline(report: HistoryReport) -> str:
    """One line: the newest run's verdict."""
    j = report.newest
    when = j.run.start.replace("T", " ")[:16]
    if j.verdict == "regressed":
        parts = [
            f"{m} {_num(m, j.changes[m].delta, True)}{_relative(j.changes[m])}" for m in j.regressed
        ]
        return f"REGRESSION in the run of {when}: " + "; ".join(parts)
    if j.verdict == "no baseline":
        passed = sum(1 for x in report.judgements[:-1] if x.sets_the_standard)
        return (
            f"No verdict for the run of {when} yet: {passed} earlier run(s) passed, "
            f"{report.settings.min_baseline} needed"
        )
    return f"No regression in the run of {when} against the {len(j.baseline_ids)} runs before it that passed"


def summary_lines(report: HistoryReport) -> str:
    """What the command prints: the headline and the newest run's table."""
    from streamslo.reports.render import text_table

    return headline(report) + "\n\n" + text_table(verdict_rows(report.newest))


def _chart(report: HistoryReport, metric: str) -> Chart | None:
    from matplotlib.figure import Figure

    js = report.judgements
    xs = list(range(len(js)))
    vals = [j.changes[metric].value if metric in j.changes else None for j in js]
    if all(v is None for v in vals):
        return None
    spec = HISTORY_METRICS[metric]
    scale = 100.0 if spec.unit == "ratio" else 1.0
    fig = Figure(figsize=(5.2, 2.6))
    ax = fig.add_subplot(1, 1, 1)
    newest = js[-1]
    base = set(newest.baseline_ids)
    c_new = newest.changes.get(metric)
    if c_new is not None and c_new.baseline is not None and c_new.margin is not None:
        lo = (c_new.baseline - c_new.margin) * scale
        hi = (c_new.baseline + c_new.margin) * scale
        ax.axhspan(lo, hi, color="#1f77b4", alpha=0.08, lw=0)
        ax.axhline(c_new.baseline * scale, color="#1f77b4", lw=0.8, ls="--")
    for x, j, v in zip(xs, js, vals, strict=True):
        if v is None:
            continue
        c = j.changes[metric]
        color = (
            "#c0392b" if c.verdict == "regressed" else "#1f77b4" if j.run.id in base else "#7a7f88"
        )
        low = (v - c.low) * scale if c.low is not None else 0.0
        high = (c.high - v) * scale if c.high is not None else 0.0
        ax.errorbar(
            [x],
            [v * scale],
            yerr=[[max(low, 0.0)], [max(high, 0.0)]],
            fmt="o",
            ms=4,
            color=color,
            mfc=color if j.run.passed is not False else "white",
            capsize=2,
            lw=1,
        )
    labels = [j.run.start[5:10] for j in js]
    step = max(1, len(xs) // 8)
    ax.set_xticks(xs[::step])
    ax.set_xticklabels(labels[::step], fontsize=8)
    ax.tick_params(axis="y", labelsize=8)
    unit = {"ratio": "%", "ms": "ms", "per_s": "per s"}[spec.unit]
    ax.set_title(f"{metric} ({unit})", fontsize=10)
    ax.grid(alpha=0.3)
    verdict = c_new.verdict if c_new is not None else "no data"
    return Chart(
        metric,
        f"{metric} over the last {len(js)} runs",
        f"{metric}: each run with its 95 % interval; blue the newest run's baseline, red a "
        f"regression, hollow a run whose thresholds failed. Newest: {verdict}.",
        png_base64(fig),
    )


def render_html(report: HistoryReport) -> str:
    """The page."""
    j = report.newest
    cls = {"regressed": "failb", "ok": "okb", "no baseline": "warn"}[j.verdict]
    charts = [c for m in report.settings.metrics if (c := _chart(report, m)) is not None]
    s = report.settings
    method = (
        f"Each run is judged against the last {s.baseline} runs of the series that passed before "
        f"it (valid, every threshold held, no regression; at least {s.min_baseline}). A change "
        f"counts when its {s.confidence * 100:g} % interval excludes no change (streams and "
        "nights resampled) and it is larger than the metric's margin. docs/history.md."
    )
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>streamslo history: {html.escape(report.scenario)}</title>",
        f"<style>{CSS}{_EXTRA_CSS}</style></head><body><main>",
        f"<h1>Run history: {html.escape(report.scenario)}</h1>",
        f'<div class="sub">against {html.escape(report.target)} · {report.series_runs} runs in '
        f"the store ({html.escape(str(report.store))}), the last {len(report.judgements)} shown</div>",
        f'<div class="banner {cls}">{html.escape(headline(report))}</div>',
        "<h2>The newest run against its baseline</h2>",
        markup.html_table(verdict_rows(j), verdict_col=5),
        "<h2>Trends</h2>",
        figures_html(charts),
        "<h2>Runs</h2>",
        markup.html_table(_run_rows(report), verdict_col=4),
        f'<p class="note">{html.escape(method)}</p>',
        "</main></body></html>",
    ]
    return "\n".join(parts) + "\n"


def render_markdown(report: HistoryReport) -> str:
    """For a CI comment: the headline, the newest run's table, the runs."""
    j = report.newest
    mark = {"regressed": "❌", "ok": "✅", "no baseline": "⏳"}[j.verdict]
    out = [
        f"### streamslo history: {report.scenario} against {report.target}",
        "",
        f"{mark} {headline(report)}",
        "",
        markup.markdown_table(verdict_rows(j)),
        "",
        f"<details><summary>the last {len(report.judgements)} runs</summary>",
        "",
        markup.markdown_table(_run_rows(report)),
        "",
        "</details>",
    ]
    return "\n".join(out) + "\n"


def _change(c: Change) -> dict[str, Any]:
    return {
        "value": c.value,
        "low": c.low,
        "high": c.high,
        "baseline": c.baseline,
        "change": c.delta,
        "change_low": c.delta_low,
        "change_high": c.delta_high,
        "relative_change": c.relative,
        "margin": c.margin,
        "verdict": c.verdict,
    }


def _judgement(j: RunJudgement) -> dict[str, Any]:
    r = j.run
    return {
        "id": r.id,
        "start": r.start,
        "path": r.path,
        "tool_version": r.tool_version,
        "code_version": r.code_version,
        "locust_version": r.locust_version,
        "passed": r.passed,
        "valid": r.valid,
        "verdict": j.verdict,
        "regressed": list(j.regressed),
        "baseline": list(j.baseline_ids),
        "metrics": {m: _change(c) for m, c in j.changes.items()},
    }


def _safe(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_safe(v) for v in obj]
    return obj


def render_json(report: HistoryReport) -> str:
    """Everything: the series, the settings, every shown run with its metrics and verdicts."""
    s = report.settings
    doc = {
        "store": str(report.store),
        "scenario": report.scenario,
        "target": report.target,
        "runs_in_store": report.series_runs,
        "verdict": report.newest.verdict,
        "exit_code": report.exit_code,
        "headline": headline(report),
        "settings": {
            "baseline": s.baseline,
            "last": s.last,
            "min_baseline": s.min_baseline,
            "confidence": s.confidence,
            "metrics": list(s.metrics),
            "margins": {
                m: {"value": s.margin(m).value, "relative": s.margin(m).relative} for m in s.metrics
            },
            "source": s.source,
        },
        "runs": [_judgement(j) for j in report.judgements],
    }
    return json.dumps(_safe(doc), indent=2) + "\n"


@dataclass(frozen=True)
class Written:
    """Where the files went (None: not written)."""

    html: Path | None
    markdown: Path | None
    json: Path | None

    def paths(self) -> list[Path]:
        return [p for p in (self.html, self.markdown, self.json) if p is not None]


def output_paths(out: Path | None) -> Written:
    """``--out``: a folder (``history.html``, ``.md``, ``.json`` in it), the HTML file itself
    (the others beside it, named by its stem), or a ``.md`` or ``.json`` file alone (that one
    only: no charts drawn, for a quick verdict). Default: ``history.html`` here."""
    suffix = out.suffix.lower() if out is not None else ""
    if out is not None and suffix == ".md":
        return Written(None, out, None)
    if out is not None and suffix == ".json":
        return Written(None, None, out)
    if out is None:
        html = Path("history.html")
    elif suffix in (".html", ".htm"):
        html = out
    else:
        html = out / "history.html"
    return Written(html, html.with_suffix(".md"), html.with_suffix(".json"))


def write_history(report: HistoryReport, out: Path | None) -> Written:
    """Write the files ``out`` asks for (made folders as needed; an earlier history there is
    replaced).

    Raises:
        OSError: a path that cannot be written (the CLI names it).
    """
    paths = output_paths(out)
    for path, render in (
        (paths.html, render_html),
        (paths.markdown, render_markdown),
        (paths.json, render_json),
    ):
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(render(report))
    return paths
