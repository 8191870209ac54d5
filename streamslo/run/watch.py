"""What ``streamslo run`` does while Locust runs: read the windows as they close and the
running totals, and act on them.

Each poll (once a second) costs the same at the first minute and the tenth hour: the rows
appended to ``windows.csv`` since the last poll feed the budget's burn-rate alerts
(:class:`streamslo.slo.budget.BurnTracker`), and ``live.json`` (rewritten by Locust every
2 s; merged histograms by group) feeds the live ``abortOnFail`` checks
(:func:`streamslo.slo.live_eval.live_abort_check`), the progress line and the Prometheus exporter.
Nothing here loads ``streams.csv`` or the gaps.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streamslo.results.layout import Layout
from streamslo.run.exporter import ExporterSnapshot, GeneratorExporter
from streamslo.run.progress import Progress, ProgressState
from streamslo.runfiles.windows_csv import LiveState, WindowsTail, read_live
from streamslo.slo.budget import Budget, BurnTracker, FiredAlert
from streamslo.slo.live_eval import counts_of, live_abort_check, rate_from_counts
from streamslo.slo.thresholds import SLO, CheckResult
from streamslo.stream.outcome import OUTCOMES

__all__ = ["RunWatch", "WatchVerdict"]


@dataclass
class WatchVerdict:
    """Why the run must stop now (empty: it may go on)."""

    failed: list[CheckResult] = field(default_factory=list)
    """``abortOnFail`` thresholds that failed."""
    alert: FiredAlert | None = None
    """An ``abortOnFail`` alert that fired."""

    def __bool__(self) -> bool:
        return bool(self.failed) or self.alert is not None


class RunWatch:
    """The watch of one run.

    Args:
        out: the results directory.
        slo: the run's thresholds.
        budget: its error budget, or None.
        planned_s: warm-up plus duration (for the ETA).
        progress: where progress goes (None: nowhere).
        exporter: the Prometheus endpoint, or None.
        drain_s: ``--drain``, the most the run goes on past ``planned_s`` (None: not known).
    """

    def __init__(
        self,
        out: Path,
        slo: SLO,
        budget: Budget | None,
        planned_s: float,
        progress: Progress | None = None,
        exporter: GeneratorExporter | None = None,
        drain_s: float | None = None,
    ) -> None:
        self.layout = Layout(out)
        self.drain_s = drain_s
        self.slo = slo
        self.tracker = BurnTracker(budget) if budget is not None else None
        self.planned_s = planned_s
        self.progress = progress
        self.exporter = exporter
        self.has_abort = any(t.abort_on_fail for t in slo.thresholds)
        self._tail = WindowsTail(self.layout.windows_csv)
        self._live: LiveState | None = None
        self._live_mtime = 0.0
        self._last_row: dict[str, Any] | None = None

    @property
    def alerts(self) -> list[FiredAlert]:
        """Every alert fired so far."""
        return list(self.tracker.fired) if self.tracker is not None else []

    def poll(self, elapsed_s: float) -> WatchVerdict:
        """Read what changed; say whether the run must stop."""
        verdict = WatchVerdict()
        for row in self._tail.read():
            self._last_row = row
            if self.tracker is not None:
                for alert in self.tracker.add(row):
                    if alert.abort_on_fail and verdict.alert is None:
                        verdict.alert = alert
        self._read_live()
        if self.has_abort and self._live is not None:
            verdict.failed = live_abort_check(self.slo, self._live.totals, elapsed_s)
        self._show(elapsed_s)
        return verdict

    def _read_live(self) -> None:
        try:
            mtime = self.layout.live_json.stat().st_mtime
        except OSError:
            return
        if mtime == self._live_mtime:
            return
        live = read_live(self.layout.live_json)
        if live is not None:
            self._live, self._live_mtime = live, mtime

    def state(self, elapsed_s: float) -> ProgressState:
        """What the progress line shows now."""
        row = self._last_row or {}
        trunc = fivexx = None
        if row:
            outcomes = {k: int(row.get(k) or 0) for k in OUTCOMES}
            began = int(row.get("began") or 0)
            n, d = rate_from_counts("truncation_rate", outcomes, began)
            trunc = n / d if d else None
            n, d = rate_from_counts("http_5xx_rate", outcomes, began)
            fivexx = n / d if d else None
        streams = refused = None
        if self._live is not None:
            outcomes, _ = counts_of(self._live.totals)
            streams = sum(outcomes.values())
            refused = outcomes.get("connect_error", 0)
        alerts = self.alerts
        return ProgressState(
            elapsed_s=elapsed_s,
            planned_s=self.planned_s,
            streams=streams,
            active=row.get("active_streams"),
            truncation_rate=trunc,
            http_5xx_rate=fivexx,
            itl_p99_ms=row.get("itl_ms_p99"),
            alerts=len(alerts),
            last_alert=alerts[-1].name if alerts else None,
            connect_errors=refused,
            drain_s=self.drain_s,
        )

    def _show(self, elapsed_s: float) -> None:
        if self.progress is not None:
            self.progress.update(self.state(elapsed_s))
        if self.exporter is not None:
            self.exporter.update(
                ExporterSnapshot(
                    totals=self._live.totals if self._live is not None else {},
                    last_window=self._last_row,
                    burns=dict(self.tracker.burns) if self.tracker is not None else {},
                    alerts_fired=len(self.alerts),
                )
            )

    def finish(self, elapsed_s: float) -> None:
        """The run ended: read the last windows (alerts that fire on them are recorded, not
        acted on) and close the progress line."""
        for row in self._tail.read():
            self._last_row = row
            if self.tracker is not None:
                self.tracker.add(row)
        self._read_live()
        self._show(elapsed_s)
        if self.progress is not None:
            self.progress.close()
