"""Does the load generator's memory stay flat over a long run? A compressed soak.

``streamslo run`` holds ``--users`` streams against a lean emitter (``bench/_soak_emitter.py``,
pinned to core 0; 100-token streams at 50 tokens/s, back to back) for ``--minutes``, the
generator pinned to core 1, with 10 s windows. The generator samples its own RSS every second
(``windows.csv`` ``gen_rss_mb``); finalize fits a Theil–Sen line with Sen's 95 % interval over
it, after leaving out the first tenth (warm-up), and gives a verdict (``docs/soak.md``).

Printed: windows, streams, RSS at start and end, the slope (MiB/h) with its interval, that of
the later half alone, the growth over the run, the verdict, and the generator's lag p99 and CPU
(a saturated generator would make the run invalid, not its memory wrong).

Run: ``python bench/bench_soak_memory.py`` (3 minutes at 200 streams) or
``python bench/bench_soak_memory.py --long`` (20 minutes at 300 streams).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent


def _start_emitter(work: Path) -> tuple[subprocess.Popen[bytes], int]:
    ready = work / "emitter.port"
    proc = subprocess.Popen(
        [
            "taskset",
            "-c",
            "0",
            sys.executable,
            str(BENCH / "_soak_emitter.py"),
            "--ready",
            str(ready),
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


def table(out: Path, users: int, minutes: float) -> str:
    """The benchmark's row (Markdown) for a finished results directory."""
    from streamslo.figures.drift import analyse
    from streamslo.results.layout import Layout
    from streamslo.run.windows_file import read_windows

    summary = json.loads((out / "summary.json").read_text())
    run = json.loads((out / "run.json").read_text())
    d = analyse(out, read_windows(Layout(out).windows_csv))["gen_rss_mb"]
    procs = [json.loads(p.read_text()) for p in sorted(Layout(out).procs_dir.glob("*.json"))]
    peak = max(p.get("rss_peak_mb") or 0 for p in procs) if procs else 0
    gen = run.get("generator") or {}
    return "\n".join(
        [
            "| streams held | minutes | windows | streams | RSS start → end (peak) MiB | slope MiB/h, 95 % CI | "
            "later half MiB/h, 95 % CI | growth over the fit | verdict | lag p99 ms | peak CPU % |",
            "| ---: | ---: | ---: | ---: | --- | --- | --- | ---: | --- | ---: | ---: |",
            f"| {users} | {minutes:g} | {summary['windows']['rows']} | {summary['requests']:,} | "
            f"{d['start']:.0f} → {d['end']:.0f} ({peak:.0f}) | {d['slope_per_h']:+.1f} [{d['ci_low_per_h']:+.1f}, "
            f"{d['ci_high_per_h']:+.1f}] | {d['late_slope_per_h']:+.1f} [{d['late_ci_low_per_h']:+.1f}, "
            f"{d['late_ci_high_per_h']:+.1f}] | {d['growth_pct']:+.1f} % | {d['verdict']} | "
            f"{gen.get('lag_p99_ms') or 0:.0f} | {gen.get('peak_cpu_percent') or 0:.0f} |",
        ]
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=3.0)
    p.add_argument("--users", type=int, default=200)
    p.add_argument("--long", action="store_true", help="20 minutes at 300 streams")
    p.add_argument("--out", type=Path, default=None, help="keep the results directory here")
    p.add_argument(
        "--table",
        type=Path,
        default=None,
        metavar="DIR",
        help="only print the row of a finished run's directory (with --minutes, --users)",
    )
    args = p.parse_args()
    if args.table is not None:
        print(table(args.table, args.users, args.minutes))
        return
    if args.long:
        args.minutes, args.users = 20.0, 300
    work = Path(tempfile.mkdtemp(prefix="soak-bench-"))
    out = args.out or work / "run"
    slo = work / "slo.toml"
    slo.write_text('[thresholds]\nrequests = ["count>0"]\n')  # memory is the question here
    emitter, port = _start_emitter(work)
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
            "--users",
            str(args.users),
            "--spawn-rate",
            str(max(1, args.users // 10)),
            "--duration",
            f"{args.minutes * 60:g}",
            "--max-tokens",
            "100",
            "--window",
            "10s",
            "--drain",
            "10",
            "--generator-cpus",
            "1",
            "--slo",
            str(slo),
            "--allow-invalid",
            "--progress",
            "plain",
            "--progress-interval",
            "60",
            "--quiet",
        ]
        t0 = time.monotonic()
        r = subprocess.run(cmd, cwd=REPO)
        wall = time.monotonic() - t0
    finally:
        emitter.terminate()
        emitter.wait(timeout=20)
    print(f"\nexit {r.returncode}, {wall:.0f} s wall, results in {out}")
    print(table(out, args.users, args.minutes))


if __name__ == "__main__":
    main()
