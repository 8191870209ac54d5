"""The load generator against the worst hostile servers (issue 9): peak RSS and CPU per stream.

For each case, one real ``streamslo run`` (the real Locust users, in a subprocess) against the
faulty server (``tests/faulty``), the case selected by the path prefix ``/s/<case>`` (so the
WebSocket handshake faults act on the handshake):

    streamslo run --host http://127.0.0.1:PORT/s/<case> --protocol sse|ws --users 12
        --duration 10s --stall-timeout 3 --request-timeout 8 --drain 10s

The Locust process (the generator) is sampled every 0.1 s with ``psutil``: its peak RSS, and
its CPU seconds (user + system) at the last sample before it exits (at most 0.1 s short).
``CPU/stream`` divides that by the rows of ``streams.csv``; it includes Locust's own start
(about 1 CPU second, spread over the case's streams), so it is an upper bound. ``ok`` is the
baseline: a correct server, the same run.

Goals (issue 9): the generator under 300 MB of RSS, no case above 1 s of CPU per stream, every
run ending within duration + drain + a few seconds, no stream ``cancelled``.

``--pythonpath DIR`` runs the generator from another source tree, to compare with an older
version: ``mkdir DIR && git archive <commit> streamslo | tar -x -C DIR``.

Run (about 8 minutes with the defaults)::

    python bench/bench_hostile.py [--cases a,b,...] [--protocols sse,ws] [--users 12]
        [--duration 10] [--json out.json] [--pythonpath DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.faulty.process import start_faulty_server  # noqa: E402

#: The worst cases, one per kind of harm: freeze, crash, memory, CPU, time; ``ok`` first (the
#: baseline) and the mix of every hostile case last.
CASES = (
    "ok",
    "giant_status",
    "interim_flood",
    "head_flood",
    "negative_chunk",
    "flood_after_done",
    "endless_line",
    "line_flood",
    "endless_event",
    "drip_line",
    "head_drip",
    "deep_json",
    "code_infinity",
    "error_body_flood",
    "mix_hostile",
)
RSS_GOAL_MB = 300.0
CPU_GOAL_S = 1.0


def _generator(run: psutil.Process) -> psutil.Process | None:
    """The Locust process under ``streamslo run``."""
    try:
        for child in run.children(recursive=True):
            if "locust" in " ".join(child.cmdline()):
                return child
    except psutil.Error:
        return None
    return None


def run_case(base_url: str, case: str, proto: str, args: argparse.Namespace) -> dict[str, Any]:
    """One ``streamslo run`` against ``/s/<case>``; the generator's peak RSS and CPU."""
    work = Path(tempfile.mkdtemp(prefix=f"hostile-{case}-{proto}-"))
    out = work / "run"
    cmd = [
        sys.executable,
        "-m",
        "streamslo",
        "run",
        "--host",
        f"{base_url}/s/{case}",
        "--protocol",
        proto,
        "--users",
        str(args.users),
        "--duration",
        f"{args.duration}s",
        "--stall-timeout",
        "3",
        "--request-timeout",
        "8",
        "--drain",
        "10s",
        "--out",
        str(out),
        "--quiet",
    ]
    env = dict(os.environ)
    cwd = str(REPO)
    if args.pythonpath:
        env["PYTHONPATH"] = args.pythonpath
        cwd = str(work)  # not the repository: its own streamslo/ would come first
    budget = args.duration + 10 + 60
    t0 = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    run = psutil.Process(proc.pid)
    gen: psutil.Process | None = None
    peak_rss = 0
    cpu = 0.0
    hung = False
    while proc.poll() is None:
        if time.monotonic() - t0 > budget:
            hung = True
            os.killpg(proc.pid, 9)  # the session this script started for this run, only
            break
        gen = gen or _generator(run)
        if gen is not None:
            try:
                with gen.oneshot():
                    peak_rss = max(peak_rss, gen.memory_info().rss)
                    t = gen.cpu_times()
                    cpu = t.user + t.system
            except psutil.Error:
                pass
        time.sleep(0.1)
    proc.wait()
    wall = time.monotonic() - t0
    outcomes: Counter[str] = Counter()
    streams = 0
    csv = out / "streams.csv"
    if csv.exists():
        import pandas as pd

        rows = pd.read_csv(csv)
        streams = len(rows)
        outcomes = Counter(rows["outcome"].astype(str))
    return {
        "case": case,
        "protocol": proto,
        "streams": streams,
        "outcomes": dict(outcomes),
        "peak_rss_mb": round(peak_rss / 2**20, 1),
        "cpu_s": round(cpu, 2),
        "cpu_per_stream_ms": round(1000 * cpu / streams, 1) if streams else None,
        "wall_s": round(wall, 1),
        "hung": hung,
    }


