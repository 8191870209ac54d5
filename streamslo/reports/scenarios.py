"""The report's scenario table: each ``[scenarios.NAME]`` of a run side by side (requests,
dropped iterations, failure rates, headline latencies), for runs that have scenarios."""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from streamslo.figures.metrics import scenario_figures
from streamslo.reports.load import LoadedRun
from streamslo.results.markup import html_table, markdown_table

if TYPE_CHECKING:
    from streamslo.reports.charts import Chart
    from streamslo.reports.section import SectionInput

__all__ = [
    "ScenariosSection",
    "scenario_html",
    "scenario_json",
    "scenario_markdown",
    "scenario_tables",
]

_HEAD = (
    "scenario",
    "requests",
    "ok",
    "dropped",
    "truncation",
    "errors",
    "req/s",
    "TTFT p50",
    "TTFT p99",
    "ITL p99",
    "E2E p99",
)


def _num(v: Any, fmt: str) -> str:
    return "—" if v is None else format(v, fmt)


def scenario_tables(runs: Sequence[LoadedRun]) -> list[tuple[str, list[list[str]]]]:
    """``(run label, rows)`` for every run with scenarios; the first row is the header."""
    out = []
    for run in runs:
        figures = scenario_figures(run.data)
        if not figures:
            continue
        rows = [list(_HEAD)]
        for name, f in figures.items():
            rows.append(
                [
                    name,
                    str(f["requests"]),
                    str(f["ok"]),
                    str(f["dropped_iterations"]),
                    _num(f["truncation_rate"], ".3%"),
                    _num(f["error_rate"], ".3%"),
                    _num(f["requests_per_s"], ".2f"),
                    _num(f["ttft_ms"]["p50"], ".1f"),
                    _num(f["ttft_ms"]["p99"], ".1f"),
                    _num(f["itl_ms"]["p99"], ".1f"),
                    _num(f["e2e_ms"]["p99"], ".1f"),
                ]
            )
        out.append((f"{run.label} ({run.name})", rows))
    return out


def scenario_html(tables: Sequence[tuple[str, list[list[str]]]]) -> str:
    """The tables as HTML (empty without scenarios)."""
    parts = []
    for label, rows in tables:
        parts.append(f"<h3>{html.escape(label)}</h3>{html_table(rows)}")
    return "\n".join(parts)


def scenario_markdown(tables: Sequence[tuple[str, list[list[str]]]]) -> str:
    """The tables as Markdown (empty without scenarios)."""
    out: list[str] = []
    for label, rows in tables:
        out += [
            f"### Scenarios: {label}",
            "",
            markdown_table(rows),
            "",
        ]
    return "\n".join(out)


def scenario_json(runs: Sequence[LoadedRun]) -> dict[str, object]:
    """``report.json``'s ``scenarios``: each run's per-scenario figures, by run label."""
    return {run.label: figures for run in runs if (figures := scenario_figures(run.data))}


@dataclass(frozen=True)
class ScenariosSection:
    """Per-scenario figures of each run with ``[scenarios.*]`` (a report section)."""

    key: ClassVar[str] = "scenarios"
    title: ClassVar[str] = "Scenarios"
    charts_first: ClassVar[bool] = False
    runs: tuple[LoadedRun, ...]
    tables: list[tuple[str, list[list[str]]]]

    @classmethod
    def build(cls, inp: SectionInput) -> ScenariosSection:
        return cls(inp.runs, scenario_tables(inp.runs))

    def charts(self) -> tuple[Chart, ...]:
        return ()

    def html(self) -> str:
        return scenario_html(self.tables)

    def markdown(self) -> str:
        return scenario_markdown(self.tables)

    def to_json(self) -> object:
        return scenario_json(self.runs)
