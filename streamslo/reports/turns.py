"""The report's "TTFT by turn" table, for multi-turn runs (``--turns N``): each turn's prompt
carries the conversation so far, so its time to first token shows what a longer context costs.

One row per run and turn: the streams of that turn that count (not cancelled), TTFT p50 and
p99 (numpy ``linear``, as everywhere in the report). Nothing here prints.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, TypedDict

import numpy as np

from streamslo.figures.metrics import LatencyStats, counted_mask
from streamslo.reports.load import LoadedRun
from streamslo.reports.render import fmt, html_table, md_table
from streamslo.results.schema import LatencySummary

if TYPE_CHECKING:
    from streamslo.reports.charts import Chart
    from streamslo.reports.section import SectionInput

__all__ = ["TurnRow", "TurnsSection", "turn_rows", "turns_html", "turns_json", "turns_markdown"]


class TurnRow(TypedDict):
    """One run's streams of one turn (``report.json``'s ``turns``)."""

    run: str
    turn: int
    streams: int
    ttft_ms: LatencySummary


def turns_json(runs: Sequence[LoadedRun]) -> list[TurnRow]:
    """Per run and turn: ``{"run", "turn", "streams", "ttft_ms": {p50, p99, ...}}``; empty
    when no run has a second turn."""
    out: list[TurnRow] = []
    for r in runs:
        s = r.data.streams
        if "turn" not in s.columns or s.empty:
            continue
        turn = s["turn"].to_numpy(dtype=float)
        if not np.nanmax(turn, initial=0) > 1:
            continue
        counted = counted_mask(s).to_numpy(dtype=bool)
        ttft = s["ttft_ms"].to_numpy(dtype=float)
        for t in sorted({int(v) for v in turn[np.isfinite(turn)]}):
            mask = counted & (turn == t)
            values = ttft[mask]
            out.append(
                {
                    "run": r.name,
                    "turn": t,
                    "streams": int(mask.sum()),
                    "ttft_ms": LatencyStats.of(values[np.isfinite(values)]).as_dict(),
                }
            )
    return out


def turn_rows(table: Sequence[TurnRow]) -> list[list[str]]:
    """:func:`turns_json`'s rows as text (a header first)."""
    rows = [["run", "turn", "streams", "TTFT p50 (ms)", "TTFT p99 (ms)"]]
    rows += [
        [
            e["run"],
            str(e["turn"]),
            str(e["streams"]),
            fmt(e["ttft_ms"]["p50"]),
            fmt(e["ttft_ms"]["p99"]),
        ]
        for e in table
    ]
    return rows


def turns_html(table: Sequence[TurnRow]) -> str:
    """The table as HTML."""
    return html_table(turn_rows(table))


def turns_markdown(table: Sequence[TurnRow]) -> str:
    """The table as a Markdown section ("" when empty)."""
    return "" if not table else "\n".join(["### TTFT by turn", "", md_table(turn_rows(table)), ""])


@dataclass(frozen=True)
class TurnsSection:
    """TTFT by turn, for multi-turn runs (a report section)."""

    key: ClassVar[str] = "turns"
    title: ClassVar[str] = "TTFT by turn"
    charts_first: ClassVar[bool] = False
    table: list[TurnRow]

    @classmethod
    def build(cls, inp: SectionInput) -> TurnsSection:
        return cls(turns_json(inp.runs))

    def charts(self) -> tuple[Chart, ...]:
        return ()

    def html(self) -> str:
        return turns_html(self.table) if self.table else ""

    def markdown(self) -> str:
        return turns_markdown(self.table)

    def to_json(self) -> object:
        return self.table