def _outcome_text(outcomes: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items(), key=lambda kv: -kv[1])) or "-"


def report(results: list[dict[str, Any]], duration: int) -> str:
    """The table, one row per case and protocol, then the verdict on the goals."""
    lines = [
        "| case | proto | streams | outcomes | peak RSS MB | CPU s | CPU/stream ms | wall s |",
        "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: |",
    ]
    for r in results:
        per = "-" if r["cpu_per_stream_ms"] is None else f"{r['cpu_per_stream_ms']:.1f}"
        wall = f"{r['wall_s']:.1f}" + (" (hung, killed)" if r["hung"] else "")
        lines.append(
            f"| {r['case']} | {r['protocol']} | {r['streams']} | {_outcome_text(r['outcomes'])} | "
            f"{r['peak_rss_mb']:.0f} | {r['cpu_s']:.1f} | {per} | {wall} |"
        )
    worst_rss = max(r["peak_rss_mb"] for r in results)
    per_stream = [r["cpu_per_stream_ms"] for r in results if r["cpu_per_stream_ms"] is not None]
    worst_cpu = max(per_stream) / 1000 if per_stream else float("nan")
    cancelled = sum(r["outcomes"].get("cancelled", 0) for r in results)
    slow = [
        f"{r['case']}/{r['protocol']}"
        for r in results
        if r["hung"] or r["wall_s"] > duration + 10 + 15
    ]
    # A run that wrote no row (hung, killed) has no CPU per stream: it fails the goal outright.
    empty = [f"{r['case']}/{r['protocol']}" for r in results if not r["streams"]]
    cpu_ok = worst_cpu < CPU_GOAL_S and not empty
    lines += [
        "",
        f"peak RSS {worst_rss:.0f} MB (goal < {RSS_GOAL_MB:.0f}): {'PASS' if worst_rss < RSS_GOAL_MB else 'FAIL'}",
        f"worst CPU per stream {worst_cpu:.3f} s (goal < {CPU_GOAL_S:.0f}): {'PASS' if cpu_ok else 'FAIL'}"
        + (f" (no stream recorded: {', '.join(empty)})" if empty else ""),
        f"streams cancelled: {cancelled}; runs past duration + drain + 15 s: {', '.join(slow) or 'none'}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--cases", default=",".join(CASES), help="faulty-server scenarios, comma-separated"
    )
    p.add_argument("--protocols", default="sse,ws")
    p.add_argument("--users", type=int, default=12)
    p.add_argument("--duration", type=int, default=10, help="seconds of load per run")
    p.add_argument("--json", default="", help="also write the results here")
    p.add_argument("--pythonpath", default="", help="run the generator from this source tree")
    args = p.parse_args(argv)
    results = []
    with start_faulty_server(quiet=True) as server:
        for case in [c.strip() for c in args.cases.split(",") if c.strip()]:
            for proto in [x.strip() for x in args.protocols.split(",") if x.strip()]:
                r = run_case(server.base_url, case, proto, args)
                print(
                    f"{case:18} {proto:3} streams={r['streams']:5} rss={r['peak_rss_mb']:6.1f} MB "
                    f"cpu={r['cpu_s']:5.1f} s wall={r['wall_s']:5.1f} s {_outcome_text(r['outcomes'])}",
                    flush=True,
                )
                results.append(r)
    print()
    print(report(results, args.duration))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
