"""Adding a finished results directory to the history: what is kept of it, and which series it
belongs to.

A run belongs to the series of its scenario and target:

- the scenario is the scenario file's name without ``.toml`` (``nightly``), or ``-`` for a run
  without one;
- the target is the server's URL, except the bundled server, which every night starts on
  another free port: ``bundled:<mode>`` (``bundled:fixed``).

Either can be named on ``streamslo history add`` (``--scenario``, ``--target``).

Kept: ``summary.json``, ``slo.json``, the rows of ``windows.csv``, what was asked (users,
protocol, lengths, durations...), the tool's and Locust's versions and ``git describe`` of the
code that ran, the start and end, and each history metric with its stream-resamples
(:mod:`streamslo.history.measure`). A run passed when it was valid and every threshold of its
``slo.json`` held.
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from streamslo.errors import ResultsError
from streamslo.history.measure import DEFAULT_RESAMPLES, measure_run
from streamslo.history.store import HistoryRun, open_store
from streamslo.reports.load import load_report_runs
from streamslo.results.layout import Layout, iso_utc, read_json

__all__ = [
    "NO_SCENARIO",
    "OPTION_KEYS",
    "Added",
    "code_version",
    "read_run",
    "record_after_run",
    "record_run",
    "series_of",
]

#: The scenario name of a run without a scenario file.
NO_SCENARIO = "-"

#: What was asked, from run.json (kept as the run's options).
OPTION_KEYS = (
    "users",
    "spawn_rate",
    "duration_s",
    "warmup_s",
    "drain_s",
    "processes",
    "expect_workers",
    "protocol",
    "protocol_mix",
    "endpoint",
    "api",
    "max_tokens",
    "stall_timeout",
    "request_timeout",
    "request_rate",
    "window_s",
    "slo",
    "scenarios",
    "workload",
    "goodput",
    "server_mode",
)


@dataclass(frozen=True)
class Added:
    """What :func:`record_run` did with one directory."""

    run: HistoryRun
    new: bool
    """False: the run was in the store already (nothing was added)."""
    store: Path


def series_of(run_json: Mapping[str, object]) -> tuple[str, str]:
    """(scenario, target) of a run, as the history names its series (see the module)."""
    scenario = run_json.get("scenario")
    name = Path(str(scenario)).name.removesuffix(".toml") if scenario else NO_SCENARIO
    mode = run_json.get("server_mode")
    target = str(run_json.get("target") or "")
    host = urlsplit(target).hostname or ""
    if mode and host in ("127.0.0.1", "localhost", "::1", ""):
        return name, f"bundled:{mode}"
    return name, target.rstrip("/") or "-"


def code_version() -> str | None:
    """``git describe --always --dirty`` of the checkout streamslo runs from; None when it is
    not a git checkout (an installed wheel) or git is missing."""
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return None
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "describe", "--always", "--dirty", "--tags"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def _passed(slo_doc: Mapping[str, Any], valid: bool) -> bool | None:
    """Whether the run passed: valid, and slo.json says every threshold held."""
    held = slo_doc.get("passed")
    if not isinstance(held, bool):
        return None
    return valid and held


def read_run(
    directory: str | os.PathLike[str],
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    scenario: str | None = None,
    target: str | None = None,
) -> tuple[HistoryRun, list[dict[str, float | None]]]:
    """Read a finished results directory as the history keeps it.

    Args:
        directory: the results directory (finalized).
        resamples: stream-resamples per metric.
        seed: the bootstrap's seed.
        scenario: the series' scenario name (default: from run.json).
        target: the series' target (default: from run.json).

    Returns:
        (the run, its windows).

    Raises:
        ResultsError: not a results directory, not finalized, or a damaged file (named).
    """
    layout = Layout(Path(directory))
    (loaded,) = load_report_runs(None, layout.root)
    run = loaded.run
    if not loaded.data.complete:
        raise ResultsError(
            f"{layout.root}: the run was not finalized (`streamslo finalize {layout.root}` "
            "finalizes a killed run); only finished runs join the history"
        )
    summary = read_json(layout.summary_json) if layout.summary_json.exists() else {}
    slo_doc = read_json(layout.slo_json) if layout.slo_json.exists() else {}
    slo = [c for c in slo_doc.get("thresholds") or [] if isinstance(c, Mapping)]
    from streamslo.runfiles.windows_csv import read_windows

    try:
        windows = read_windows(layout.windows_csv)
    except ValueError as exc:
        raise ResultsError(str(exc)) from None
    name, url = series_of(run)
    start_epoch = run.get("start_epoch")
    if not isinstance(start_epoch, (int, float)):
        start_epoch = loaded.start_epoch
    if start_epoch is None:
        raise ResultsError(f"{layout.run_json}: no start (start_epoch) and no streams")
    scenario, target = scenario or name, target or url
    valid = bool(run.get("valid", True))
    entry = HistoryRun(
        id=0,
        run_key=f"{scenario}|{target}|{float(start_epoch):.6f}",
        scenario=scenario,
        target=target,
        start=str(run.get("start") or iso_utc(float(start_epoch))),
        start_epoch=float(start_epoch),
        path=str(layout.root.resolve()),
        tool_version=run.get("tool_version"),
        code_version=code_version(),
        passed=_passed(slo_doc, valid),
        valid=valid,
        figures=measure_run(loaded, resamples, seed),
        options={k: run[k] for k in OPTION_KEYS if k in run},  # type: ignore[literal-required]
        summary=summary,
        slo=slo,
        end=run.get("end"),
        added_at=iso_utc(dt.datetime.now(dt.UTC).timestamp()),
        locust_version=run.get("locust_version"),
        resamples=resamples,
        seed=seed,
    )
    return entry, [dict(w) for w in windows]


def record_run(
    store_path: str | os.PathLike[str],
    results_dir: str | os.PathLike[str],
    *,
    scenario: str | None = None,
    target: str | None = None,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> Added:
    """Add one finished results directory to the store at ``store_path`` (made if missing).

    This is what ``streamslo history add`` does for each directory, and what ``--history
    PATH`` on ``run`` and ``soak`` calls once the run is finalized.

    Raises:
        ResultsError: the directory is not a finished results directory (named).
        BadInputError: the store is not a history store, or of a newer format.
    """
    run, windows = read_run(results_dir, resamples, seed, scenario, target)
    path = Path(store_path)
    with open_store(path, create=True) as store:
        run_id, new = store.add(run, windows)
    from dataclasses import replace

    return Added(replace(run, id=run_id), new, path)


def record_after_run(store_path: str | None, results_dir: str | os.PathLike[str]) -> None:
    """``--history PATH`` on ``run`` and ``soak``: add the finished run to the store, and say
    so; a run that left no finished directory, or a store that cannot take it, is said and
    changes nothing (the run's exit code is the run's)."""
    import sys

    from streamslo.errors import BadInputError
    from streamslo.results.layout import Layout

    if not store_path or not Layout(Path(results_dir)).run_json.is_file():
        return
    try:
        added = record_run(store_path, results_dir)
    except BadInputError as exc:
        print(f"streamslo: not added to the history: {exc}", file=sys.stderr)
        return
    what = "added to" if added.new else "already in"
    print(
        f"history: {what} {added.store} (run {added.run.id}); `streamslo history --store {added.store}` judges it"
    )
