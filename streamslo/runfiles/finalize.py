"""The end of a run: merge what every process wrote, judge the generator, write
``run.json``, ``summary.json`` and ``slo.json``, and check the thresholds
(``docs/results.md``).

Run once, by one process (``streamslo run`` after Locust exits, a plain Locust master or local
runner when it quits), or afterwards by ``streamslo finalize DIR`` for a run that was killed.
``complete: true`` is written last, so a finalize that is itself killed leaves the directory
still marked incomplete, and finalizing again is safe (gap merging is idempotent).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from streamslo import __version__
from streamslo.figures.metrics import instant_failure_cause, scenario_figures, summarize
from streamslo.results.layout import (
    SCHEMA_VERSION,
    Layout,
    RunData,
    compact_gaps,
    iso_utc,
    load_run,
    read_json,
    read_run_start,
    write_json,
)
from streamslo.results.schema import RunJson, SummaryJson
from streamslo.workload.scenarios import dropped_totals

if TYPE_CHECKING:
    from locust.env import Environment

if TYPE_CHECKING:
    from streamslo.slo.thresholds import SLO, CheckResult

__all__ = [
    "BUSY_FRACTION_LIMIT",
    "LAG_P99_LIMIT_MS",
    "finalize",
    "finalize_killed",
    "finalize_plain_locust",
    "iso_utc",
    "judge_generators",
    "judge_validity",
    "last_record_epoch",
    "relay_totals",
    "writer_totals",
]

#: A generator process above 90 % of a core for more than this share of the run is saturated.
BUSY_FRACTION_LIMIT = 0.10
#: A generator whose greenlet lag p99 passes this measures itself.
LAG_P99_LIMIT_MS = 20.0


def _json_files(folder: Path) -> list[dict[str, Any]]:
    out = []
    for p in sorted(folder.glob("*.json")):
        try:
            obj = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out


def judge_validity(directory: Path) -> dict[str, object]:
    """Read every ``procs/*.json`` and judge whether the load generator measured the server.

    Returns:
        ``{"valid", "invalid_reason", "generator": {...}}``.
    """
    return judge_generators(_json_files(Layout(directory).procs_dir))


def _number(v: object) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def judge_generators(procs: Sequence[Mapping[str, object]]) -> dict[str, object]:
    """Judge the load generator from each process's figures (``procs/*.json``, or the live
    monitors' figures: the web UI judges the run so far by the same rule).

    Returns:
        ``{"valid", "invalid_reason", "peak_cpu_percent", "generator": {...}}``.
    """
    reasons = []
    for p in procs:
        busy = _number(p.get("cpu_busy_fraction")) or 0.0
        lag = _number(p.get("lag_p99_ms"))
        # A worker's figures came to the master: name the worker (Locust's id holds its host).
        name = (
            f"worker {p['worker']} (process {p.get('tag')})"
            if p.get("worker")
            else f"generator process {p.get('tag')}"
        )
        if busy > BUSY_FRACTION_LIMIT:
            reasons.append(f"{name} was above 90% of a core for {busy:.0%} of the run (limit 10%)")
        if lag is not None and lag > LAG_P99_LIMIT_MS:
            reasons.append(f"{name} greenlet lag p99 {lag:.1f} ms (limit 20 ms)")
    peaks = [v for v in (_number(p.get("peak_cpu_percent")) for p in procs) if v is not None]
    lags = [v for v in (_number(p.get("lag_p99_ms")) for p in procs) if v is not None]
    busy_fracs = [_number(p.get("cpu_busy_fraction")) or 0.0 for p in procs]
    return {
        "valid": not reasons,
        "invalid_reason": "; ".join(reasons) or None,
        "peak_cpu_percent": max(peaks) if peaks else None,
        "generator": {
            "processes": len(procs),
            "peak_cpu_percent": max(peaks) if peaks else None,
            "cpu_busy_fraction": max(busy_fracs) if busy_fracs else None,
            "lag_p99_ms": max(lags) if lags else None,
            "per_process": list(procs),
        },
    }


def writer_totals(directory: Path) -> dict[str, object]:
    """Sum every ``writers/*.json``: rows written, rows and gaps never written, write errors.

    Returns:
        ``{"write_errors", "rows_unwritten", "gaps_unwritten", "writers": {...}}`` (zeros when
        no writer reported a problem).
    """
    writers = _json_files(Layout(directory).writers_dir)

    def total(key: str) -> int:
        return sum(int(w.get(key) or 0) for w in writers)

    errors = [str(w["last_error"]) for w in writers if w.get("last_error")]
    return {
        "write_errors": total("write_errors"),
        "rows_unwritten": total("rows_unwritten"),
        "gaps_unwritten": total("gaps_unwritten"),
        "writers": {
            "processes": len(writers),
            "rows_written": total("rows_written"),
            "last_error": errors[-1] if errors else None,
        },
    }


#: The ``relay.json`` totals that run.json keeps under ``relay``.
_RELAY_TOTALS = (
    "workers",
    "batches",
    "records",
    "bytes",
    "duplicates",
    "rejected_records",
    "master_ingest_us_per_record",
    "refused_workers",
)


def relay_totals(directory: Path) -> dict[str, object]:
    """A distributed run's ``relay.json``, for run.json: ``lost_workers`` and ``relay`` (what
    the master received). Empty for a run without workers.

    Returns:
        ``{"lost_workers": [...], "relay": {...}}``, or ``{}`` when there is no ``relay.json``.
    """
    from streamslo.errors import ResultsError

    path = Layout(directory).relay_json
    if not path.exists():
        return {}
    try:
        relay = read_json(path)
    except ResultsError as exc:  # say so rather than claim no worker was lost
        return {"lost_workers": None, "relay": {"error": str(exc)}}
    return {
        "lost_workers": list(relay.get("lost_workers") or []),
        "relay": {k: relay.get(k) for k in _RELAY_TOTALS},
    }


def finalize(
    directory: Path,
    run_info: RunJson,
    slo: SLO | None = None,
    extra_checks: list[CheckResult] | None = None,
) -> tuple[SummaryJson, list[CheckResult]]:
    """Complete a results directory: ``complete: true`` once everything else is written.

    Args:
        directory: the results directory.
        run_info: fields for ``run.json`` (merged over what is there).
        slo: a parsed SLO (:mod:`streamslo.slo.thresholds`); None for the default SLO.
        extra_checks: results checked earlier (e.g. an abortOnFail that stopped the run),
            written to ``slo.json`` too.

    Returns:
        (summary, threshold results).
    """
    from streamslo.slo import thresholds

    layout = Layout(Path(directory))
    compact_gaps(layout.root)
    run = read_json(layout.run_json) if layout.run_json.exists() else {}
    run.update(run_info)
    run.update(judge_validity(layout.root))
    run.update(writer_totals(layout.root))
    run.update(relay_totals(layout.root))
    dropped = dropped_totals(_json_files(layout.procs_dir))  # k6's dropped_iterations
    run.update(dropped)
    run["schema_version"] = SCHEMA_VERSION
    run["complete"] = False
    write_json(layout.run_json, run)
    data = load_run(layout.root)
    run["skipped_rows"] = data.skipped_rows
    cause = instant_failure_cause(data) if not run.get("valid", True) else None
    if cause:
        # The generator looks saturated because every request failed at once: say that first.
        run["invalid_reason"] = f"{cause} ({run.get('invalid_reason')})"
        data.run["invalid_reason"] = run["invalid_reason"]
    summary = summarize(data)
    summary["dropped_iterations"] = dropped["dropped_iterations"]
    summary["dropped_iterations_by_scenario"] = dropped["dropped_iterations_by_scenario"]
    per_scenario = scenario_figures(data)
    if per_scenario:
        summary["scenarios"] = per_scenario
    from streamslo.figures.replay import replay_figures  # schedule lag, hang-ups, prefix cache

    summary.update(replay_figures(data))
    from streamslo.runfiles.soak import finalize_extras  # windows, budget, drift (docs/soak.md)

    run_extra, summary_extra = finalize_extras(layout.root, run, data)
    run.update(run_extra)
    summary.update(summary_extra)
    write_json(layout.summary_json, summary)
    checks = thresholds.evaluate(slo if slo is not None else thresholds.DEFAULT_SLO, data)
    thresholds.write_slo_json(layout.root, list(extra_checks or []) + list(checks))
    run["complete"] = True
    run["finalized_at"] = iso_utc(time.time())
    write_json(layout.run_json, run)
    return summary, checks


def last_record_epoch(data: RunData) -> float | None:
    """When a run that was killed last recorded something: the latest end of a stream in
    ``streams.csv``, else the last time a file of the run was written (its last flush).

    Returns:
        Epoch seconds, or None when nothing was written.
    """
    s = data.streams
    if len(s) and s["started_at"].notna().any():
        ends = s["started_at"] + s["e2e_ms"].fillna(0.0) / 1000.0
        return float(ends.max())
    layout = Layout(data.path)
    files = [
        layout.streams_csv,
        *layout.procs_dir.glob("*.json"),
        *layout.writers_dir.glob("*.json"),
    ]
    if layout.gaps_dir.is_dir():
        files += list(layout.gaps_dir.glob("*.parquet"))
    times = [p.stat().st_mtime for p in files if p.exists()]
    return max(times) if times else None


def _recorded_slo(layout: Layout, run: RunJson) -> SLO | None:
    """The SLO the run was checked against, when run.json names a file that still exists."""
    from streamslo.options.toml_file import read_toml
    from streamslo.slo import thresholds

    source = run.get("slo")
    if isinstance(source, str) and source not in ("default", "scenario") and Path(source).is_file():
        return thresholds.load_slo(source)
    scenario = run.get("scenario")
    if source == "scenario" and isinstance(scenario, str) and Path(scenario).is_file():
        return thresholds.thresholds_of(read_toml(scenario, "a scenario file"))
    return None


def finalize_killed(
    directory: Path, slo: SLO | None = None
) -> tuple[SummaryJson, list[CheckResult], bool]:
    """Finalize a directory whose run was killed before it could (``streamslo finalize``).

    Its end is its last record (:func:`last_record_epoch`), not now; ``killed: true``. A
    directory that is already complete is left as it is.

    Args:
        directory: the results directory.
        slo: the SLO to check; None: the one run.json names when it still exists, else the
            default.

    Returns:
        (summary, threshold results, whether this call finalized it).

    Raises:
        ResultsError: not a results directory, or a damaged one (the message names the file).
    """
    from streamslo.slo import thresholds

    layout = Layout(Path(directory))
    data = load_run(layout.root)  # raises ResultsError for what is not a results directory
    if data.complete:
        summary = (
            cast(SummaryJson, read_json(layout.summary_json))
            if layout.summary_json.exists()
            else summarize(data)
        )
        return (
            summary,
            thresholds.evaluate(
                slo or _recorded_slo(layout, data.run) or thresholds.DEFAULT_SLO, data
            ),
            False,
        )
    run = data.run
    start = run.get("start_epoch")
    if not isinstance(start, (int, float)):
        start = read_run_start(layout)
    if start is None and len(data.streams):
        start = float(data.streams["started_at"].min())
    end = last_record_epoch(data)
    info: RunJson = {"killed": True, "finalized_by": "streamslo finalize"}
    if start is not None:
        info["start"], info["start_epoch"] = iso_utc(start), start
    if end is not None:
        end = max(end, start) if start is not None else end
        info["end"], info["end_epoch"] = iso_utc(end), end
    info["tool_version"] = run.get("tool_version", __version__)
    summary, checks = finalize(layout.root, info, slo or _recorded_slo(layout, run))
    return summary, checks, True


def finalize_plain_locust(
    environment: Environment, directory: Path, run_start: float, end: float | None = None
) -> None:
    """Finalize when Locust ran without ``streamslo run`` (best effort; logs, never raises).

    Args:
        end: when the test stopped (its epoch); None: now. Locust's web UI stays up after a
            test stops, and the run's length (``requests_per_s``) must not count that idle time.
    """
    import logging

    import locust

    log = logging.getLogger(__name__)
    opts = environment.parsed_options

    def option(name: str) -> Any:
        return getattr(opts, name, None)

    if end is None or end <= run_start:
        end = time.time()
    try:
        finalize(
            directory,
            {
                "tool_version": __version__,
                "start": iso_utc(run_start),
                "end": iso_utc(end),
                "start_epoch": run_start,
                "end_epoch": end,
                "target": environment.host or "",
                "scenario": None,
                # Locust's parsed options are untyped (None: not given to this Locust).
                "users": option("num_users"),
                "protocol": option("protocol"),
                "stall_timeout": option("stall_timeout"),
                "max_tokens": option("max_tokens"),
                "locust_version": locust.__version__,
                "truth": _asked_truth(opts),
            },
        )
    except Exception:  # the load run itself is over; say why the files are incomplete
        log.exception("streamslo: could not finalize %s", directory)


def _asked_truth(parsed: object) -> dict[str, object] | None:
    """What a plain Locust run's options ask to check (nothing learned: no preflight ran)."""
    from streamslo.errors import BadInputError
    from streamslo.options.run_options import RunOptions, from_locust
    from streamslo.workload.requests import RequestOptions

    try:
        values = from_locust(parsed)
        return RequestOptions.of(RunOptions(**values)).truth_asked().as_dict()
    except (BadInputError, TypeError, ValueError):
        return None


# ----------------------------------------------------------------- streamslo finalize
