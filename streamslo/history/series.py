"""``streamslo history``'s series: read it from the store and judge it (load → judge; the
outputs are :mod:`streamslo.history.outputs`'s, as the report's pipeline).

Which series: the newest run's (of any series in the store), unless ``scenario`` and
``target`` name one. The trend shows the last N runs; each is judged against the runs that
passed before it (:mod:`streamslo.history.verdict`), so the store's earlier runs are read too,
as many as the baselines need. The exit code is the newest run's verdict.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from streamslo.errors import EXIT_OK, EXIT_THRESHOLD, BadInputError
from streamslo.history.store import HistoryRun, open_store
from streamslo.history.verdict import RunJudgement, judge_series
from streamslo.slo.regression import HISTORY_METRICS, RegressionSettings

__all__ = ["HistoryReport", "build_history", "with_overrides"]


@dataclass(frozen=True)
class HistoryReport:
    """A judged series: what every output is rendered from."""

    store: Path
    scenario: str
    target: str
    settings: RegressionSettings
    """With ``metrics`` the metrics shown and judged."""
    judgements: tuple[RunJudgement, ...]
    """The last N runs, oldest first."""
    series_runs: int
    """Runs of the series in the store."""

    @property
    def newest(self) -> RunJudgement:
        return self.judgements[-1]

    @property
    def exit_code(self) -> int:
        """99 when the newest run is a regression, else 0 (``verify``'s codes)."""
        return EXIT_THRESHOLD if self.newest.verdict == "regressed" else EXIT_OK


def _pick_series(
    store_series: Sequence[tuple[str, str]],
    newest: HistoryRun | None,
    scenario: str | None,
    target: str | None,
) -> tuple[str, str]:
    if scenario is None and target is None:
        if newest is None:
            raise BadInputError("the history store holds no run yet (streamslo history add DIR)")
        return newest.scenario, newest.target
    matches = [
        (s, t)
        for s, t in store_series
        if (scenario is None or s == scenario) and (target is None or t == target)
    ]
    if len(matches) == 1:
        return matches[0]
    known = "; ".join(f"--scenario {s} --target {t}" for s, t in store_series) or "none"
    what = "no series" if not matches else "several series"
    raise BadInputError(f"{what} in the store match; the store's series: {known}")


def build_history(
    store_path: Path,
    settings: RegressionSettings,
    *,
    scenario: str | None = None,
    target: str | None = None,
    seed: int = 0,
) -> HistoryReport:
    """Read and judge one series.

    Args:
        store_path: the store.
        settings: ``[regression]``, with the command line's ``--metric``, ``--last`` and
            ``--baseline`` already applied.
        scenario: the series' scenario (default: the newest run's).
        target: the series' target (default: the newest run's).
        seed: the seed of the change's bootstrap.

    Raises:
        BadInputError: no store, an empty store, or no such series (the store's are listed).
    """
    unknown = [m for m in settings.metrics if m not in HISTORY_METRICS]
    if unknown:
        raise BadInputError(
            f"--metric {unknown[0]}: not a history metric; known: {', '.join(HISTORY_METRICS)}"
        )
    with open_store(store_path) as store:
        counts = {(s.scenario, s.target): s.runs for s in store.series()}
        name, url = _pick_series(list(counts), store.newest(), scenario, target)
        # Enough earlier runs that each shown run finds its baseline (runs that failed or
        # regressed are passed over): the last N, and a margin of 4 baselines before them.
        runs = store.runs(name, url, last=settings.last + 4 * settings.baseline)
    judged = judge_series(runs, settings, seed=seed)
    return HistoryReport(
        store=Path(store_path),
        scenario=name,
        target=url,
        settings=settings,
        judgements=tuple(judged[-settings.last :]),
        series_runs=counts[(name, url)],
    )


def with_overrides(
    settings: RegressionSettings,
    metrics: Sequence[str] | None,
    last: int | None,
    baseline: int | None,
) -> RegressionSettings:
    """The file's settings with the command line's ``--metric``, ``--last`` and
    ``--baseline`` over them.

    Raises:
        BadInputError: a value out of range, or an unknown metric (named).
    """
    for flag, v in (("--last", last), ("--baseline", baseline)):
        if v is not None and v < 1:
            raise BadInputError(f"{flag}: must be at least 1, got {v}")
    if metrics:
        for m in metrics:
            if m not in HISTORY_METRICS:
                import difflib

                close = difflib.get_close_matches(m, list(HISTORY_METRICS), n=1)
                hint = f" (did you mean {close[0]}?)" if close else ""
                raise BadInputError(
                    f"--metric {m}: not a history metric{hint}; known: {', '.join(HISTORY_METRICS)}"
                )
        settings = replace(settings, metrics=tuple(dict.fromkeys(metrics)))
    if last is not None:
        settings = replace(settings, last=last)
    if baseline is not None:
        settings = replace(
            settings, baseline=baseline, min_baseline=min(settings.min_baseline, baseline)
        )
    return settings
