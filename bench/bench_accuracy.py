"""How accurately streamslo measures TTFT and ITL: its figures against a known schedule.

The lean emitter (``bench/_emitter.py``, core 0) answers every request on a fixed schedule: the
first token ``--ttft-ms`` after the request arrived, then one token every ``--period-ms``
(absolute times, no drift), and logs the epoch of every write. The real suite (``python -m
locust -f locustfiles/streaming_locustfile.py --results-dir ...``, core 1, every user spawned
at once) runs N streams against it; each results row is tied to the emitter stream it read
(``bench/_harness.py``: by body size and request time). Per complete stream after warm-up:

- **TTFT error** = the row's ``ttft_ms`` − (first write − request arrival at the emitter);
- **ITL error** = each gap of ``gaps.parquet`` − (the two writes' difference);

so the emitter's own jitter cancels out: what is left is what the generator adds (reading late,
timestamping late). The same errors against the nominal schedule (``ttft_ms`` − the set
delay, gap − the period) are shown too: they add the emitter's jitter, which on a shared machine
is most of it. Goal (issue 12): |error| p50 < 1 ms and p99 < 5 ms up to the capacity level; the
largest error is reported as it is.

Also per cell: the generator's own figures from ``run.json`` (greenlet lag p99 and max, when the
worst lag happened) and, with ``--monitor``, gevent's blocking monitor
(``GEVENT_MONITOR_THREAD_ENABLE``, ``GEVENT_MAX_BLOCKING_TIME``): every greenlet that held the
loop longer than the limit, with its stack, counted by the innermost frame of the suite or
library code that was running.

Run::

    python bench/bench_accuracy.py [--levels 16,100,250,500] [--seconds 15] [--ttft-ms 100]
        [--protocols sse,ws] [--monitor 0.015]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import (
    SchedWatch,
    fmt,
    locust_cmd,
    match_streamslo,
    md_table,
    pct,
    prioritise,
    run_against_emitter,
    shown_command,
    workdir,
    write_result,
)

MAX_TOKENS = 100
GOAL_P50_MS = 1.0
GOAL_P99_MS = 5.0


def cat(parts: list[Any]) -> Any:
    """The arrays of ``parts`` end to end (an empty array for none)."""
    import numpy as np

    return np.concatenate(parts) if parts else np.array([])


def _abs_stats(errs: Any) -> dict[str, float | None]:
    import numpy as np

    a = np.abs(np.asarray(errs, dtype=float))
    return {
        "p50": pct(a, 50),
        "p99": pct(a, 99),
        "max": float(a.max()) if len(a) else None,
        "n": len(a),
    }


def errors(
    streams: list[dict[str, Any]],
    period_ms: float,
    ttft_ms: float,
    cut: float,
    sched: SchedWatch | None = None,
    sched_emitter: SchedWatch | None = None,
) -> dict[str, Any]:
    """TTFT and ITL errors (ms) of the matched complete streams that started after ``cut``;
    the largest ITL errors with the generator's run-queue wait in their gap (``sched``)."""
    import numpy as np

    ttft_w, ttft_s, itl_w, itl_s, calm, unexplained = [], [], [], [], [], []
    trip, first_late, late = [], [], []
    top: list[tuple[float, str, int, float, float]] = []
    for s in streams:
        if not s["done"] or s["t0"] < cut or "ttft_ms" not in s:
            continue
        w = np.asarray(s["emit"], dtype=float)
        ttft_w.append(s["ttft_ms"] - (w[0] - s["t_req"]) * 1000.0)
        # TTFT's error against the writes is two parts: the request's trip (the suite's start
        # stamp to the emitter's read of the request) and the first token's time in the
        # generator before its stamp (its receive stamp minus its write).
        trip.append((s["t_req"] - s["t0"]) * 1000.0)
        recv_all = np.asarray(s["recv"], dtype=float)
        first_late.append((recv_all[0] - w[0]) * 1000.0)
        late.append((recv_all - w) * 1000.0)
        ttft_s.append(s["ttft_ms"] - ttft_ms)
        gaps = np.asarray(s["gaps_ms"], dtype=float)
        if len(gaps):
            e = gaps - np.diff(w) * 1000.0
            itl_w.append(e)
            itl_s.append(gaps - period_ms)
            if sched is not None and sched_emitter is not None:
                # Gaps during which neither the generator nor the emitter waited for a CPU
                # (< 1 ms of run-queue wait each, from the first write to the second read):
                # what is left is the generator's own error.
                recv = np.asarray(s["recv"], dtype=float)
                waited = np.maximum(
                    sched.waits(w[:-1], recv[1:]), sched_emitter.waits(w[:-1], recv[1:])
                )
                calm.append(e[waited < 0.001])
                # What no run-queue wait explains: |error| beyond the longer of the two waits.
                unexplained.append(np.maximum(0.0, np.abs(e) - waited * 1000.0))
            for k in np.argsort(-np.abs(e))[:3]:
                top.append(
                    (float(e[k]), s["stream_id"], int(k) + 1, s["recv"][k], s["recv"][k + 1])
                )
    return {
        "streams": len(ttft_w),
        "ttft_vs_writes": _abs_stats(ttft_w),
        "ttft_request_trip": _abs_stats(trip),
        "ttft_first_token_late": _abs_stats(first_late),
        "token_late": _abs_stats(cat(late)),
        "itl_vs_writes": _abs_stats(cat(itl_w)),
        "ttft_vs_schedule": _abs_stats(ttft_s),
        "itl_vs_schedule": _abs_stats(cat(itl_s)),
        "itl_vs_writes_undisturbed": _abs_stats(cat(calm)),
        "itl_unexplained": _abs_stats(cat(unexplained)),
        "worst_itl_errors": [
            {
                "ms": e,
                "stream_id": sid,
                "gap_index": k,
                "at": t1,
                "runqueue_wait_ms": (
                    None
                    if sched is None or (waited := sched.waited(t0, t1)) is None
                    else waited * 1000.0
                ),
                "ran_ms": (
                    None if sched is None or (r := sched.ran(t0, t1)) is None else r * 1000.0
                ),
                "emitter_runqueue_wait_ms": (
                    None
                    if sched_emitter is None or (we := sched_emitter.waited(t0, t1)) is None
                    else we * 1000.0
                ),
            }
            for e, sid, k, t0, t1 in sorted(top, key=lambda x: -abs(x[0]))[:5]
        ],
    }


