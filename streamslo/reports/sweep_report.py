"""The sweep report: one row per load level (the synchronous and saturating runs, then each
rate), the knee, the highest rate that met the SLO, and the charts; as ``sweep.json``,
``sweep.html`` (self-contained) and ``sweep.md``.

:func:`sweep_document` builds the JSON document from the points; :func:`render_sweep_html` and
:func:`render_sweep_markdown` show the same numbers. Nothing here runs load or prints.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from streamslo.reports.charts import Chart
from streamslo.reports.knee import RULES, Knee, LoadPoint, find_knee
from streamslo.reports.render import CSS, figures_html, fmt, html_table, json_safe, md_table

__all__ = [
    "SweepEntry",
    "dump",
    "max_passing_rate",
    "render_sweep_html",
    "render_sweep_markdown",
    "sweep_document",
    "sweep_rows",
]


@dataclass(frozen=True)
class SweepEntry:
    """One run of a sweep."""

    kind: str
    """``synchronous`` (one request at a time), ``throughput`` (saturating) or ``rate``."""
    asked_rate: float | None
    """The asked request rate (``rate`` runs)."""
    directory: str
    """The run's results directory, relative to the sweep's folder."""
    exit_code: int
    point: LoadPoint


def max_passing_rate(entries: Sequence[SweepEntry]) -> float | None:
    """The highest asked rate whose run met every threshold, every lower rate having met them
    too (a lucky pass above a failing rate does not count); None when the lowest rate failed."""
    best = None
    for e in sorted(
        (e for e in entries if e.kind == "rate" and e.asked_rate is not None),
        key=lambda e: e.asked_rate or 0.0,
    ):
        if not e.point.passed:
            break
        best = e.asked_rate
    return best


def sweep_document(entries: Sequence[SweepEntry], info: Mapping[str, object]) -> dict[str, object]:
    """``sweep.json``: ``info`` (target, SLO, mode...), one entry per run, the knee of the
    rate runs, ``max_passing_rate`` (:func:`max_passing_rate`; null when none passed), and the synchronous and saturating rates when measured."""
    rate_points = [e.point for e in entries if e.kind == "rate"]
    knee: Knee = find_knee(rate_points)
    by_kind = {e.kind: e for e in entries if e.kind != "rate"}
    doc: dict[str, Any] = dict(info)
    doc["entries"] = [
        {
            "kind": e.kind,
            "asked_rate": e.asked_rate,
            "dir": e.directory,
            "exit_code": e.exit_code,
            **e.point.as_dict(),
        }
        for e in entries
    ]
    doc["synchronous_rate"] = (
        by_kind["synchronous"].point.achieved_rate if "synchronous" in by_kind else None
    )
    doc["max_throughput_rate"] = (
        by_kind["throughput"].point.achieved_rate if "throughput" in by_kind else None
    )
    doc["knee"] = knee.as_dict()
    doc["max_passing_rate"] = max_passing_rate(entries)
    return doc


def sweep_rows(doc: Mapping[str, Any]) -> list[list[str]]:
    """The sweep's table as text rows (HTML, Markdown, terminal)."""
    rows = [
        [
            "run",
            "asked req/s",
            "achieved req/s",
            "requests",
            "tokens/s",
            "TTFT p50",
            "TTFT p99",
            "ITL p50",
            "ITL p99",
            "truncation",
            "goodput/s",
            "goodput",
            "SLO",
        ]
    ]
    for e in doc["entries"]:
        slo = "—" if e["passed"] is None else ("pass" if e["passed"] else "fail")
        if e["passed"] and not e["valid"]:
            slo = "pass (invalid run)"
        rows.append(
            [
                e["label"],
                fmt(e["asked_rate"], 2),
                fmt(e["achieved_rate"], 2),
                fmt(e["requests"], 0),
                fmt(e["tokens_per_s"]),
                fmt(e["ttft_ms"]["p50"]),
                fmt(e["ttft_ms"]["p99"]),
                fmt(e["itl_ms"]["p50"]),
                fmt(e["itl_ms"]["p99"]),
                fmt(e["truncation_rate"], 2, pct=True),
                fmt(e["goodput_per_s"], 2),
                fmt(e["goodput_fraction"], 1, pct=True),
                slo,
            ]
        )
    return rows


def _headline(doc: Mapping[str, Any]) -> str:
    best = doc.get("max_passing_rate")
    knee = doc.get("knee") or {}
    head = (
        f"Highest rate that met the SLO: {best:g} req/s."
        if best is not None
        else "No rate met the SLO."
    )
    rule = RULES.get(str(knee.get("rule") or ""))
    if knee.get("broke_at"):
        after = f"after {knee['label']}" if knee.get("label") else "at the lowest rate"
        by = f" by the rule '{rule}'" if rule else ""
        head += f" Knee {after}{by}: at {knee['broke_at']}, {knee['reason']}."
    elif knee.get("label"):
        head += f" No knee up to {knee['label']}: no rate broke a knee rule."
    return head


def render_sweep_html(doc: Mapping[str, object], charts: Sequence[Chart]) -> str:
    """The sweep as one self-contained HTML page."""
    ok = doc.get("max_passing_rate") is not None
    title = f"streamslo sweep: {doc.get('target', '')}"
    slo = html.escape(str(doc.get("slo", "")))
    body = "\n".join(
        [
            f"<h1>{html.escape(title)}</h1>",
            f'<div class="sub">generated {html.escape(str(doc.get("generated_at", "")))} by streamslo '
            f"{html.escape(str(doc.get('tool_version', '')))} &middot; SLO: {slo} &middot; "
            f"{html.escape(str(doc.get('mode', '')))}</div>",
            f'<div class="banner {"okb" if ok else "failb"}">{html.escape(_headline(doc))}</div>',
            "<h2>Runs</h2>",
            html_table(sweep_rows(doc)),
            "<h2>Charts</h2>",
            figures_html(charts),
            '<p class="note">Latencies in ms; percentiles: numpy <code>linear</code> over every sample of '
            "each run. A rate run is open loop (arrivals at the asked rate, Poisson unless "
            "<code>--burstiness</code>); the synchronous run sends one request at a time, the saturating "
            "run keeps <code>--users</code> streams open. Each run is a full results directory.</p>",
        ]
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{CSS}</style></head>"
        f"<body><main>\n{body}\n</main></body></html>\n"
    )


def render_sweep_markdown(doc: Mapping[str, object]) -> str:
    """The sweep as Markdown (a CI comment)."""
    return "\n".join(
        [
            f"## streamslo sweep: {doc.get('target', '')}",
            "",
            f"**{_headline(doc)}**",
            "",
            md_table(sweep_rows(doc)),
            "",
            f"_SLO: {doc.get('slo', '')}; latencies in ms._",
            "",
        ]
    )


def dump(doc: Mapping[str, object]) -> str:
    """``sweep.json``'s text."""
    return json.dumps(json_safe(dict(doc)), indent=2, allow_nan=False, default=str) + "\n"
