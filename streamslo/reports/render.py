"""Writing the report model out: one self-contained HTML page, Markdown, JSON, a text table.

The HTML page has inline CSS and charts as ``data:image/png;base64`` images: it loads nothing
from the network and opens offline. Order: validity banners (an invalid run is said first),
comparability warnings, the headline, the SLO verdicts, the failures (top error texts), rates
and throughput, latency with confidence intervals, outcomes, charts, the extra sections, server
evidence, run details, the glossary and method notes. A section without data is left out. The
tables' rows come from :mod:`streamslo.reports.tables`.

Nothing here computes or prints: these functions return strings.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from streamslo.reports.charts import Chart
from streamslo.reports.glossary import protocol_text
from streamslo.reports.model import Report, RunInfo, ServerSummary
from streamslo.reports.tables import ci_text, fmt, headline, judged, report_rows, run_title
from streamslo.results import markup

if TYPE_CHECKING:
    from streamslo.reports.section import Section

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
th,td{border:1px solid #dde1e7;padding:4px 8px;text-align:right}
table.gl{font-size:12px}table.gl td,table.gl th{padding:2px 8px}
th{background:#eef1f5;font-weight:600}td:first-child,th:first-child,td.t,th.t{text-align:left}
tr:nth-child(even) td{background:#fafbfc}
.banner{padding:10px 14px;border-radius:6px;margin:8px 0;font-size:14px;font-weight:500}
.invalid{background:#fde2e1;border:2px solid #c0392b;color:#7b1d14}
.warn{background:#fff4d6;border:2px solid #e0a800;color:#6b4f00}
.truth{background:#eef4fb;border:1px solid #9bb8d8;color:#1d3a5c}
.okb{background:#e3f4e6;border:2px solid #2e7d32;color:#1b4d1f}
.failb{background:#fde2e1;border:2px solid #c0392b;color:#7b1d14}
.v{font-weight:700;border-radius:4px;padding:1px 7px;font-size:12px}
.v-pass,.v-fixed{background:#d7f0db;color:#1b5e20}.v-fail,.v-regressed{background:#fbd3d0;
color:#8e1b10}.better{color:#1b5e20;font-weight:600}.worse{color:#b71c1c;font-weight:600}
.noise{color:#7a7f88}td.k{color:#5a6270;white-space:nowrap;width:1%;text-align:left}
.kv td{background:#fff!important}.cols{display:grid;grid-template-columns:1fr 1fr;gap:0 18px}
.cols h2{margin-top:18px}
.charts{display:grid;grid-template-columns:repeat(2,minmax(0,1fr));gap:10px 18px}
figure{margin:6px 0 14px}figure.wide{grid-column:1/-1}figure img{width:100%;border:1px solid #e3e6eb;
max-height:360px;object-fit:contain}details{margin:4px 0 10px}summary{cursor:pointer;color:#3a4a63;font-size:13px}
figcaption{font-size:12px;color:#5a6270}.note{font-size:12px;color:#5a6270}
code{background:#eef1f5;padding:1px 4px;border-radius:3px}
"""


# ---------------------------------------------------------------- HTML


_CHANGE_CLASS = {
    "better": "better",
    "worse": "worse",
    "within noise": "noise",
    "no change": "noise",
    "real": "noise",
}


def _banners(report: Report) -> str:
    out = [f'<div class="banner invalid">&#9888; {html.escape(m)}</div>' for m in report.invalid]
    out += [
        f'<div class="banner {"truth" if t.sees_all else "warn"}">{html.escape(t.text)}</div>'
        for t in report.truth
    ]
    out += [f'<div class="banner warn">&#9888; {html.escape(m)}</div>' for m in report.warnings]
    cls = "okb" if report.passed else "failb"
    out.append(f'<div class="banner {cls}">{html.escape(headline(report))}</div>')
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
            rows.append(
                [
                    name,
                    "counter",
                    f"+{fmt(x.value, 2)}{rate}",
                    fmt(x.first, 2),
                    fmt(x.last, 2),
                    "",
                    "",
                ]
            )
        else:
            rows.append(
                [
                    name,
                    "gauge",
                    f"peak {fmt(x.value, 2)}",
                    fmt(x.first, 2),
                    fmt(x.last, 2),
                    fmt(x.low, 2),
                    fmt(x.high, 2),
                ]
            )
    return rows


