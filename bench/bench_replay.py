"""Replay, hang-ups and the prefix cache, measured on the bundled server (issue 20's done-when).

1. The 2-minute Mooncake-shaped excerpt (``tests/replay/data/mooncake_excerpt.jsonl``, with
   bursts) replayed at 1x: every start's lateness (``schedule_lag_ms``) p50 / p99 / max; the goal
   is p99 within 5 ms of its scheduled offset.
2. The same trace at 2x: arrivals per second over the span, against 1x (the goal: double).
3. ``--cancel-rate 0.2 --cancel-after 20tok`` against a run without hang-ups: the share of
   ``client_cancelled`` (goal 20 % ± 3 %) and every failure rate, side by side; the freed check
   on the fixed server and on ``--fault leak-cancelled``.
4. ``--prefix-groups 4``: the summary's cache hit rate against the server's own counters, and
   TTFT of hits against misses.

Usage: ``python bench/bench_replay.py [--json bench/results/replay.json] [--quick]`` (``--quick``:
a 20-second excerpt and short runs, for a smoke test). Prints the Markdown table at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from streamslo.run.evidence import parse_prometheus
from streamslo.server.bundled import BundledServer

REPO = Path(__file__).resolve().parents[1]
EXCERPT = REPO / "tests" / "replay" / "data" / "mooncake_excerpt.jsonl"


def _run(host: str, out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [
        sys.executable,
        "-m",
        "streamslo",
        "run",
        "--host",
        host,
        "--out",
        str(out),
        "--allow-invalid",
        "--quiet",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=REPO)


def _metrics(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url + "/metrics", timeout=5) as r:
        return parse_prometheus(r.read().decode())


def _summary(out: Path) -> dict[str, Any]:
    return dict(json.loads((out / "summary.json").read_text()))


def replay(host: str, trace: Path, speed: float, out: Path) -> dict[str, Any]:
    r = _run(host, out, "--trace", str(trace), "--trace-speed", f"{speed:g}", "--drain", "10")
    s = pd.read_csv(out / "streams.csv")
    lag = s["schedule_lag_ms"].to_numpy(dtype=float)
    sched = s["scheduled_at"].to_numpy(dtype=float)
    span = float(sched.max() - sched.min())
    summary = _summary(out)
    return {
        "speed": speed,
        "rc": r.returncode,
        "requests": len(s),
        "ok": int((s["outcome"] == "ok").sum()),
        "span_s": round(span, 3),
        "arrivals_per_s": round((len(s) - 1) / span, 4) if span else None,
        "lag_p50_ms": round(float(np.percentile(lag, 50)), 3),
        "lag_p99_ms": round(float(np.percentile(lag, 99)), 3),
        "lag_max_ms": round(float(lag.max()), 3),
        "within_5ms": round(float((lag <= 5.0).mean()), 4),
        "dropped": summary.get("dropped_iterations", 0),
        "valid": summary.get("valid"),
    }


def cancels(host: str, out: Path, duration: str) -> dict[str, Any]:
    common = [
        "--users",
        "16",
        "--duration",
        duration,
        "--max-tokens",
        "64",
        "--protocol",
        "mixed",
        "--drain",
        "10",
    ]
    res: dict[str, Any] = {}
    for name, extra in (
        ("control", []),
        ("cancel", ["--cancel-rate", "0.2", "--cancel-after", "20tok"]),
    ):
        d = out / name
        r = _run(host, d, *common, *extra)
        s = _summary(d)
        res[name] = {
            "rc": r.returncode,
            "requests": s["requests"],
            "outcomes": {k: v for k, v in s["outcomes"].items() if v},
            "truncation_rate": s["truncation_rate"],
            "error_rate": s["error_rate"],
            "http_5xx_rate": s["http_5xx_rate"],
            "client_cancelled": s.get("client_cancelled"),
            "server_freed": s.get("server_freed"),
        }
    return res


def leak(out: Path, duration: str) -> dict[str, Any]:
    with BundledServer(
        ["--mode", "fixed", "--fault", "leak-cancelled", "--graceful-timeout", "1"],
        out.parent / "leak.log",
    ) as srv:
        srv.wait_ready()
        r = _run(
            srv.url,
            out,
            "--users",
            "8",
            "--duration",
            duration,
            "--max-tokens",
            "64",
            "--cancel-rate",
            "0.2",
            "--cancel-after",
            "20tok",
            "--cancel-check",
            "5s",
            "--drain",
            "10",
        )
        return {"rc": r.returncode, "server_freed": _summary(out).get("server_freed")}


def prefix(host: str, out: Path, duration: str) -> dict[str, Any]:
    before = _metrics(host)
    r = _run(
        host,
        out,
        "--users",
        "8",
        "--duration",
        duration,
        "--max-tokens",
        "16",
        "--prefix-groups",
        "4",
        "--prefix-tokens",
        "800",
        "--drain",
        "10",
    )
    after = _metrics(host)
    pc = _summary(out)["prefix_cache"]
    hits = after["streamslo_prefix_cache_hits_total"] - before["streamslo_prefix_cache_hits_total"]
    queries = (
        after["streamslo_prefix_cache_queries_total"]
        - before["streamslo_prefix_cache_queries_total"]
    )
    return {
        "rc": r.returncode,
        "summary_hit_rate": pc["hit_rate"],
        "server_hit_rate": hits / queries if queries else None,
        "summary_cached_tokens": pc["cached_tokens"],
        "server_hits": hits,
        "streams": pc["streams"],
        "streams_hit": pc["streams_hit"],
        "ttft_p50_hit_ms": pc["ttft_ms_hit"]["p50"],
        "ttft_p50_miss_ms": pc["ttft_ms_miss"]["p50"],
        "ttft_p99_hit_ms": pc["ttft_ms_hit"]["p99"],
        "ttft_p99_miss_ms": pc["ttft_ms_miss"]["p99"],
    }


def render(data: dict[str, Any]) -> str:
    rows = ["| measurement | value |", "| --- | --- |"]
    for rp in data["replay"]:
        rows.append(
            f"| replay {rp['speed']:g}x: requests / dropped | {rp['requests']} / {rp['dropped']} |"
        )
        rows.append(
            f"| replay {rp['speed']:g}x: schedule lag p50 / p99 / max (ms) | "
            f"{rp['lag_p50_ms']} / {rp['lag_p99_ms']} / {rp['lag_max_ms']} |"
        )
        rows.append(f"| replay {rp['speed']:g}x: arrivals/s | {rp['arrivals_per_s']} |")
    if len(data["replay"]) == 2:
        rows.append(
            f"| 2x / 1x arrivals per second | {data['replay'][1]['arrivals_per_s'] / data['replay'][0]['arrivals_per_s']:.3f} |"
        )
    c = data["cancel"]
    cc = c["cancel"]["client_cancelled"] or {}
    rows.append(
        f"| client_cancelled share (goal 20 % ± 3 %) | {100 * (cc.get('fraction') or 0):.1f} % of {c['cancel']['requests']} |"
    )
    for k in ("truncation_rate", "error_rate", "http_5xx_rate"):
        rows.append(f"| {k}: control / with hang-ups | {c['control'][k]} / {c['cancel'][k]} |")
    rows.append(
        f"| freed check, fixed server | {(c['cancel']['server_freed'] or {}).get('passed')} |"
    )
    rows.append(
        f"| freed check, leak-cancelled | {(data['leak']['server_freed'] or {}).get('passed')} (exit {data['leak']['rc']}) |"
    )
    load = data.get("load_average_end") or data.get("load_average_during")
    if load:
        rows.append(
            f"| machine load average (1, 5, 15 min; {data.get('cpus')} cores) | {', '.join(map(str, load))} |"
        )
    p = data["prefix"]
    rows.append(
        f"| prefix groups 4: hit rate summary / server | {p['summary_hit_rate']:.4f} / {p['server_hit_rate']:.4f} |"
    )
    rows.append(
        f"| prefix groups 4: TTFT p50 hit / miss (ms) | {p['ttft_p50_hit_ms']:.1f} / {p['ttft_p50_miss_ms']:.1f} |"
    )
    text = "\n".join(rows)
    return text + (f"\n\n{data['note']}" if data.get("note") else "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default=str(REPO / "bench" / "results" / "replay.json"))
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-replay-") as tmp:
        t = Path(tmp)
        trace = EXCERPT
        if args.quick:
            trace = t / "excerpt.jsonl"
            trace.write_text(
                "".join(ln for ln in EXCERPT.open() if json.loads(ln)["timestamp"] <= 20_000)
            )
        duration = "8" if args.quick else "40"
        started = time.time()
        load_start = [round(x, 2) for x in os.getloadavg()]
        with BundledServer(["--mode", "fixed", "--max-streams", "256"], t / "server.log") as srv:
            srv.wait_ready()
            data: dict[str, Any] = {
                "command": "python bench/bench_replay.py" + (" --quick" if args.quick else ""),
                "trace": str(trace.relative_to(REPO) if trace.is_relative_to(REPO) else trace.name),
            }
            data["replay"] = [
                replay(srv.url, trace, 1.0, t / "r1"),
                replay(srv.url, trace, 2.0, t / "r2"),
            ]
            data["cancel"] = cancels(srv.url, t / "cancel", duration)
            data["prefix"] = prefix(srv.url, t / "prefix", duration)
        data["leak"] = leak(t / "leak", "8")
        data["wall_s"] = round(time.time() - started, 1)
        data["load_average_start"] = load_start
        data["cpus"] = os.cpu_count()
    data["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(data, indent=2) + "\n")
    print(render(data))


if __name__ == "__main__":
    main()
