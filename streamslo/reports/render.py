"""Writing the report model out: one self-contained HTML page, Markdown, JSON, a text table.

The HTML page has inline CSS and charts as ``data:image/png;base64`` images: it loads nothing
from the network and opens offline. Order: validity banners (an invalid run is said first),
comparability warnings, the SLO verdicts, then rates, throughput, latency with confidence
intervals, outcomes, charts, server evidence, run details and method notes.

Nothing here computes or prints: these functions return strings.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Iterable, Sequence
from typing import Any

from streamslo.reports.charts import Chart
from streamslo.reports.model import Difference, Report, RunInfo, ServerSummary

__all__ = [
    "CSS",
    "figures_html",
    "fmt",
    "html_table",
    "json_safe",
    "md_table",
    "render_html",
    "render_json",
    "render_markdown",
    "server_series_rows",
    "summary_table",
    "text_table",
]

CSS = """
body{font-family:-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;margin:0;
background:#f4f5f7;color:#1d2330}
main{max-width:1080px;margin:0 auto;padding:24px 28px 48px;background:#fff;min-height:100vh}
h1{font-size:26px;margin:0 0 4px}h2{font-size:19px;margin:30px 0 8px;border-bottom:2px solid
#e3e6eb;padding-bottom:4px}.sub{color:#5a6270;font-size:13px;margin-bottom:14px}
table{border-collapse:collapse;width:100%;font-size:13px;margin:6px 0 10px}
th,td{border:1px solid #dde1e7;padding:5px 8px;text-align:right}
th{background:#eef1f5;font-weight:600}td:first-child,th:first-child{text-align:left}
tr:nth-child(even) td{background:#fafbfc}
.banner{padding:10px 14px;border-radius:6px;margin:8px 0;font-size:14px;font-weight:500}
.invalid{background:#fde2e1;border:2px solid #c0392b;color:#7b1d14}
.warn{background:#fff4d6;border:2px solid #e0a800;color:#6b4f00}
.okb{background:#e3f4e6;border:2px solid #2e7d32;color:#1b4d1f}
.failb{background:#fde2e1;border:2px solid #c0392b;color:#7b1d14}
.v{font-weight:700;border-radius:4px;padding:1px 7px;font-size:12px}
.v-pass,.v-fixed{background:#d7f0db;color:#1b5e20}.v-fail,.v-regressed{background:#fbd3d0;
color:#8e1b10}.real{color:#1b5e20;font-weight:600}.noise{color:#7a7f88}
.charts{display:grid;grid-template-columns:repeat(auto-fit,minmax(470px,1fr));gap:10px 18px}
figure{margin:6px 0 14px}figure.wide{grid-column:1/-1}figure img{width:100%;border:1px solid #e3e6eb}
figcaption{font-size:12px;color:#5a6270}.note{font-size:12px;color:#5a6270}
code{background:#eef1f5;padding:1px 4px;border-radius:3px}
"""


def fmt(v: Any, digits: int = 1, signed: bool = False, pct: bool = False) -> str:
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


def _obs(metric: str, v: float | None, signed: bool = False) -> str:
    if metric.endswith("_rate") or "_rate{" in metric:
        return fmt(v, 3, signed, pct=True)
    return fmt(v, 1, signed)


def _ci(d: Difference | None, pct: bool = False) -> str:
    if d is None or d.ci_low is None:
        return "—"
    digits = 3 if pct else 1
    return f"[{fmt(d.ci_low, digits, True, pct)}, {fmt(d.ci_high, digits, True, pct)}]"


def _real(d: Difference | None) -> str:
    if d is None or d.significant is None:
        return "—"
    return "real" if d.significant else "within noise"


def _rows(report: Report) -> dict[str, list[list[str]]]:
    """Every table of the report as rows of text (shared by HTML, Markdown and the terminal)."""
    two = report.before is not None
    t: dict[str, list[list[str]]] = {}
    if two:
        t["verdicts"] = [["SLO", "threshold", "before", "after", "delta", "verdict"]] + [
            [v.metric, v.expression, _obs(v.metric, v.before), _obs(v.metric, v.after),
             _obs(v.metric, v.delta, True), v.verdict]
            for v in report.verdicts
        ]
        t["rates"] = [["rate", "before", "after", "delta", "95% CI of delta", "change"]] + [
            [r.metric, _rate_cell(r.before, r.before_counts), _rate_cell(r.after, r.after_counts),
             fmt(r.difference.delta if r.difference else None, 3, True, True),
             _ci(r.difference, True), _real(r.difference)]
            for r in report.rates
        ]
        t["throughput"] = [["", "before", "after", "delta"]] + [
            [s.metric, fmt(s.before), fmt(s.after), fmt(s.delta, 1, True)]
            for s in report.throughput
        ]
        lat = [["metric", "stat", "before (ms)", "after (ms)", "delta (ms)", "95% CI of delta",
                "change"]]
        for lc in report.latency:
            for d in lc.differences:
                lat.append([lc.metric, d.stat, fmt(d.before), fmt(d.after), fmt(d.delta, 1, True),
                            _ci(d), _real(d)])
            lat.append([lc.metric, "max", fmt(lc.before.max if lc.before else None),
                        fmt(lc.after.max), "", "", ""])
            lat.append([lc.metric, "samples", fmt(lc.before.count if lc.before else None, 0),
                        fmt(lc.after.count, 0), "", "", ""])
        t["latency"] = lat
        t["outcomes"] = [["outcome", "protocol", "before", "after"]] + [
            [o.outcome, o.protocol, fmt(o.before, 0), fmt(o.after, 0)]
            for o in report.outcomes if o.protocol != "all" or o.before or o.after
            or o.outcome == "ok"
        ]
    else:
        t["verdicts"] = [["SLO", "threshold", "observed", "verdict"]] + [
            [v.metric, v.expression, _obs(v.metric, v.after), v.verdict] for v in report.verdicts
        ]
        t["rates"] = [["rate", "value"]] + [
            [r.metric, _rate_cell(r.after, r.after_counts)] for r in report.rates
        ]
        t["throughput"] = [["", "value"]] + [[s.metric, fmt(s.after)] for s in report.throughput]
        lat = [["metric", "p50", "p90", "p95", "p99", "max", "mean", "samples"]]
        for lc in report.latency:
            a = lc.after
            lat.append([lc.metric, fmt(a.p50), fmt(a.p90), fmt(a.p95), fmt(a.p99), fmt(a.max),
                        fmt(a.mean), fmt(a.count, 0)])
        t["latency"] = lat
        t["outcomes"] = [["outcome", "protocol", "requests"]] + [
            [o.outcome, o.protocol, fmt(o.after, 0)]
            for o in report.outcomes if o.protocol != "all" or o.after or o.outcome == "ok"
        ]
    t["runs"] = [["", *[f"{r.label} ({r.name})" if r.name != r.label else r.label
                        for r in report.runs]]] + [
        [key, *[_run_field(r, key) for r in report.runs]]
        for key in ("valid", "path", "target", "scenario", "users", "protocol", "start",
                    "duration_s", "requests", "streams_began", "tokens", "generator")
    ]
    return t


def _rate_cell(v: float | None, counts: tuple[int, int] | None) -> str:
    if counts is None:
        return "—"
    return f"{fmt(v, 3, pct=True)} ({counts[0]:,}/{counts[1]:,})"


def _run_field(r: RunInfo, key: str) -> str:
    if key == "valid":
        return "yes" if r.valid else f"NO: {r.invalid_reason or 'no reason recorded'}"
    if key == "generator":
        g = r.generator
        if not g:
            return "—"
        return ", ".join(f"{k} {fmt(v, 2) if isinstance(v, float) else v}" for k, v in g.items())
    if key == "duration_s":
        return fmt(r.duration_s, 1) + " s" if r.duration_s is not None else "—"
    v = getattr(r, key)
    return fmt(v, 0) if isinstance(v, int) and not isinstance(v, bool) else fmt(v)


def _headline(report: Report) -> str:
    text = _verdict_line(report)
    if not report.after.valid:
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


# ---------------------------------------------------------------- HTML


def html_table(rows: Sequence[Sequence[str]], verdict_col: int | None = None,
           change_col: int | None = None) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in rows[0])
    body = []
    for row in rows[1:]:
        cells = []
        for i, c in enumerate(row):
            text = html.escape(c)
            if i == verdict_col:
                text = f'<span class="v v-{html.escape(c)}">{text}</span>'
            elif i == change_col and c in ("real", "within noise"):
                text = f'<span class="{"real" if c == "real" else "noise"}">{text}</span>'
            cells.append(f"<td>{text}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _banners(report: Report) -> str:
    out = [f'<div class="banner invalid">&#9888; {html.escape(m)}</div>' for m in report.invalid]
    out += [f'<div class="banner warn">&#9888; {html.escape(m)}</div>' for m in report.warnings]
    cls = "okb" if report.passed else "failb"
    out.append(f'<div class="banner {cls}">{html.escape(_headline(report))}</div>')
    return "\n".join(out)


def server_series_rows(s: ServerSummary) -> list[list[str]]:
    """The server's own series over the run, as table rows: the ones that matter for
    streaming first (named), then the other series that moved. Counters show their increase
    over the run (never the lifetime total) and per second; gauges their range."""
    rows = [["server series", "type", "over the run", "first", "last", "min", "max"]]
    for x in s.samples:
        name = f"{x.title}: {x.sample}" if x.title else x.sample
        if x.kind == "increase":
            rate = f" ({fmt(x.per_s, 3)} /s)" if x.per_s is not None else ""
            rows.append([name, "counter", f"+{fmt(x.value, 2)}{rate}", fmt(x.first, 2),
                         fmt(x.last, 2), "", ""])
        else:
            rows.append([name, "gauge", f"peak {fmt(x.value, 2)}", fmt(x.first, 2),
                         fmt(x.last, 2), fmt(x.low, 2), fmt(x.high, 2)])
    return rows


def _server_html(report: Report) -> str:
    parts: list[str] = []
    for s in report.server:
        if not s.present:
            parts.append(f'<p class="note">{html.escape(s.label)}: the target exposed no '
                         "server-side evidence (not the bundled server, or not scraped).</p>")
            continue
        rows = [["evidence", "value"]]
        rows += [[f"loop stalls: {k}", fmt(v, 0)] for k, v in sorted(s.stall_causes.items())]
        rows += [[f"worker restarts: {k}", fmt(v, 0)] for k, v in sorted(s.worker_restarts.items())]
        if s.peak_write_backlog_bytes is not None:
            rows.append(["peak write backlog (bytes)", fmt(s.peak_write_backlog_bytes, 0)])
        rows += [[f"stall of {fmt(ms)} ms", f"{cause} at {frame}" if frame else cause]
                 for ms, cause, frame in s.longest_stalls]
        rows += [[k, v] for k, v in s.facts]
        parts.append(f"<h3>{html.escape(s.label)}</h3>" + (html_table(rows) if len(rows) > 1 else ""))
        if s.samples:
            parts.append(html_table(server_series_rows(s)))
        if s.more_moved:
            parts.append(f'<p class="note">{s.more_moved} more series moved during the run; '
                         "every scrape is in the run's server/metrics.jsonl.</p>")
        parts += [f'<p class="note">{html.escape(n)}</p>' for n in s.notes]
    return "\n".join(parts)


def figures_html(charts: Iterable[Chart]) -> str:
    return '<div class="charts">' + "\n".join(
        f'<figure class="{"wide" if c.wide else "half"}"><img alt="{html.escape(c.title)}" src="data:image/png;base64,{c.png_base64}">'
        f"<figcaption>{html.escape(c.caption)}</figcaption></figure>"
        for c in charts
    ) + "</div>"


def render_html(report: Report, charts: Sequence[Chart], extra_sections: Sequence[tuple[str, str]] = ()) -> str:
    """The whole report as one self-contained HTML page; ``extra_sections`` (title, HTML)
    come after the charts (the long-run section, :mod:`streamslo.reports.soak`)."""
    t = _rows(report)
    two = report.before is not None
    title = ("streamslo report: " + " vs ".join(
        f"{r.label} ({r.name})" if r.name != r.label else r.label for r in report.runs))
    b = report.bootstrap
    method = (
        "Percentiles: numpy <code>linear</code> over every sample (ITL pools every gap of every "
        "stream that began, including a failed stream's last open gap). "
        f"Confidence intervals: {int(b.confidence * 100)} % percentile bootstrap of "
        f"after&nbsp;&minus;&nbsp;before, resampling whole {b.unit}s ({b.resamples} resamples "
        f"requested, fewer for very large runs; seed {b.seed}). A change is <em>real</em> when "
        "the interval excludes 0."
    )
    sections = [
        f"<h1>{html.escape(title)}</h1>",
        f'<div class="sub">generated {html.escape(report.generated_at)} by streamslo '
        f"{html.escape(report.tool_version)} &middot; SLO: {html.escape(report.slo_source)}</div>",
        _banners(report),
        "<h2>SLO verdicts</h2>", html_table(t["verdicts"], verdict_col=len(t["verdicts"][0]) - 1),
        "<h2>Runs</h2>", html_table(t["runs"]),
        "<h2>Failure rates</h2>", html_table(t["rates"], change_col=5 if two else None),
        "<h2>Throughput</h2>", html_table(t["throughput"]),
        "<h2>Latency (ms)</h2>", html_table(t["latency"], change_col=6 if two else None),
        "<h2>Outcomes</h2>", html_table(t["outcomes"]),
        "<h2>Charts</h2>", figures_html(charts),
        *[part for title, body in extra_sections for part in (f"<h2>{html.escape(title)}</h2>", body)],
        "<h2>Server-side evidence</h2>", _server_html(report),
        f'<p class="note">{method}</p>',
    ]
    body = "\n".join(sections)
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{html.escape(title)}</title><style>{CSS}</style></head>"
        f"<body><main>\n{body}\n</main></body></html>\n"
    )


# ---------------------------------------------------------------- Markdown / text / JSON


def md_table(rows: Sequence[Sequence[str]]) -> str:
    def esc(c: str) -> str:
        return c.replace("|", "\\|")

    lines = ["| " + " | ".join(esc(c) for c in rows[0]) + " |",
             "|" + "|".join(" --- " for _ in rows[0]) + "|"]
    lines += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows[1:]]
    return "\n".join(lines)


def render_markdown(report: Report, extra: str = "") -> str:
    """A Markdown summary for a CI comment: banners, verdicts, rates, headline latency, then
    ``extra`` (the long-run section)."""
    t = _rows(report)
    out = ["## streamslo report", ""]
    out += [f"> :warning: **{m}**" for m in report.invalid]
    out += [f"> :warning: {m}" for m in report.warnings]
    if report.invalid or report.warnings:
        out.append("")
    out += [f"**{_headline(report)}**", "", "### SLO verdicts", "", md_table(t["verdicts"]), "",
            "### Failure rates", "", md_table(t["rates"]), "",
            "### Latency (ms)", "", md_table(t["latency"]), "",
            "### Throughput", "", md_table(t["throughput"]), "",
            "### Outcomes", "", md_table(t["outcomes"]), "",
            *([extra] if extra else []),
            f"_SLO: {report.slo_source}; CIs: {int(report.bootstrap.confidence * 100)} % "
            f"bootstrap over whole streams, seed {report.bootstrap.seed}._", ""]
    return "\n".join(out)


def text_table(rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for n, r in enumerate(rows):
        lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                               for i, (c, w) in enumerate(zip(r, widths, strict=True))).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def summary_table(report: Report) -> str:
    """Plain-text summary for the terminal: banners, the verdicts and headline latency."""
    out = [f"!! {m}" for m in report.invalid] + [f"!  {m}" for m in report.warnings]
    out += [text_table(_rows(report)["verdicts"]), ""]
    if report.before is not None:
        rows = [["latency (ms)", "before", "after", "delta", "95% CI", "change"]]
        for lc in report.latency:
            for d in lc.differences:
                if d.stat in ("p50", "p99"):
                    rows.append([f"{lc.metric} {d.stat}", fmt(d.before), fmt(d.after),
                                 fmt(d.delta, 1, True), _ci(d), _real(d)])
    else:
        rows = [["latency (ms)", "p50", "p99", "max"]]
        rows += [[lc.metric, fmt(lc.after.p50), fmt(lc.after.p99), fmt(lc.after.max)]
                 for lc in report.latency]
    out += [text_table(rows), "", _headline(report)]
    return "\n".join(out)


def json_safe(obj: Any) -> Any:
    """``obj`` with NaN and infinities as None, tuples as lists, keys as text (strict JSON)."""
    if isinstance(obj, float):
        return None if math.isnan(obj) or math.isinf(obj) else obj
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


def render_json(report: Report, extra: dict[str, Any] | None = None) -> str:
    """``report.json``: the report model as strict JSON (NaN becomes null), plus ``extra``
    top-level keys (``soak``)."""
    return json.dumps(json_safe({**report.to_dict(), **(extra or {})}), indent=2, allow_nan=False, default=str) + "\n"