_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


def monitor_reports(log_text: str) -> dict[str, Any]:
    """gevent's blocking-monitor reports in a client log: how many, and where (the innermost
    frame of each report's blocked greenlet, outside gevent's own hub)."""
    blocks = log_text.split("=============")
    where: Counter[str] = Counter()
    n = 0
    for b in blocks:
        if "appears to be blocked" not in b:
            continue
        n += 1
        frames = [
            m for m in _FRAME.findall(b) if "/gevent/" not in m[0] and "threading.py" not in m[0]
        ]
        if frames:
            f, line, fn = frames[-1]
            where[f"{Path(f).name}:{line} {fn}"] += 1
    return {"reports": n, "where": dict(where.most_common(8))}


def run_cell(
    protocol: str,
    users: int,
    seconds: int,
    period_ms: float,
    ttft_ms: float,
    warmup: float,
    monitor: float | None,
    keep: bool,
    nice: int,
    locustfile: str = "locustfiles/streaming_locustfile.py",
) -> dict[str, Any]:
    import os

    with workdir(f"acc-{protocol}-{users}", keep) as work:
        env = dict(os.environ)
        if monitor:
            env["GEVENT_MONITOR_THREAD_ENABLE"] = "true"
            env["GEVENT_MAX_BLOCKING_TIME"] = str(monitor)
        cmd = locust_cmd(
            "{url}",
            users,
            seconds,
            "-f",
            locustfile,
            "--results-dir",
            str(work / "results"),
            "--max-tokens",
            str(MAX_TOKENS),
            "--protocol",
            protocol,
        )
        run = run_against_emitter(
            work, cmd, seconds, env=env, nice=nice, period_ms=period_ms, ttft_ms=ttft_ms, sched=True
        )
        results = work / "results"
        res: dict[str, Any] = {
            "protocol": protocol,
            "users": users,
            "seconds": seconds,
            "rc": run.rc,
        }
        if not (results / "run.json").exists():
            res["log_tail"] = (work / "client.log").read_text()[-1500:]
            return res
        streams, unmatched, _ = match_streamslo(results, run.emitted)
        t_first = min((s["t_req"] for s in run.emitted), default=run.t_start)
        res.update(
            errors(streams, period_ms, ttft_ms, t_first + warmup, run.sched, run.sched_emitter)
        )
        if run.sched is not None and run.sched_emitter is not None:
            res["client_runqueue_wait_s"] = run.sched.total()
            res["emitter_runqueue_wait_s"] = run.sched_emitter.total()
        runj = json.loads((results / "run.json").read_text())
        gen = runj.get("generator") or runj.get("validity", {}).get("generator") or {}
        per = (gen.get("per_process") or [{}])[0]
        res.update(
            unmatched=unmatched,
            lag_p99_ms=per.get("lag_p99_ms"),
            lag_max_ms=per.get("lag_max_ms"),
            lag_worst_at_s=per.get("lag_worst_at_s"),
            client_cpu_pct=run.sampler.mean_cpu("client", t_first + warmup, time.time()),
            client_preempt_per_s=run.sampler.rate("client", t_first + warmup, time.time()),
            emitter_preempt_per_s=run.sampler.rate("emitter", t_first + warmup, time.time()),
        )
        if monitor:
            res["monitor"] = monitor_reports((work / "client.log").read_text(errors="replace"))
    return res


