"""The run history: which store, and how often the regression verdict cries wolf.

A. **Stores side by side**: the history's SQLite store (Python's own ``sqlite3``) and the same
   tables as Parquet files read by DuckDB (when ``duckdb`` is importable: ``pip install
   duckdb``), on the same runs: milliseconds to add one run (its metadata, 21 figures with 400
   resamples each, 360 window rows), milliseconds to read the trend of one series' last 30 runs
   out of ``--runs`` runs in 10 series, the store's size on disk, and the import's cost.
B. **False alarms**: ``--histories`` histories of ``--nights`` synthetic nights each, noise only
   (each night a new seed, its latencies drifted by ``--night-sd``), written as real results
   directories by the project's results writer and finalize (tests/history/nights.py), added to
   a store by ``record_run`` and judged by ``judge_series`` with the default ``[regression]``:
   the share of histories where any night was flagged, the share where the newest was, and the
   flags per metric.
C. **The planted regression**: the same histories with night ``--planted-night`` given a
   ``--rise`` (30 %) in ITL p99 (the tail only; it still passes ``p(99)<200``): how often that
   night is flagged, and how often it is the only night flagged.

Run: ``python bench/bench_history.py [--histories 100] [--json bench/results/history.json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from streamslo.history.measure import DEFAULT_RESAMPLES, Measured  # noqa: E402
from streamslo.history.record import read_run  # noqa: E402
from streamslo.history.store import HistoryRun, open_store  # noqa: E402
from streamslo.history.verdict import judge_series  # noqa: E402
from streamslo.slo.regression import DEFAULT_REGRESSION, HISTORY_METRICS  # noqa: E402

DAY = 86400.0
T0 = 1_800_000_000.0


# ---------------------------------------------------------------------------- A. stores
def _fake_run(
    i: int, series: int, rng: np.random.Generator
) -> tuple[HistoryRun, list[dict[str, Any]]]:
    figures = {
        k: Measured(float(rng.uniform(10, 100)), rng.normal(50, 5, DEFAULT_RESAMPLES))
        for k in HISTORY_METRICS
    }
    run = HistoryRun(
        id=0,
        run_key=f"s{series}|t|{i}",
        scenario=f"s{series}",
        target="http://llm.internal:8000",
        start=f"2027-01-01T00:00:{i % 60:02d}Z",
        start_epoch=T0 + i * DAY + series,
        path=f"/results/night{i}",
        tool_version="0.1.0",
        code_version="v0.1.0-12-gabcdef0",
        passed=True,
        valid=True,
        figures=figures,
        options={"users": 200, "protocol": "mixed", "max_tokens": 128},
        summary={"requests": 50_000, "itl_ms": {"p99": 45.0}},
        slo=[{"metric": "itl_ms", "expression": "p(99)<200", "passed": True}],
    )
    windows = [
        {
            "window_start": T0 + i * DAY + 10 * w,
            "window_s": 10.0,
            "requests": 140,
            "itl_ms_p99": 45.0,
        }
        for w in range(360)
    ]
    return run, windows


def _sqlite_cell(root: Path, runs: int) -> dict[str, Any]:
    rng = np.random.default_rng(1)
    path = root / "history.sqlite"
    adds = []
    with open_store(path, create=True) as store:
        for i in range(runs):
            run, windows = _fake_run(i // 10, i % 10, rng)
            t = time.perf_counter()
            store.add(run, windows)
            adds.append(time.perf_counter() - t)
        reads = []
        for _ in range(20):
            t = time.perf_counter()
            got = store.runs("s3", "http://llm.internal:8000", last=30)
            reads.append(time.perf_counter() - t)
        assert len(got) == min(30, runs // 10) and len(got[-1].figures) == len(HISTORY_METRICS)
    return {
        "store": "SQLite (sqlite3, stdlib)",
        "add_ms_p50": round(float(np.median(adds)) * 1e3, 2),
        "trend_ms_p50": round(float(np.median(reads)) * 1e3, 2),
        "size_mb": round(path.stat().st_size / 2**20, 2),
        "import_ms": _import_ms("import sqlite3"),
        "dependency_mb": 0.0,
    }


def _duckdb_cell(root: Path, runs: int) -> dict[str, Any] | None:
    try:
        import duckdb
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return None
    rng = np.random.default_rng(1)
    folder = root / "parquet"
    for sub in ("runs", "figures", "windows"):
        (folder / sub).mkdir(parents=True)
    adds = []
    for i in range(runs):
        run, windows = _fake_run(i // 10, i % 10, rng)
        t = time.perf_counter()
        # Parquet files cannot be appended to: one file per run and table.
        pq.write_table(
            pa.table(
                {
                    "id": [i],
                    "scenario": [run.scenario],
                    "target": [run.target],
                    "start_epoch": [run.start_epoch],
                    "passed": [run.passed],
                    "options": [json.dumps(run.options)],
                    "summary": [json.dumps(run.summary)],
                }
            ),
            folder / "runs" / f"{i:06d}.parquet",
        )
        pq.write_table(
            pa.table(
                {
                    "run_id": [i] * len(run.figures),
                    "metric": list(run.figures),
                    "value": [m.value for m in run.figures.values()],
                    "resamples": [
                        m.resamples.astype("<f8").tobytes() for m in run.figures.values()
                    ],
                }
            ),
            folder / "figures" / f"{i:06d}.parquet",
        )
        pq.write_table(
            pa.table(
                {
                    "run_id": [i] * len(windows),
                    "window_start": [w["window_start"] for w in windows],
                    "row": [json.dumps(w) for w in windows],
                }
            ),
            folder / "windows" / f"{i:06d}.parquet",
        )
        adds.append(time.perf_counter() - t)
    con = duckdb.connect()
    sql = f"""
        WITH last AS (
            SELECT id FROM read_parquet('{folder}/runs/*.parquet')
            WHERE scenario = 's3' AND target = 'http://llm.internal:8000'
            ORDER BY start_epoch DESC LIMIT 30)
        SELECT f.run_id, f.metric, f.value, f.resamples
        FROM read_parquet('{folder}/figures/*.parquet') f JOIN last ON f.run_id = last.id
    """
    reads = []
    for _ in range(5):
        t = time.perf_counter()
        rows = con.execute(sql).fetchall()
        reads.append(time.perf_counter() - t)
    assert len(rows) == min(30, runs // 10) * len(HISTORY_METRICS)
    size = sum(p.stat().st_size for p in folder.rglob("*.parquet"))
    from importlib.metadata import files

    # every file the distribution installed (its native library lies beside the package)
    dep_size = sum(
        p.stat().st_size for f in files("duckdb") or [] if (p := Path(str(f.locate()))).is_file()
    )
    return {
        "store": f"DuckDB {duckdb.__version__} over Parquet (a file per run)",
        "add_ms_p50": round(float(np.median(adds)) * 1e3, 2),
        "trend_ms_p50": round(float(np.median(reads)) * 1e3, 2),
        "size_mb": round(size / 2**20, 2),
        "import_ms": _import_ms("import duckdb"),
        "dependency_mb": round(dep_size / 2**20, 1),
    }


def _import_ms(stmt: str) -> float:
    """A fresh interpreter's import, best of three (minus the bare interpreter's start)."""

    def once(code: str) -> float:
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, env=dict(os.environ))
        return time.perf_counter() - t

    bare = min(once("pass") for _ in range(3))
    return round(max(0.0, min(once(stmt) for _ in range(3)) - bare) * 1e3, 1)


# ---------------------------------------------------------------------- B/C. verdicts
def _night_dir(args: tuple[str, int, int, float, int, float]) -> tuple[int, int, float, HistoryRun]:
    """Write one night and read it as the history keeps it (in a worker process)."""
    root, history, night, rise, streams, night_sd = args
    from tests.history.nights import Night, write_night

    seed = 1_000 * history + night
    d = Path(root) / f"h{history:03d}-n{night:02d}-{int(rise * 100)}"
    write_night(
        d,
        Night(
            seed=seed, start=T0 + night * DAY, streams=streams, itl_p99_rise=rise, night_sd=night_sd
        ),
    )
    run, _ = read_run(d, scenario=f"h{history}", target="synthetic")
    shutil.rmtree(d)
    return history, night, rise, run


def _verdicts(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    jobs: list[tuple[str, int, int, float, int, float]] = []
    for h in range(args.histories):
        for n in range(1, args.nights + 1):
            jobs.append((str(root), h, n, 0.0, args.streams, args.night_sd))
        jobs.append((str(root), h, args.planted_night, args.rise, args.streams, args.night_sd))
    noise: dict[int, dict[int, HistoryRun]] = {}
    planted: dict[int, HistoryRun] = {}
    t = time.time()
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        for h, n, rise, run in pool.map(_night_dir, jobs, chunksize=4):
            if rise:
                planted[h] = run
            else:
                noise.setdefault(h, {})[n] = run
    built_s = time.time() - t
    any_night = newest = 0
    flags: Counter[str] = Counter()
    hit = only = 0
    flags_per_night: list[int] = []
    planted_flags: Counter[str] = Counter()
    rises = []
    for h in range(args.histories):
        nights = [replace(noise[h][n], id=n) for n in range(1, args.nights + 1)]
        judged = judge_series(nights, DEFAULT_REGRESSION)
        flagged = [j for j in judged if j.verdict == "regressed"]
        any_night += bool(flagged)
        newest += judged[-1].verdict == "regressed"
        flags_per_night.append(len(flagged))
        for j in flagged:
            flags.update(j.regressed)
        with_plant = [
            replace(planted[h], id=n) if n == args.planted_night else r
            for n, r in zip(range(1, args.nights + 1), nights, strict=True)
        ]
        judged = judge_series(with_plant, DEFAULT_REGRESSION)
        flagged_nights = [
            n
            for n, j in zip(range(1, args.nights + 1), judged, strict=True)
            if j.verdict == "regressed"
        ]
        hit += args.planted_night in flagged_nights
        only += flagged_nights == [args.planted_night]
        planted_flags.update(judged[args.planted_night - 1].regressed)
        c = judged[args.planted_night - 1].changes["itl_ms.p99"]
        if c.relative is not None:
            rises.append(c.relative)
    judged_nights = args.histories * max(0, args.nights - DEFAULT_REGRESSION.min_baseline)
    return {
        "built_s": round(built_s, 1),
        "judged_nights": judged_nights,
        "false_alarms": {
            "histories_with_a_flag": any_night,
            "histories_with_a_flag_pct": round(100.0 * any_night / args.histories, 1),
            "newest_flagged": newest,
            "newest_flagged_pct": round(100.0 * newest / args.histories, 1),
            "nights_flagged": sum(flags_per_night),
            "flags_by_metric": dict(flags.most_common()),
        },
        "planted": {
            "planted_night_flagged": hit,
            "planted_night_flagged_pct": round(100.0 * hit / args.histories, 1),
            "only_planted_night_flagged": only,
            "only_planted_night_flagged_pct": round(100.0 * only / args.histories, 1),
            "flags_by_metric": dict(planted_flags.most_common()),
            "itl_p99_change_median_pct": round(100.0 * float(np.median(rises)), 1)
            if rises
            else None,
        },
    }


def render(data: dict[str, Any]) -> str:
    """The Markdown section of ``bench/RESULTS.md`` from this bench's JSON."""
    p = data["params"]
    out = []
    if data.get("stores"):
        out += [
            f"A. Stores: {p['runs']} runs in 10 series (21 figures × 400 resamples, 360 windows "
            "each); add one run, read one series' last 30 runs, p50.\n",
            "| store | add a run (ms) | trend of 30 runs (ms) | size (MB) | import (ms) | dependency (MB) |",
            "| --- | ---: | ---: | ---: | ---: | ---: |",
        ]
        for s in data["stores"]:
            out.append(
                f"| {s['store']} | {s['add_ms_p50']:.2f} | {s['trend_ms_p50']:.2f} | "
                f"{s['size_mb']:.2f} | {s['import_ms']:.0f} | {s['dependency_mb']:.1f} |"
            )
    v = data.get("verdicts")
    if v:
        fa, pl = v["false_alarms"], v["planted"]
        out += [
            "",
            f"B/C. Verdicts: {p['histories']} histories of {p['nights']} synthetic nights "
            f"({p['streams']} streams each, night-to-night drift {p['night_sd'] * 100:g} %), "
            "default `[regression]` (baseline 7, at least 3, 95 %, margins 10 % / 0.1 pp); "
            f"C plants a {p['rise'] * 100:g} % ITL p99 rise on night {p['planted_night']}.\n",
            "| | histories | share |",
            "| --- | ---: | ---: |",
            f"| B. noise only: any night flagged | {fa['histories_with_a_flag']} | {fa['histories_with_a_flag_pct']:.1f} % |",
            f"| B. noise only: the newest night flagged | {fa['newest_flagged']} | {fa['newest_flagged_pct']:.1f} % |",
            f"| B. noise only: nights flagged, of {v['judged_nights']} judged | {fa['nights_flagged']} | "
            f"{100.0 * fa['nights_flagged'] / max(v['judged_nights'], 1):.1f} % |",
            f"| C. planted: night {p['planted_night']} flagged | {pl['planted_night_flagged']} | {pl['planted_night_flagged_pct']:.1f} % |",
            f"| C. planted: night {p['planted_night']} and no other flagged | {pl['only_planted_night_flagged']} | {pl['only_planted_night_flagged_pct']:.1f} % |",
            "",
            f"False flags by metric (B): {_counts(fa['flags_by_metric'])}; the planted night's "
            f"flags (C): {_counts(pl['flags_by_metric'])}; its ITL p99 change, median: "
            f"+{pl['itl_p99_change_median_pct']} %.",
        ]
    return "\n".join(out)


