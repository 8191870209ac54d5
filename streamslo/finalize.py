"""The end of a run: merge what every process wrote, judge the generator, write
``run.json``, ``summary.json`` and ``slo.json`` (SPEC §5), and check the thresholds.

Run once, by one process (``streamslo run`` after Locust exits, or a plain Locust master or
local runner when it quits).
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

from streamslo import __version__
from streamslo.metrics import summarize
from streamslo.results import RUN_FILE, SUMMARY_FILE, compact_gaps, load_run, read_json, write_json

__all__ = [
    "BUSY_FRACTION_LIMIT",
    "LAG_P99_LIMIT_MS",
    "finalize",
    "finalize_plain_locust",
    "iso_utc",
    "judge_validity",
]

#: A generator process above 90 % of a core for more than this share of the run is saturated.
BUSY_FRACTION_LIMIT = 0.10
#: A generator whose greenlet lag p99 passes this measures itself.
LAG_P99_LIMIT_MS = 20.0


def iso_utc(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def judge_validity(directory: Path) -> dict[str, Any]:
    """Read every ``procs/*.json`` and judge whether the load generator measured the server.

    Returns:
        ``{"valid", "invalid_reason", "generator": {...}}``.
    """
    procs = []
    for p in sorted((directory / "procs").glob("*.json")):
        try:
            procs.append(json.loads(p.read_text()))
        except (OSError, ValueError):
            continue
    reasons = []
    for p in procs:
        busy = float(p.get("cpu_busy_fraction") or 0.0)
        lag = p.get("lag_p99_ms")
        if busy > BUSY_FRACTION_LIMIT:
            reasons.append(
                f"generator process {p.get('tag')} was above 90% of a core for {busy:.0%} of the run (limit 10%)"
            )
        if isinstance(lag, (int, float)) and lag > LAG_P99_LIMIT_MS:
            reasons.append(f"generator process {p.get('tag')} greenlet lag p99 {lag:.1f} ms (limit 20 ms)")
    peaks = [p["peak_cpu_percent"] for p in procs if isinstance(p.get("peak_cpu_percent"), (int, float))]
    lags = [p["lag_p99_ms"] for p in procs if isinstance(p.get("lag_p99_ms"), (int, float))]
    busy_fracs = [float(p.get("cpu_busy_fraction") or 0.0) for p in procs]
    return {
        "valid": not reasons,
        "invalid_reason": "; ".join(reasons) or None,
        "peak_cpu_percent": max(peaks) if peaks else None,
        "generator": {
            "processes": len(procs),
            "peak_cpu_percent": max(peaks) if peaks else None,
            "cpu_busy_fraction": max(busy_fracs) if busy_fracs else None,
            "lag_p99_ms": max(lags) if lags else None,
            "per_process": procs,
        },
    }


def finalize(
    directory: Path,
    run_info: dict[str, Any],
    slo: Any = None,
    extra_checks: list[Any] | None = None,
) -> tuple[dict[str, Any], list[Any]]:
    """Complete a results directory.

    Args:
        directory: the results directory.
        run_info: fields for ``run.json`` (merged over what is there).
        slo: a parsed SLO (:mod:`streamslo.thresholds`); None for the default SLO.
        extra_checks: results checked earlier (e.g. an abortOnFail that stopped the run),
            written to ``slo.json`` too.

    Returns:
        (summary, threshold results).
    """
    from streamslo import thresholds

    directory = Path(directory)
    compact_gaps(directory)
    run_path = directory / RUN_FILE
    run = read_json(run_path) if run_path.exists() else {}
    run.update(run_info)
    run.update(judge_validity(directory))
    write_json(run_path, run)
    data = load_run(directory)
    summary = summarize(data)
    write_json(directory / SUMMARY_FILE, summary)
    checks = thresholds.evaluate(slo if slo is not None else thresholds.DEFAULT_SLO, data)
    thresholds.write_slo_json(directory, list(extra_checks or []) + list(checks))
    return summary, checks


def finalize_plain_locust(environment: Any, directory: Path, run_start: float) -> None:
    """Finalize when Locust ran without ``streamslo run`` (best effort; logs, never raises)."""
    import logging
    import time

    import locust

    log = logging.getLogger("streamslo.locust")
    opts = environment.parsed_options
    try:
        end = time.time()
        finalize(
            directory,
            {
                "tool_version": __version__,
                "start": iso_utc(run_start),
                "end": iso_utc(end),
                "start_epoch": run_start,
                "end_epoch": end,
                "target": environment.host,
                "scenario": None,
                "users": getattr(opts, "num_users", None),
                "protocol": getattr(opts, "protocol", None),
                "stall_timeout": getattr(opts, "stall_timeout", None),
                "max_tokens": getattr(opts, "max_tokens", None),
                "locust_version": locust.__version__,
            },
        )
    except Exception:  # the load run itself is over; say why the files are incomplete
        log.exception("streamslo: could not finalize %s", directory)