def _server_html(report: Report) -> str:
    parts: list[str] = []
    for s in report.server:
        if not s.present:
            parts.append(
                f'<p class="note">{html.escape(s.label)}: the target exposed no '
                "server-side evidence (not the bundled server, or not scraped).</p>"
            )
            continue
        rows = [["evidence", "value"]]
        rows += [[f"loop stalls: {k}", fmt(v, 0)] for k, v in sorted(s.stall_causes.items())]
        rows += [[f"worker restarts: {k}", fmt(v, 0)] for k, v in sorted(s.worker_restarts.items())]
        if s.peak_write_backlog_bytes is not None:
            rows.append(["peak write backlog (bytes)", fmt(s.peak_write_backlog_bytes, 0)])
        rows += [
            [f"stall of {fmt(ms)} ms", f"{cause} at {frame}" if frame else cause]
            for ms, cause, frame in s.longest_stalls
        ]
        rows += [[k, v] for k, v in s.facts]
        parts.append(
            # key/value pairs two a row: half the height of a one-column table
            f"<h3>{html.escape(s.label)}</h3>" + (_kv_table(rows[1:]) if len(rows) > 1 else "")
        )
        if s.samples:
            series = server_series_rows(s)
            # collapsed: the chart above shows the series that matter; the table is the detail
            parts.append(
                f"<details><summary>the target's {len(series) - 1} series that moved, "
                "as numbers</summary>" + html_table(series) + "</details>"
            )
        if s.more_moved:
            parts.append(
                f'<p class="note">{s.more_moved} more series moved during the run; '
                "every scrape is in the run's server/metrics.jsonl.</p>"
            )
        parts += [f'<p class="note">{html.escape(n)}</p>' for n in s.notes]
    return "\n".join(parts)


def figures_html(charts: Iterable[Chart]) -> str:
    return (
        '<div class="charts">'
        + "\n".join(
            f'<figure class="{"wide" if c.wide else "half"}"><img alt="{html.escape(c.title)}" src="data:image/png;base64,{c.png_base64}">'
            f"<figcaption>{html.escape(c.caption)}</figcaption></figure>"
            for c in charts
        )
        + "</div>"
    )


def _title(report: Report) -> str:
    names = [r.name for r in report.runs]
    if len(names) == 2:
        return f"streamslo report: {names[0]} vs {names[1]}"
    return f"streamslo report: {names[0]}"


def _run_line(r: RunInfo) -> str:
    bits = [
        str(r.target) if r.target else "",
        f"{fmt(r.duration_s, 0)} s" if r.duration_s is not None else "",
        f"{r.users} users" if r.users is not None else "",
        protocol_text(r.protocol) if r.protocol else "",
        f"{r.requests:,} requests",
    ]
    return " · ".join(b for b in bits if b and b != "—")


def _subtitle(report: Report) -> str:
    lines = (
        [f"{run_title(r)}: {_run_line(r)}" for r in report.runs]
        if len(report.runs) > 1
        else [_run_line(report.after)]
    )
    return "<br>".join(
        [
            *(html.escape(x) for x in lines),
            f"generated {html.escape(report.generated_at)} by streamslo "
            f"{html.escape(report.tool_version)} · SLO: "
            f"{html.escape(report.slo_source)}",
        ]
    )


def _failures_html(report: Report, rows: list[list[str]]) -> str:
    src = sorted({g.source for g in report.failures})
    return (
        html_table(rows)
        + f'<p class="note">{html.escape(FAILURES_NOTE)} (counted from '
        + (f"{html.escape(' and '.join(src))}).</p>")
    )


#: How the failures table groups, said under it.
FAILURES_NOTE = (
    "Failed streams grouped by outcome, cause and error text with its numbers masked; each "
    "group shown as its most frequent exact text with the group's count"
)


def _kv_table(rows: Sequence[Sequence[str]]) -> str:
    """``key, value`` rows laid out two pairs a row (half the height), no head."""
    half = (len(rows) + 1) // 2
    left, right = list(rows[:half]), list(rows[half:])
    body = []
    for i, row in enumerate(left):
        other = right[i] if i < len(right) else ["", ""]
        body.append(
            "<tr>"
            + "".join(
                f'<td class="k">{html.escape(k)}</td><td class="t">{html.escape(v)}</td>'
                for k, v in (row[:2], other[:2])
            )
            + "</tr>"
        )
    return f'<table class="kv"><tbody>{"".join(body)}</tbody></table>'


