"""The report's replay section: arrivals asked vs sent over time (``--trace``), schedule lag,
client hang-ups and the prefix cache, for the runs that have them.

Asked: the trace's requests due in each time bin (its offsets at the run's speed), read again
from the trace file when it is still where ``run.json`` says and has the same sha256; otherwise
the streams that were scheduled (dropped arrivals then show only in the total). Sent: streams
that started in the bin. Self-contained: tables only (``(label, rows)``, first row the header),
rendered as HTML and Markdown here.
"""

from __future__ import annotations

import hashlib
import html
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from streamslo.figures.replay import replay_figures
from streamslo.reports.load import LoadedRun
from streamslo.results.markup import html_table, markdown_table
from streamslo.workload.trace import iter_trace

if TYPE_CHECKING:
    from streamslo.reports.charts import Chart
    from streamslo.reports.section import SectionInput

__all__ = [
    "ReplaySection",
    "arrival_table",
    "replay_html",
    "replay_json",
    "replay_markdown",
    "replay_tables",
]

Table = tuple[str, list[list[str]]]

#: At most this many time bins in the arrivals table.
_BINS = 12


def _num(v: Any, fmt: str) -> str:
    return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, fmt)


def _trace_offsets(trace: dict[str, Any]) -> np.ndarray | None:
    """The trace's due times in seconds at the run's speed, if the same file is still there."""
    path = Path(str(trace.get("path") or ""))
    if not path.is_file():
        return None
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    if digest.hexdigest() != trace.get("sha256"):
        return None
    speed = float(trace.get("speed") or 1.0)
    return np.fromiter(
        (r.offset_s / speed for r in iter_trace(path, str(trace.get("format") or "auto"))),
        dtype=float,
    )


def _bin_width(span: float) -> float:
    raw = max(1.0, span / _BINS)
    for nice in (1, 2, 5, 10, 15, 20, 30, 60, 120, 300, 600, 1800, 3600):
        if raw <= nice:
            return float(nice)
    return float(math.ceil(raw / 3600) * 3600)


def arrival_table(run: LoadedRun) -> list[list[str]] | None:
    """Arrivals asked vs sent per time bin, with the schedule lag of those sent (None for a run
    without scheduled streams)."""
    s = run.data.streams
    sched = s["scheduled_at"].dropna().to_numpy(dtype=float)
    if not sched.size:
        return None
    t0 = float(sched.min())
    trace = (run.data.run.get("workload") or {}).get("trace")
    asked = _trace_offsets(trace) if isinstance(trace, dict) else None
    source = "trace" if asked is not None else "scheduled"
    if asked is None:
        asked = sched - t0
    sent = s[s["scheduled_at"].notna()]
    start = sent["started_at"].to_numpy(dtype=float) - t0
    lag = (sent["started_at"] - sent["scheduled_at"]).to_numpy(dtype=float) * 1000.0
    span = float(max(asked.max(initial=0.0), start.max(initial=0.0)))
    width = _bin_width(span)
    rows = [["from s", "to s", f"asked ({source})", "sent", "sent/s", "lag p50 ms", "lag p99 ms"]]
    for k in range(int(span // width) + 1):
        lo, hi = k * width, (k + 1) * width
        a = int(((asked >= lo) & (asked < hi)).sum())
        in_bin = (start >= lo) & (start < hi)
        n = int(in_bin.sum())
        lags = lag[in_bin]
        rows.append(
            [
                f"{lo:g}",
                f"{hi:g}",
                str(a),
                str(n),
                _num(n / width, ".2f"),
                _num(float(np.percentile(lags, 50)) if n else None, ".2f"),
                _num(float(np.percentile(lags, 99)) if n else None, ".2f"),
            ]
        )
    return rows


def replay_tables(runs: Sequence[LoadedRun]) -> list[Table]:
    """The section's tables for every run that replayed a trace, hung up, or saw a prefix cache."""
    out: list[Table] = []
    for run in runs:
        label = f"{run.label} ({run.name})"
        fig = replay_figures(run.data)
        if (run.data.run.get("workload") or {}).get("trace"):
            rows = arrival_table(run)
            if rows is not None:
                out.append((f"Arrivals asked vs sent: {label}", rows))
        pc = fig.get("prefix_cache")
        if pc:
            hit, miss = pc["ttft_ms_hit"], pc["ttft_ms_miss"]
            out.append(
                (
                    f"Prefix cache: {label}",
                    [
                        ["streams", "TTFT p50 ms", "TTFT p99 ms", "count"],
                        [
                            "cache hit",
                            _num(hit["p50"], ".1f"),
                            _num(hit["p99"], ".1f"),
                            str(hit["count"]),
                        ],
                        [
                            "cache miss",
                            _num(miss["p50"], ".1f"),
                            _num(miss["p99"], ".1f"),
                            str(miss["count"]),
                        ],
                        [
                            "hit rate (prompt tokens)",
                            _num(pc["hit_rate"], ".2%"),
                            "",
                            f"{pc['cached_tokens']}/{pc['prompt_tokens']}",
                        ],
                    ],
                )
            )
        cc = fig.get("client_cancelled")
        if cc:
            freed = fig.get("server_freed") or {}
            verdict = {True: "freed", False: "NOT freed", None: "not checked"}[freed.get("passed")]
            out.append(
                (
                    f"Client hang-ups: {label}",
                    [
                        ["client_cancelled", "share of requests", "server freed them"],
                        [
                            str(cc["count"]),
                            _num(cc["fraction"], ".2%"),
                            f"{verdict}: {freed.get('reason', '')}".rstrip(": "),
                        ],
                    ],
                )
            )
    return out


def replay_html(tables: Sequence[Table]) -> str:
    """The tables as HTML (empty without any)."""
    parts = []
    for label, rows in tables:
        parts.append(f"<h3>{html.escape(label)}</h3>{html_table(rows)}")
    return "\n".join(parts)


def replay_markdown(tables: Sequence[Table]) -> str:
    """The tables as Markdown (empty without any)."""
    out: list[str] = []
    for label, rows in tables:
        out += [
            f"### {label}",
            "",
            markdown_table(rows),
            "",
        ]
    return "\n".join(out)


def replay_json(runs: Sequence[LoadedRun]) -> dict[str, object]:
    """``report.json``'s ``replay``: each run's replay figures, by run label."""
    return {run.label: fig for run in runs if (fig := replay_figures(run.data))}


@dataclass(frozen=True)
class ReplaySection:
    """Trace arrivals, client hang-ups and the prefix cache (a report section)."""

    key: ClassVar[str] = "replay"
    title: ClassVar[str] = "Replay: arrivals, hang-ups, prefix cache"
    charts_first: ClassVar[bool] = False
    runs: tuple[LoadedRun, ...]
    tables: list[Table]

    @classmethod
    def build(cls, inp: SectionInput) -> ReplaySection:
        return cls(inp.runs, replay_tables(inp.runs))

    def charts(self) -> tuple[Chart, ...]:
        return ()

    def html(self) -> str:
        return replay_html(self.tables)

    def markdown(self) -> str:
        return replay_markdown(self.tables)

    def to_json(self) -> object:
        return replay_json(self.runs)
