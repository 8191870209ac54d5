"""Scale-out: one Locust worker process against two (``streamslo run --processes 1|2``), the
same streams against the lean emitter, side by side in one run; and the master's own CPU per
stream record.

Per cell (processes x streams): ``bench/_emitter.py`` on core 0 (50 tokens/s, 100-token streams
back to back, as in ``bench_stream_users.py``) and ``streamslo run --processes P --users N``:

- ``P = 1``: one Locust process (``--processes 1`` runs no master), pinned to core 1;
- ``P = 2``: a master and two workers on cores 0 and 1 — **this machine has two cores, so
  the emitter shares a core with the load generator**: a second worker here buys at most the
  part of core 0 the emitter leaves idle, and the emitter's own lateness is shown beside each
  cell. On a machine with a core per worker the second process would add a whole core.

``--layout shared`` measures scaling on this machine instead: **the whole system on P cores**,
so each configuration gives the same share of a core to emitting and to generating. ``P = 1``:
one emitter and ``--processes 1`` both on core 0; ``P = 2``: two emitters on one port
(``SO_REUSEPORT``, streams numbered apart so their size tags stay distinct), one pinned to each
core, and ``--processes 2`` free on both. The ratio of the two capacities (the highest level held
within the bound, every lower level held too; ``--stop-after-fail`` skips the rest) is what a
second process and a second core buy together, the master's work included.

Lateness = receive time (the master's merged ``streams.csv``/``gaps.parquet``: every worker's
records reach it over Locust messaging) − the emitter's write time of the same token, over the
complete streams started after warm-up. The master and workers are told apart by the process
tree (``streamslo run`` → Locust master → workers); the **master's CPU per record** is its CPU
seconds over the run / the records it wrote (everything it does: Locust's own stats, the relay's
ingest, the writer; an upper bound). The relay's isolated ingest cost per record (decode +
write, no Locust) comes from ``bench/bench_relay.py``'s encodings benchmark, run here for the
same record shape, so both figures sit side by side.

Run::

    python bench/bench_scaleout.py [--levels 150,300] [--processes 1,2] [--seconds 15]
        [--layout split|shared] [--stop-after-fail]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import (
    REPO,
    fmt,
    match_streamslo,
    md_table,
    prioritise,
    shown_command,
    stop,
    workdir,
    write_result,
)

MAX_TOKENS = 100
BOUND_MS = 10.0


class TreeSampler:
    """CPU seconds of a ``streamslo run`` process tree by role (``master``: the Locust process
    it started; ``workers``: that process's children), the last value seen for each pid."""

    def __init__(self, pid: int) -> None:
        import psutil

        self.root = psutil.Process(pid)
        self.cpu: dict[int, tuple[str, float]] = {}

    def sample(self) -> None:
        import psutil

        try:
            masters = [c for c in self.root.children() if "locust" in " ".join(c.cmdline())]
        except psutil.Error:
            return
        for m in masters:
            try:
                procs = [("master", m), *(("worker", w) for w in m.children())]
                for role, p in procs:
                    t = p.cpu_times()
                    self.cpu[p.pid] = (role, t.user + t.system)
            except psutil.Error:
                continue

    def seconds(self, role: str) -> list[float]:
        return [s for r, s in self.cpu.values() if r == role]


def run_cell(
    processes: int, users: int, seconds: int, warmup: float, keep: bool, layout: str = "split"
) -> dict[str, Any]:
    """One ``streamslo run --processes P`` at ``users`` streams against fresh emitters
    (``layout``: see the module's text)."""
    import subprocess

    import numpy as np
    from _harness import Sampler, start_emitter

    if layout == "shared":
        # The whole system on P cores: an emitter per core (one port, SO_REUSEPORT), the
        # generator's processes free on the same cores.
        cores = ",".join(str(c) for c in range(processes))
        names = [f"emitter{i}" for i in range(processes)]
    else:
        cores = "1" if processes == 1 else "0,1"
        names = ["emitter"]
    with workdir(f"scale-{layout}-{processes}-{users}", keep) as work:
        emitters: list[Any] = []
        port = 0
        try:
            for i, name in enumerate(names):
                share = (i, len(names)) if layout == "shared" else None
                proc_i, port = start_emitter(
                    work,
                    core=str(i) if layout == "shared" else "0",
                    name=name,
                    port=port,
                    share=share,
                )
                emitters.append(proc_i)
        except BaseException:
            for e in emitters:
                stop(e)
            raise
        out = work / "results"
        cmd = [
            "taskset",
            "-c",
            cores,
            sys.executable,
            "-m",
            "streamslo",
            "run",
            "--host",
            f"http://127.0.0.1:{port}",
            "--users",
            str(users),
            "--processes",
            str(processes),
            "--duration",
            f"{seconds}s",
            "--max-tokens",
            str(MAX_TOKENS),
            "--drain",
            "5s",
            "--out",
            str(out),
            "--allow-invalid",
        ]
        t_start = time.time()
        try:
            with open(work / "client.log", "w") as log:
                proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
                tree = TreeSampler(proc.pid)
                emit = Sampler({name: e.pid for name, e in zip(names, emitters, strict=True)})
                try:
                    while proc.poll() is None and time.time() < t_start + seconds + 120:
                        time.sleep(0.5)
                        tree.sample()
                        emit.sample()
                finally:
                    stop(proc)
        finally:
            for e in emitters:
                stop(e)
        from _harness import emitter_log

        emitted = [s for name in names for s in emitter_log(work, name)["streams"]]
        res: dict[str, Any] = {
            "layout": layout,
            "processes": processes,
            "users": users,
            "seconds": seconds,
            "rc": proc.returncode,
        }
        if not (out / "run.json").exists():
            res["error"] = (work / "client.log").read_text()[-1500:]
            return res
        streams, unmatched, tokens = match_streamslo(out, emitted)
        t_first = min((s["t_req"] for s in emitted), default=t_start)
        late = [
            np.asarray(s["recv"]) - np.asarray(s["emit"])
            for s in streams
            if s["done"] and s["t0"] >= t_first + warmup - 0.05
        ]
        lat = np.concatenate(late) * 1000.0 if late else np.array([])
        ew = [
            np.asarray(s["w"]) - (s["t_req"] + 0.020 * np.arange(1, len(s["w"]) + 1))
            for s in emitted
            if s["w"]
        ]
        ewl = np.concatenate(ew) * 1000.0 if ew else np.array([])
        master = tree.seconds("master")
        workers = tree.seconds("worker")
        records = sum(1 for _ in streams) + unmatched
        distributed = bool(workers)
        res.update(
            distributed=distributed,
            records=records,
            unmatched=unmatched,
            tokens=tokens,
            streams_measured=len(late),
            lateness_p50_ms=float(np.percentile(lat, 50)) if len(lat) else None,
            lateness_p99_ms=float(np.percentile(lat, 99)) if len(lat) else None,
            emitter_write_late_p99_ms=float(np.percentile(ewl, 99)) if len(ewl) else None,
            emitter_cpu_pct=sum(emit.mean_cpu(name, t_start, time.time()) or 0.0 for name in names),
            master_cpu_s=sum(master),
            worker_cpu_s=workers,
            workers_seen=len(workers),
            # --processes 1 is one plain Locust process (no master, no relay): its CPU is the
            # generator's, not a master's.
            master_ms_per_record=sum(master) / records * 1000.0
            if records and distributed
            else None,
            tokens_per_s=tokens / seconds,
        )
        return res


def _within(cell: dict[str, Any]) -> bool:
    p99 = cell.get("lateness_p99_ms")
    return p99 is not None and p99 < BOUND_MS and not cell.get("error")


def capacities(cells: list[dict[str, Any]]) -> dict[int, int | None]:
    """Per process count: the highest level held within the bound with every lower level held
    too (the last before the first that failed), or None where the lowest failed."""
    out: dict[int, int | None] = {}
    for procs in sorted({c["processes"] for c in cells}):
        best = None
        for c in sorted((c for c in cells if c["processes"] == procs), key=lambda c: c["users"]):
            if not _within(c):
                break
            best = c["users"]
        out[procs] = best
    return out


def relay_ingest_us(tokens: int = MAX_TOKENS) -> float:
    """The relay's master-side ingest cost per record (``bench_relay.py``, part A), µs."""
    import bench_relay

    rows = bench_relay.bench_encodings(records=400, tokens=tokens, batch=200, repeats=2)
    return float(rows[0]["master_us_per_record"])


def render(data: dict[str, Any]) -> str:
    """The Markdown section of ``bench/RESULTS.md`` from this bench's JSON."""
    rows = []
    for c in data["cells"]:
        p99 = c.get("lateness_p99_ms")
        flag = "" if p99 is not None and p99 < BOUND_MS else " ✗"
        rows.append(
            [
                c["processes"],
                c["users"],
                c.get("records", "-"),
                fmt(c.get("lateness_p50_ms"), 2),
                fmt(p99, 1) + flag,
                fmt(c.get("tokens_per_s"), 0),
                fmt(c.get("emitter_write_late_p99_ms"), 2),
                fmt(c.get("emitter_cpu_pct"), 0),
                fmt(c.get("master_cpu_s"), 1) if c.get("distributed") else "-",
                ", ".join(fmt(s, 1) for s in c.get("worker_cpu_s", []))
                or fmt(c.get("master_cpu_s"), 1),
                fmt(c.get("master_ms_per_record"), 2),
            ]
        )
    if data.get("layout") == "shared":
        setup = (
            "50 tokens/s, 100-token streams back to back; **the whole system on P cores**: "
            "`--processes 1` and one emitter both on core 0; `--processes 2` (a master and two "
            "workers) on cores 0-1 with an emitter pinned to each (one port, SO_REUSEPORT), so "
            "each configuration has the same share of a core per emitter and per generator. "
            "Emitter CPU % is the emitters' sum. Lateness from the master's merged results.\n"
        )
    else:
        setup = (
            "50 tokens/s, 100-token streams back to back; emitter on core 0; `--processes 1` "
            "pinned to core 1, `--processes 2` (a master and two workers) on cores 0-1 (**the "
            "emitter shares a core with the generator**: two cores only). `--processes 1` is "
            "one Locust process with no master: its CPU is under the workers' column. Lateness "
            "from the master's merged results (every worker's records relayed to it).\n"
        )
    out = [
        f"Command: `{data['command']}`\n",
        setup,
        md_table(
            [
                "processes",
                "streams",
                "records",
                "lateness p50 ms",
                "lateness p99 ms",
                "tokens/s",
                "emitter write-late p99 ms",
                "emitter CPU %",
                "master CPU s",
                "generating process(es) CPU s",
                "master CPU ms / record",
            ],
            rows,
            "rrrrrrrrrlr",
        ),
    ]
    caps = capacities(data["cells"])
    if len(caps) > 1 and all(caps.values()):
        base = caps[min(caps)]
        assert base is not None
        held = ", ".join(
            f"{p} process{'es' if p > 1 else ''}: {c} streams ({c / base:.2f}x)"
            for p, c in caps.items()
            if c is not None
        )
        out.append(
            f"\nCapacity at lateness p99 < {BOUND_MS:g} ms (every lower level held): {held}."
        )
    if data.get("relay_ingest_us") is not None:
        out.append(
            f"\nThe relay's own ingest per record (decode, queue, `streams.csv` row, gaps parquet; "
            f"`bench/bench_relay.py` A, {MAX_TOKENS} tokens): {data['relay_ingest_us']:.0f} µs. "
            "The master's whole-process figure above also holds Locust's own master work."
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--levels", default="150,300", help="streams (users), comma-separated")
    p.add_argument("--processes", default="1,2")
    p.add_argument("--seconds", type=int, default=15)
    p.add_argument("--warmup", type=float, default=3.0)
    p.add_argument(
        "--layout",
        choices=("split", "shared"),
        default="split",
        help="split: the emitter on core 0 (see above); shared: the whole system on P cores",
    )
    p.add_argument(
        "--stop-after-fail",
        action="store_true",
        help="skip a process count's higher levels once one failed the bound (capacity runs)",
    )
    p.add_argument("--json", default="", help="default bench/results/scaleout.json")
    p.add_argument("--keep", action="store_true")
    args = p.parse_args(argv)
    cells = []
    failed: set[int] = set()
    for users in [int(x) for x in args.levels.split(",") if x.strip()]:
        for procs in [int(x) for x in args.processes.split(",") if x.strip()]:
            if procs in failed:
                continue
            cell = run_cell(procs, users, args.seconds, args.warmup, args.keep, args.layout)
            if args.stop_after_fail and not _within(cell):
                failed.add(procs)
            print(
                {k: v for k, v in cell.items() if k != "error"},
                cell.get("error", "")[-300:],
                file=sys.stderr,
                flush=True,
            )
            cells.append(cell)
    data: dict[str, Any] = {
        "command": shown_command("bench_scaleout", argv),
        "layout": args.layout,
        "cells": cells,
        "relay_ingest_us": relay_ingest_us(),
    }
    print(render(data))
    print(f"\nwrote {write_result('scaleout', data, args.json or None)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    prioritise()
    sys.exit(main())
