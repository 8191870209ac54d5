"""Does the load generator's memory stay flat over a long run? A soak of the generator alone.

``streamslo run`` holds ``--users`` streams (``--protocol``, mixed SSE and WebSocket by default)
against a lean emitter (``bench/_soak_emitter.py``, pinned to ``--emitter-cpu``; streams of
``--max-tokens`` tokens, one every ``--period-ms``, back to back) for ``--minutes``, the generator
pinned to ``--generator-cpu``, with 10 s windows. The generator samples its own RSS every second
(``windows.csv`` ``gen_rss_mb``); finalize fits a Theil–Sen line with Sen's 95 % interval over
it, after leaving out the first tenth (warm-up), and again over the later half alone, and gives
a verdict (``docs/soak.md``). Memory is about how many streams come and go, not how fast tokens
flow: a low token rate keeps the soak cheap (150 streams at 10 tokens/s: a fifth of a core).

Printed (and written to ``--results FILE`` with a JSON twin): windows, streams, RSS at start
and end, the slope (MiB/h) with its interval, that of the later half alone (``late half
includes 0``: the question a 2-hour soak answers), the growth over the run, the verdict, and
the generator's lag p99 and CPU (a saturated generator would make the run invalid, not its
memory wrong).

``--trace DIR --trace-at 5,60``: the generator traces its allocations (``tracemalloc``, through
``bench/_memtrace/sitecustomize.py``) and writes a snapshot and per-structure counts into DIR at
those minutes; compare two with ``python bench/memtrace_diff.py A.snap B.snap``. Tracing costs
CPU and memory: its run's RSS is not the untraced one's.

Run: ``python bench/bench_soak_memory.py`` (3 minutes at 200 streams),
``python bench/bench_soak_memory.py --long`` (2 hours at 150 mixed streams of 30 tokens at 10
tokens/s), or
any of ``--minutes --users --protocol --period-ms --max-tokens``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent


def _start_emitter(work: Path, cpu: str, period_ms: float) -> tuple[subprocess.Popen[bytes], int]:
    ready = work / "emitter.port"
    proc = subprocess.Popen(
        [
            "taskset",
            "-c",
            cpu,
            sys.executable,
            str(BENCH / "_soak_emitter.py"),
            "--ready",
            str(ready),
            "--period-ms",
            f"{period_ms:g}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(work / "emitter.err", "w"),  # noqa: SIM115
    )
    deadline = time.monotonic() + 20
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(
                f"emitter did not start: {(work / 'emitter.err').read_text()[-500:]}"
            )
        time.sleep(0.1)
    return proc, int(ready.read_text())


def figures(out: Path) -> dict[str, Any]:
    """The drift of ``gen_rss_mb`` and the run's figures, from a finished results directory."""
    from streamslo.figures.drift import analyse
    from streamslo.results.layout import Layout
    from streamslo.runfiles.windows_csv import read_windows

    summary = json.loads((out / "summary.json").read_text())
    run = json.loads((out / "run.json").read_text())
    d = analyse(out, read_windows(Layout(out).windows_csv))["gen_rss_mb"]
    procs = [json.loads(p.read_text()) for p in sorted(Layout(out).procs_dir.glob("*.json"))]
    peak = max(p.get("rss_peak_mb") or 0 for p in procs) if procs else 0
    gen = run.get("generator") or {}
    lo, hi = d.get("late_ci_low_per_h"), d.get("late_ci_high_per_h")
    return {
        "windows": summary["windows"]["rows"],
        "streams": summary["requests"],
        "drift": d,
        "rss_peak_mb": peak,
        "late_half_includes_0": (
            bool(lo <= 0.0 <= hi)
            if isinstance(lo, (int, float)) and isinstance(hi, (int, float))
            else None
        ),
        "lag_p99_ms": gen.get("lag_p99_ms"),
        "peak_cpu_percent": gen.get("peak_cpu_percent"),
        "mean_cpu_percent": gen.get("mean_cpu_percent"),
    }