def _side_by_side(*parts: tuple[str, str]) -> list[str]:
    cols = "".join(f"<div><h2>{html.escape(t)}</h2>{b}</div>" for t, b in parts)
    return [f'<div class="cols">{cols}</div>']


def _section(title: str, body: str) -> list[str]:
    return [f"<h2>{html.escape(title)}</h2>", body] if body else []


def _sessions_html(report: Report) -> str:
    rows = report_rows(report)["sessions"]
    if len(rows) < 2:
        return ""
    return html_table(rows) + (
        '<p class="note">A session is whole when every one of its steps ended ok; the end-to-end '
        "time runs from its first step's start to its last step's end. The swim lane and the "
        "steps by depth are in the Agentic sessions section below.</p>"
    )


def render_html(
    report: Report, charts: Sequence[Chart] = (), sections: Sequence[Section] = ()
) -> str:
    """The whole report as one self-contained HTML page: the report's own ``charts`` (after
    the charts of the ``sections`` that lead), then the ``sections`` that have something to
    show (:mod:`streamslo.reports.section`), each under its title.

    A section without data is left out (no failures: no failures section; no server
    evidence: no server section).
    """
    charts = [
        *(c for sec in sections if sec.charts_first for c in sec.charts()),
        *charts,
        *(c for sec in sections if not sec.charts_first for c in sec.charts()),
    ]
    extra_sections = [(sec.title, body) for sec in sections if (body := sec.html())]
    t = report_rows(report)
    two = report.before is not None
    title = _title(report)
    b = report.bootstrap
    method = (
        "Percentiles: numpy <code>linear</code> over every sample (ITL pools every gap of every "
        "stream that began, including a failed stream's last open gap). "
        + (
            f"Confidence intervals: {int(b.confidence * 100)} % percentile bootstrap of "
            f"after&nbsp;&minus;&nbsp;before, resampling whole {b.unit}s ({b.resamples} resamples "
            f"requested, fewer for very large runs; seed {b.seed}). A change is judged "
            "<em>better</em> or <em>worse</em> (by the metric's direction: lower latency and "
            "fewer failures are better) when the interval excludes 0, else <em>within noise</em>."
            if two
            else ""
        )
    )
    verdicts = (
        html_table(t["verdicts"], verdict_col=len(t["verdicts"][0]) - 1)
        if report.verdicts
        else '<p class="note">No SLO thresholds were checked.</p>'
    )
    server = _server_html(report) if any(s.present for s in report.server) else ""
    parts = [
        f"<h1>{html.escape(title)}</h1>",
        f'<div class="sub">{_subtitle(report)}</div>',
        _banners(report),
        "<h2>SLO verdicts</h2>",
        verdicts,
        *_section("Agentic sessions: the sessions judged whole", _sessions_html(report)),
        *_section(
            "Failures: the most frequent error texts",
            _failures_html(report, t["failures"]) if report.failures else "",
        ),
        *(
            _side_by_side(
                ("Failure rates", html_table(t["rates"])),
                ("Throughput", html_table(t["throughput"])),
            )
            if not two
            else [
                "<h2>Failure rates</h2>",
                html_table(t["rates"], change_col=5),
                "<h2>Throughput</h2>",
                html_table(t["throughput"]),
            ]
        ),
        *_section(
            "Latency (ms)",
            html_table(t["latency"], change_col=6 if two else None)
            if len(t["latency"]) > 1
            else "",
        ),
        *_section("Outcomes", html_table(t["outcomes"]) if len(t["outcomes"]) > 1 else ""),
        *_section("Charts", figures_html(charts) if charts else ""),
        *[
            part
            for title, body in extra_sections
            for part in (f"<h2>{html.escape(title)}</h2>", body)
        ],
        *_section("Server-side evidence", server),
        "<h2>Runs</h2>" if two else "<h2>Run</h2>",
        html_table(t["runs"]) if two else _kv_table(t["runs"][1:]),
        *_section(
            "Glossary",
            # collapsed: a reference, not a finding (the page stays about two screens long)
            "<details><summary>every metric shown: its id, name, unit and meaning</summary>"
            + markup.html_table(t["glossary"], table_class="gl")
            + "</details>"
            if report.glossary
            else "",
        ),
        f'<p class="note">{method}</p>',
    ]
    body = "\n".join(parts)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{CSS}</style></head>"
        f"<body><main>\n{body}\n</main></body></html>\n"
    )