def _counts(d: dict[str, int]) -> str:
    return ", ".join(f"{k} {n}" for k, n in d.items()) or "none"


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--runs", type=int, default=1000, help="A: runs in the stores")
    ap.add_argument("--histories", type=int, default=100, help="B/C: histories")
    ap.add_argument("--nights", type=int, default=10)
    ap.add_argument("--planted-night", type=int, default=8)
    ap.add_argument("--rise", type=float, default=0.30)
    ap.add_argument("--streams", type=int, default=240, help="streams a night")
    ap.add_argument("--night-sd", type=float, default=0.03)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--skip-stores", action="store_true")
    ap.add_argument("--skip-verdicts", action="store_true")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    result: dict[str, Any] = {
        "command": "python bench/bench_history.py "
        + " ".join(argv if argv is not None else sys.argv[1:]),
        "params": {k: v for k, v in vars(args).items() if k != "json"},
        "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cpus": os.cpu_count(),
    }
    with tempfile.TemporaryDirectory(prefix="bench-history-") as tmp:
        root = Path(tmp)
        if not args.skip_stores:
            cells = [_sqlite_cell(root / "a", args.runs)]
            duck = _duckdb_cell(root / "b", args.runs)
            if duck is not None:
                cells.append(duck)
            result["stores"] = cells
        if not args.skip_verdicts:
            result["verdicts"] = _verdicts(args, root / "nights")
    print(render(result))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
