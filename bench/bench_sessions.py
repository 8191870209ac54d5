"""Agentic sessions on the bundled server: how late each step starts after its dependencies
allowed it (issue 26's done-when: 100 concurrent sessions of 8 steps with fan-out 2, schedule lag
per step p99 under 5 ms on a quiet machine), and how the sessions and their steps went.

The server is pinned to core 0 and the load generator to core 1 (``taskset``), the bundled
server in its fixed mode (``--max-streams 512``: a session's branches run at once). Each step
asks 32 tokens at the server's 20 ms a token, the tool time between steps is 0.2-1.0 s, so about
150 streams are open at once.

Usage: ``python bench/bench_sessions.py [--sessions 100] [--duration 60s] [--json FILE]``;
prints a Markdown table (schedule lag of the steps that waited on parents; session success,
end-to-end time, steps; TTFT and the prefix cache's hit rate by depth).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from streamslo.server.bundled import BundledServer

REPO = Path(__file__).resolve().parents[1]


def run(sessions: int, duration: str, work: Path) -> dict[str, Any]:
    out = work / "run"
    with BundledServer(
        ["--mode", "fixed", "--max-streams", "512"], work / "server.log", cpus="0"
    ) as srv:
        srv.wait_ready()
        cmd = [
            "taskset", "-c", "1", sys.executable, "-m", "streamslo", "run",
            "--host", srv.url, "--out", str(out), "--allow-invalid", "--quiet",
            "--sessions", "synthetic", "--session-steps", "8", "--session-fanout", "2",
            "--tool-time", "uniform:0.2,1.0", "--users", str(sessions),
            "--duration", duration, "--max-tokens", "32",
        ]  # fmt: skip
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, cwd=REPO)
    if not (out / "streams.csv").exists():
        raise SystemExit(f"the run wrote no streams (rc {r.returncode}):\n{r.stdout}\n{r.stderr}")
    s = pd.read_csv(out / "streams.csv")
    summary = json.loads((out / "summary.json").read_text())
    waited = s[s["wait_ms"].notna()]
    lag = waited["schedule_lag_ms"].to_numpy(dtype=float)
    s["hit"] = s["cached_tokens"] / s["usage_prompt_tokens"]
    by_depth = s.groupby("depth").agg(
        steps=("stream_id", "size"),
        ttft_p50=("ttft_ms", "median"),
        prompt=("usage_prompt_tokens", "mean"),
        hit=("hit", "mean"),
    )
    return {
        "rc": r.returncode,
        "streams": len(s),
        "ok": int((s["outcome"] == "ok").sum()),
        "lag_steps": len(lag),
        "lag_p50_ms": round(float(np.percentile(lag, 50)), 3),
        "lag_p99_ms": round(float(np.percentile(lag, 99)), 3),
        "lag_max_ms": round(float(lag.max()), 3),
        "sessions": summary.get("sessions"),
        "by_depth": {
            int(str(d)): {str(k): round(float(v), 3) for k, v in row.items()}
            for d, row in by_depth.iterrows()
        },
        "load_generator_cpu": summary.get("generator", {}),
    }


def table(res: dict[str, Any]) -> str:
    ss = res["sessions"] or {}
    lines = [
        "| measure | value |",
        "| --- | --- |",
        f"| streams (ok) | {res['streams']} ({res['ok']}) |",
        f"| schedule lag of steps after their parents, p50 / p99 / max | {res['lag_p50_ms']} / "
        f"{res['lag_p99_ms']} / {res['lag_max_ms']} ms ({res['lag_steps']} steps) |",
        f"| sessions ended (whole) | {ss.get('sessions')} ({ss.get('whole')}) |",
        f"| session e2e p50 / p99 | {ss.get('e2e_ms', {}).get('p50', 0):.0f} / "
        f"{ss.get('e2e_ms', {}).get('p99', 0):.0f} ms |",
        f"| share of session time in tools | {(ss.get('tool_share') or 0):.1%} |",
        "",
        "| depth | steps | TTFT p50 (ms) | prompt tokens (mean) | prefix cache hit rate |",
        "| ---: | ---: | ---: | ---: | ---: |",
    ]
    for d, row in res["by_depth"].items():
        lines.append(
            f"| {d} | {row['steps']:.0f} | {row['ttft_p50']:.1f} | {row['prompt']:.0f} | "
            f"{row['hit']:.1%} |"
        )
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--sessions", type=int, default=100, help="sessions in flight")
    p.add_argument("--duration", default="60s")
    p.add_argument("--json", default="", help="write the results here")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-sessions-") as tmp:
        res = run(args.sessions, args.duration, Path(tmp))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2))
    print(table(res))
    return 0 if res["rc"] in (0, 99) else 1


if __name__ == "__main__":
    raise SystemExit(main())