def _f(v: float | None, fmt: str) -> str:
    return "–" if v is None else format(v, fmt)


def table(out: Path, users: int, minutes: float, rate: str = "") -> str:
    """The benchmark's row (Markdown) for a finished results directory."""
    f = figures(out)
    d = f["drift"]
    late0 = {True: "yes", False: "no", None: "–"}[f["late_half_includes_0"]]
    return "\n".join(
        [
            "| streams held | tokens/s each | minutes | windows | streams | RSS start → end (peak) MiB"
            " | slope MiB/h, 95 % CI | later half MiB/h, 95 % CI | later half includes 0"
            " | growth over the fit | verdict | lag p99 ms | peak CPU % |",
            "| ---: | ---: | ---: | ---: | ---: | --- | --- | --- | --- | ---: | --- | ---: | ---: |",
            f"| {users} | {rate or '–'} | {minutes:g} | {f['windows']} | {f['streams']:,} | "
            f"{_f(d['start'], '.0f')} → {_f(d['end'], '.0f')} ({f['rss_peak_mb']:.0f}) | "
            f"{_f(d['slope_per_h'], '+.1f')} [{_f(d['ci_low_per_h'], '+.1f')}, "
            f"{_f(d['ci_high_per_h'], '+.1f')}] | {_f(d['late_slope_per_h'], '+.1f')} "
            f"[{_f(d['late_ci_low_per_h'], '+.1f')}, {_f(d['late_ci_high_per_h'], '+.1f')}] | "
            f"{late0} | {_f(d['growth_pct'], '+.1f')} % | {d['verdict']} | "
            f"{f['lag_p99_ms'] or 0:.0f} | {f['peak_cpu_percent'] or 0:.0f} |",
        ]
    )


def _locust_pid(parent: int) -> int | None:
    """The Locust process under ``streamslo run`` (its child: taskset execs it)."""
    import psutil

    try:
        for child in psutil.Process(parent).children(recursive=True):
            if "locust" in " ".join(child.cmdline()):
                return int(child.pid)
    except psutil.Error:
        return None
    return None