# ---------------------------------------------------------------- Markdown / text / JSON


def html_table(
    rows: Sequence[Sequence[str]], verdict_col: int | None = None, change_col: int | None = None
) -> str:
    """An HTML table of the report; ``verdict_col`` cells become badges, ``change_col`` cells are
    coloured (``better`` green, ``worse`` red, ``within noise`` grey)."""
    return markup.html_table(rows, verdict_col, change_col, _CHANGE_CLASS)


md_table = markup.markdown_table


def render_markdown(report: Report, sections: Sequence[Section] = ()) -> str:
    """A Markdown summary for a CI comment: banners, verdicts, the sessions, rates, headline
    latency, then the ``sections`` that have something to show."""
    t = report_rows(report)
    extra = "\n".join(part for sec in sections if (part := sec.markdown()))
    out = ["## streamslo report", ""]
    out += [f"> :warning: **{m}**" for m in report.invalid]
    out += [f"> {'' if t.sees_all else ':warning: '}{t.text}" for t in report.truth]
    out += [f"> :warning: {m}" for m in report.warnings]
    if report.invalid or report.warnings or report.truth:
        out.append("")
    out += [
        f"**{headline(report)}**",
        "",
        "### SLO verdicts",
        "",
        md_table(t["verdicts"]),
        "",
        *(
            ["### Agentic sessions", "", md_table(t["sessions"]), ""]
            if report.session_summary
            else []
        ),
        "### Failure rates",
        "",
        md_table(t["rates"]),
        "",
        "### Latency (ms)",
        "",
        md_table(t["latency"]),
        "",
        "### Throughput",
        "",
        md_table(t["throughput"]),
        "",
        "### Outcomes",
        "",
        md_table(t["outcomes"]),
        "",
        *(
            ["### Failures: the most frequent error texts", "", md_table(t["failures"]), ""]
            if report.failures
            else []
        ),
        *([extra] if extra else []),
        *(["### Glossary", "", md_table(t["glossary"]), ""] if report.glossary else []),
        f"_SLO: {report.slo_source}; CIs: {int(report.bootstrap.confidence * 100)} % "
        f"bootstrap over whole streams, seed {report.bootstrap.seed}._",
        "",
    ]
    return "\n".join(out)


def text_table(rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for n, r in enumerate(rows):
        lines.append(
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w)
                for i, (c, w) in enumerate(zip(r, widths, strict=True))
            ).rstrip()
        )
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def summary_table(report: Report) -> str:
    """Plain-text summary for the terminal: banners, the verdicts, the sessions judged whole
    (agentic runs) and headline latency."""
    out = [f"!! {m}" for m in report.invalid] + [f"!  {m}" for m in report.warnings]
    out += [text_table(report_rows(report)["verdicts"]), ""]
    if report.session_summary:
        out += [text_table(report_rows(report)["sessions"]), ""]
    if report.before is not None:
        rows = [["latency (ms)", "before", "after", "change", "95 % CI", "judged"]]
        for lc in report.latency:
            for d in lc.differences:
                if d.stat in ("p50", "p99"):
                    rows.append(
                        [
                            f"{lc.metric} {d.stat}",
                            fmt(d.before),
                            fmt(d.after),
                            fmt(d.delta, 1, True),
                            ci_text(d),
                            judged(d),
                        ]
                    )
    else:
        rows = [["latency (ms)", "p50", "p99", "max"]]
        rows += [
            [lc.metric, fmt(lc.after.p50), fmt(lc.after.p99), fmt(lc.after.max)]
            for lc in report.latency
        ]
    out += [text_table(rows), "", headline(report)]
    return "\n".join(out)


def json_safe(obj: object) -> object:
    """``obj`` with NaN and infinities as None, tuples as lists, keys as text (strict JSON)."""
    if isinstance(obj, float):
        return None if math.isnan(obj) or math.isinf(obj) else obj
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


def render_json(report: Report, sections: Sequence[Section] = ()) -> str:
    """``report.json``: the report model as strict JSON (NaN becomes null), plus each
    section's value under its key (``soak``, ``levels``...)."""
    extra = {sec.key: sec.to_json() for sec in sections}
    return (
        json.dumps(json_safe({**report.to_dict(), **extra}), indent=2, allow_nan=False, default=str)
        + "\n"
    )
