"""Flood: events per second per client core when the server sends every event of a response
as fast as it can (1,000 one-character events a response), streamslo beside the plain clients.

The paced bench (``bench_stream_users.py``) asks how many 50 tokens/s streams a core holds on
time; this one asks how fast a core takes events in when nothing paces them: the client's cost
per event, with reads that carry many events at once. Per cell (client x streams), side by side
in one run:

- ``bench/_emitter.py --flood`` pinned to core 0: each response is a head, a size-tag comment,
  1,000 chunked ``data:`` events of a one-character chat delta (each with its write epoch as
  ``id``), ``[DONE]``, all written at once, as fast as the socket takes them;
- one client process pinned to core 1, N streams back to back (closed loop) for ``--seconds``:
  ``streamslo SSE`` (``locust -f locustfiles/streaming_locustfile.py --max-tokens 1000``: every
  event framed, decoded, checked and timed), ``streamslo WS`` (its WebSocket user), ``asyncio
  raw`` (a bare line reader, no JSON), ``asyncio httpx`` and ``asyncio websockets`` (each event's
  JSON decoded), as in ``bench_stream_users.py``.

Figures: events received (streamslo: the ``tokens`` of its ``streams.csv``; the others: one
receive time per event), events per second over the load, the client's mean CPU (psutil, 0.5 s
samples) and **events per core-second** = events per second / the client's CPU share: what one
fully busy client core would take in. ``--baseline REV`` runs the streamslo rows on that
revision's code too (old against new in one run).

Run::

    python bench/bench_flood.py [--streams 10,50] [--seconds 10] [--baseline REV]
        [--clients "streamslo SSE,streamslo WS,asyncio raw,asyncio httpx,asyncio websockets"]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import bench_stream_users as su  # noqa: E402
from _harness import (  # noqa: E402
    fmt,
    md_table,
    prioritise,
    run_against_emitter,
    shown_command,
    workdir,
    write_result,
)

EVENTS = 1000
CLIENTS = ("streamslo SSE", "streamslo WS", "asyncio raw", "asyncio httpx", "asyncio websockets")
NAMES = {"streamslo SSE": "streamslo per-stream"}  # the paced bench's name for the same client


def _events(client: str, work: Path) -> int:
    """Events the client received over the run."""
    if client.startswith("streamslo"):
        import pandas as pd

        csv = work / "results" / "streams.csv"
        return int(pd.read_csv(csv)["tokens"].fillna(0).sum()) if csv.exists() else 0
    out = work / "client.json"
    if not out.exists():
        return 0
    return sum(len(s["recv"]) for s in json.loads(out.read_text()))


def run_cell(client: str, users: int, seconds: int, warmup: float, nice: int) -> dict[str, Any]:
    su.MAX_TOKENS = EVENTS  # the paced bench's client commands, asking for 1,000 events
    base, _, rev = client.partition(" @")
    name = NAMES.get(base, base) + (f" @{rev}" if rev else "")
    with workdir(f"flood-{users}") as work:
        cmd, env = su._client_cmd(name, "{url}", users, seconds, work)
        cwd = env.pop("STREAMSLO_BENCH_CWD", None)
        run = run_against_emitter(
            work, cmd, seconds, env=env, nice=nice, flood=True, cwd=Path(cwd) if cwd else None
        )
        events = _events(base, work)
        lo, hi = run.t_start + warmup, run.t_start + seconds
        cpu = run.sampler.mean_cpu("client", lo, hi)
        per_s = events / seconds
        res = {
            "client": client,
            "streams": users,
            "seconds": seconds,
            "rc": run.rc,
            "events": events,
            "events_per_s": per_s,
            "client_cpu_pct": cpu,
            "emitter_cpu_pct": run.sampler.mean_cpu("emitter", lo, hi),
            "events_per_core_s": per_s / (cpu / 100.0) if cpu else None,
            "responses_complete": sum(1 for s in run.emitted if s.get("done")),
        }
        if run.rc not in (0, None) or not events:
            res["log_tail"] = (work / "client.log").read_text()[-1500:]
    return res


def report(cells: list[dict[str, Any]]) -> str:
    rows = [
        [
            su._label(c["client"]),
            c["streams"],
            f"{c['events']:,}",
            f"{c['events_per_s']:,.0f}",
            fmt(c["client_cpu_pct"], 0),
            fmt(c["emitter_cpu_pct"], 0),
            "-" if c["events_per_core_s"] is None else f"{c['events_per_core_s']:,.0f}",
        ]
        for c in cells
    ]
    header = (
        "client",
        "streams",
        "events",
        "events/s",
        "client CPU %",
        "emitter CPU %",
        "events per core-second",
    )
    return md_table(header, rows, "lrrrrrr")


def render(data: dict[str, Any]) -> str:
    """The RESULTS.md section from ``flood.json``."""
    lines = [
        f"Command: `{data['command']}`",
        "",
        f"Each response: {EVENTS:,} one-character chat events, written at once; client on core 1, "
        "emitter on core 0. Events per core-second = events/s over the client's CPU share.",
        "",
        report(data["cells"]),
    ]
    lines += [f"- skipped: {note}" for note in data.get("skipped", [])]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--streams", default="10,50", help="concurrent streams, comma-separated")
    p.add_argument("--seconds", type=int, default=10, help="load seconds per cell")
    p.add_argument("--warmup", type=float, default=2.0, help="CPU averaged from here on")
    p.add_argument("--clients", default=",".join(CLIENTS), help="which clients, comma-separated")
    p.add_argument("--baseline", default="", help="a git revision: the streamslo rows on it too")
    p.add_argument("--nice", type=int, default=-5, help="emitter and client nice level")
    p.add_argument("--json", default="", help="default bench/results/flood.json")
    args = p.parse_args(argv)
    clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    for c in clients:
        if c not in CLIENTS:
            p.error(f"unknown client {c!r}; choose from {', '.join(CLIENTS)}")
    skipped = []
    for c in list(clients):
        mod = su.NEEDS.get(c)
        if mod is not None and importlib.util.find_spec(mod) is None:
            clients.remove(c)
            skipped.append(f"{c} (module {mod!r} not installed)")
    if args.baseline:
        clients = su.with_baseline(args.baseline, clients)
    cells = []
    t0 = time.time()
    for users in [int(x) for x in args.streams.split(",") if x.strip()]:
        for client in clients:
            c = run_cell(client, users, args.seconds, args.warmup, args.nice)
            cells.append(c)
            print(
                f"[{time.time() - t0:5.0f}s] {client} x{users}: {c['events_per_s']:,.0f} events/s, "
                f"cpu {fmt(c['client_cpu_pct'], 0)} %" + (f"\n{c.get('log_tail', '')}"),
                file=sys.stderr,
                flush=True,
            )
    table = report(cells)
    print(table)
    for note in skipped:
        print(f"- skipped: {note}")
    out = write_result(
        "flood",
        {
            "command": shown_command("bench_flood", argv).strip(),
            "cells": cells,
            "skipped": skipped,
            "table": table,
        },
        args.json or None,
    )
    print(f"\nwrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    prioritise()
    sys.exit(main())