def _trace_loop(proc: subprocess.Popen[bytes], at_minutes: list[float], t0: float) -> None:
    """Ask the generator for a snapshot at each of ``at_minutes`` (SIGUSR1)."""
    for m in sorted(at_minutes):
        while proc.poll() is None and time.monotonic() - t0 < m * 60:
            time.sleep(1.0)
        if proc.poll() is not None:
            return
        pid = _locust_pid(proc.pid)
        if pid is not None:
            os.kill(pid, signal.SIGUSR1)
            print(
                f"[{time.strftime('%H:%M:%S')}] snapshot asked at {m:g} min (pid {pid})", flush=True
            )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=3.0)
    p.add_argument("--users", type=int, default=200, help="streams held open")
    p.add_argument("--protocol", default="mixed", choices=("sse", "ws", "mixed"))
    p.add_argument("--period-ms", type=float, default=20.0, help="one token every (50 tokens/s)")
    p.add_argument("--max-tokens", type=int, default=100, help="tokens per stream")
    p.add_argument(
        "--long", action="store_true", help="2 hours at 150 streams of 30 tokens at 10 tokens/s"
    )
    p.add_argument("--emitter-cpu", default="0")
    p.add_argument("--generator-cpu", default="1")
    p.add_argument("--out", type=Path, default=None, help="keep the results directory here")
    p.add_argument("--results", type=Path, default=None, help="write the table here (and .json)")
    p.add_argument("--trace", type=Path, default=None, metavar="DIR", help="tracemalloc dumps")
    p.add_argument("--trace-at", default="5,30", help="minutes of the dumps (with --trace)")
    p.add_argument(
        "--trace-frames", type=int, default=3, help="tracemalloc frames (0: counts only)"
    )
    p.add_argument(
        "--trace-collect",
        action="store_true",
        help="after each dump, a full collection that reports what was cyclic garbage",
    )
    p.add_argument(
        "--no-trim",
        action="store_true",
        help="the generator keeps its free heap pages (STREAMSLO_HEAP_TRIM_S=0: the old way)",
    )
    p.add_argument(
        "--table",
        type=Path,
        default=None,
        metavar="DIR",
        help="only print the row of a finished run's directory (with --minutes, --users)",
    )
    args = p.parse_args()
    if args.long:
        # Streams of 3 s: ~50 come and go every second (360,000 in the 2 hours), at a fifth of
        # a core; memory follows how many streams pass, not how fast their tokens come.
        args.minutes, args.users, args.period_ms, args.max_tokens = 120.0, 150, 100.0, 30
    rate = f"{1000.0 / args.period_ms:g}"
    if args.table is not None:
        print(table(args.table, args.users, args.minutes, rate))
        return
    work = Path(tempfile.mkdtemp(prefix="soak-bench-"))
    out = args.out or work / "run"
    slo = work / "slo.toml"
    slo.write_text('[thresholds]\nrequests = ["count>0"]\n')  # memory is the question here
    emitter, port = _start_emitter(work, args.emitter_cpu, args.period_ms)
    env = dict(os.environ)
    if args.no_trim:
        env["STREAMSLO_HEAP_TRIM_S"] = "0"
    if args.trace is not None:
        args.trace.mkdir(parents=True, exist_ok=True)
        env["STREAMSLO_MEMTRACE"] = str(args.trace.resolve())
        env["PYTHONPATH"] = os.pathsep.join(
            x for x in (str(BENCH / "_memtrace"), env.get("PYTHONPATH")) if x
        )
        env["STREAMSLO_MEMTRACE_FRAMES"] = str(args.trace_frames)
        if args.trace_collect:
            env["STREAMSLO_MEMTRACE_COLLECT"] = "1"
    try:
        cmd = [
            sys.executable,
            "-m",
            "streamslo",
            "run",
            "--host",
            f"http://127.0.0.1:{port}",
            "--out",
            str(out),
            "--model",
            "m",
            "--protocol",
            args.protocol,
            "--users",
            str(args.users),
            "--spawn-rate",
            str(max(1, args.users // 10)),
            "--duration",
            f"{args.minutes * 60:g}",
            "--max-tokens",
            str(args.max_tokens),
            "--window",
            "10s",
            "--drain",
            "10",
            "--generator-cpus",
            args.generator_cpu,
            "--slo",
            str(slo),
            "--allow-invalid",
            "--progress",
            "plain",
            "--progress-interval",
            "300",
            "--quiet",
        ]
        print(f"[{time.strftime('%H:%M:%S')}] {' '.join(cmd)}", flush=True)
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=REPO, env=env)
        if args.trace is not None:
            _trace_loop(proc, [float(x) for x in args.trace_at.split(",") if x], t0)
        rc = proc.wait()
        wall = time.monotonic() - t0
    finally:
        emitter.terminate()
        emitter.wait(timeout=20)
    print(f"\nexit {rc}, {wall:.0f} s wall, results in {out}")
    text = table(out, args.users, args.minutes, rate)
    print(text)
    if args.results is not None:
        args.results.parent.mkdir(parents=True, exist_ok=True)
        head = (
            f"`{' '.join(sys.argv)}` ({time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}, "
            f"{args.protocol}, {args.max_tokens}-token streams, results in {out})\n\n"
        )
        args.results.write_text(head + text + "\n")
        info = figures(out) | {
            "users": args.users,
            "minutes": args.minutes,
            "protocol": args.protocol,
            "tokens_per_s": float(rate),
            "max_tokens": args.max_tokens,
            "exit": rc,
            "wall_s": wall,
            "out": str(out),
        }
        args.results.with_suffix(".json").write_text(json.dumps(info, indent=1) + "\n")


if __name__ == "__main__":
    main()