def _verdict(c: dict[str, Any]) -> str:
    if not c["itl_vs_writes"]["n"]:
        return "nothing measured"
    ok = all(
        (c[k]["p50"] or 0) < GOAL_P50_MS and (c[k]["p99"] or 0) < GOAL_P99_MS
        for k in ("ttft_vs_writes", "itl_vs_writes")
    )
    return "✓" if ok else "✗"


def _pair(c: dict[str, Any], key: str) -> str:
    v = c.get(key)
    return "-" if not v else f"{fmt(v['p50'], 2)} / {fmt(v['p99'], 2)}"


def render(data: dict[str, Any]) -> str:
    """The Markdown section of ``bench/RESULTS.md`` from this bench's JSON."""
    rows = []
    for c in data["cells"]:
        if "ttft_vs_writes" not in c:
            rows.append([c["protocol"], c["users"], "failed", *["-"] * 12])
            continue
        t, i, ts, its = (
            c["ttft_vs_writes"],
            c["itl_vs_writes"],
            c["ttft_vs_schedule"],
            c["itl_vs_schedule"],
        )
        rows.append(
            [
                c["protocol"],
                c["users"],
                c["streams"],
                f"{fmt(t['p50'], 2)} / {fmt(t['p99'], 2)} / {fmt(t['max'], 1)}",
                f"{fmt(i['p50'], 2)} / {fmt(i['p99'], 2)} / {fmt(i['max'], 1)}",
                _verdict(c),
                f"{fmt(ts['p50'], 2)} / {fmt(ts['p99'], 1)}",
                f"{fmt(its['p50'], 2)} / {fmt(its['p99'], 1)} / {fmt(its['max'], 1)}",
                _pair(c, "token_late"),
                _pair(c, "ttft_request_trip"),
                _pair(c, "ttft_first_token_late"),
                f"{fmt(c.get('lag_p99_ms'), 1)} / {fmt(c.get('lag_max_ms'), 1)}",
                fmt(c.get("client_cpu_pct"), 0),
                f"{fmt(c.get('client_preempt_per_s'), 0)}, {fmt(c.get('emitter_preempt_per_s'), 0)}",
                (c.get("monitor") or {}).get("reports", "-"),
            ]
        )
    head = (
        f"Command: `{data['command']}`\n\nSchedule: first token {data['ttft_ms']:g} ms after the request, "
        f"then one every {data['period_ms']:g} ms; {MAX_TOKENS} tokens. |error| in ms as p50 / p99 / max. "
        f"Goal: p50 < {GOAL_P50_MS:g} ms and p99 < {GOAL_P99_MS:g} ms against the emitter's writes. "
        "A token's time in the generator before its stamp: its receive stamp minus the "
        "emitter's write (issue 21: p50 < 0.5 ms, p99 < 2 ms at 250 streams); TTFT's error "
        "against the writes is the request's trip (the suite's start stamp to the emitter's "
        "read of the request) plus the first token's time before its stamp.\n\n"
    )
    table = md_table(
        [
            "protocol",
            "streams",
            "measured",
            "TTFT err vs writes",
            "ITL err vs writes",
            "goal",
            "TTFT err vs schedule p50/p99",
            "ITL err vs schedule",
            "token's time in the generator before its stamp p50 / p99",
            "TTFT part 1: request trip p50 / p99",
            "TTFT part 2: first token's time before its stamp p50 / p99",
            "generator lag p99 / max ms",
            "client CPU %",
            "preempted/s client, emitter",
            "blocking reports",
        ],
        rows,
        "llr" + "l" * 12,
    )
    notes = []
    for c in data["cells"]:
        m = c.get("monitor")
        if m and m.get("where"):
            where = "; ".join(f"{k} ×{v}" for k, v in m["where"].items())
            notes.append(f"- {c['protocol']} @ {c['users']}: blocked greenlets at {where}")
        worst = c.get("worst_itl_errors") or []
        if worst:
            parts = [
                f"{w['ms']:+.1f} ms (run-queue wait {fmt(w['runqueue_wait_ms'], 1)} ms)"
                for w in worst[:3]
            ]
            notes.append(f"- {c['protocol']} @ {c['users']}: largest ITL errors {', '.join(parts)}")
    return head + table + ("\n\n" + "\n".join(notes) if notes else "")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--levels", default="16,100,250,500")
    p.add_argument("--protocols", default="sse,ws")
    p.add_argument("--seconds", type=int, default=15)
    p.add_argument("--warmup", type=float, default=2.5)
    p.add_argument("--period-ms", type=float, default=20.0)
    p.add_argument("--ttft-ms", type=float, default=100.0)
    p.add_argument(
        "--monitor",
        type=float,
        default=None,
        help="run gevent's blocking monitor with this limit (seconds) and count its reports",
    )
    p.add_argument(
        "--locustfile",
        default="locustfiles/streaming_locustfile.py",
        help="the locustfile (a wrapper of the suite's, to instrument it)",
    )
    p.add_argument("--json", default="", help="default bench/results/accuracy.json")
    p.add_argument("--keep", action="store_true")
    p.add_argument("--nice", type=int, default=-5)
    args = p.parse_args(argv)
    cells = []
    for users in [int(x) for x in args.levels.split(",") if x.strip()]:
        for proto in [x.strip() for x in args.protocols.split(",") if x.strip()]:
            c = run_cell(
                proto,
                users,
                args.seconds,
                args.period_ms,
                args.ttft_ms,
                args.warmup,
                args.monitor,
                args.keep,
                args.nice,
                args.locustfile,
            )
            cells.append(c)
            print(
                f"{proto} @ {users}: itl {c.get('itl_vs_writes')} ttft {c.get('ttft_vs_writes')} "
                f"lag max {c.get('lag_max_ms')} {c.get('monitor', '')}{c.get('log_tail', '')}",
                file=sys.stderr,
                flush=True,
            )
    data = {
        "command": shown_command("bench_accuracy", argv),
        "cells": cells,
        "period_ms": args.period_ms,
        "ttft_ms": args.ttft_ms,
    }
    print(render(data))
    print(f"\nwrote {write_result('accuracy', data, args.json or None)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    prioritise()
    sys.exit(main())
