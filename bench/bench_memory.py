"""Memory per open stream: in the load generator (SSE and WebSocket users) and in the bundled
server (fixed mode).

Method: the same process at two stream counts, side by side in one run; bytes per stream =
(RSS at the high count - RSS at the low count) / (high - low), so the fixed costs (Python,
Locust, torch, the model) cancel out. RSS is the median of the samples (every 0.5 s) in the
steady window: after every stream is open, before any ends.

- **generator**: the real locustfile (``-u N -r N``, core 1) against the lean emitter (core 0)
  with long, slow streams (``--max-tokens 100000``, one token every ``--period-ms``, default
  1000 ms: the streams stay open and the CPU stays low), ``--results-dir`` set (each finished
  stream is a row, but none finishes in the window);
- **server**: ``python -m streamslo.server --mode fixed`` (core 0), N streams of a long
  ``max_tokens`` held open by an asyncio client in this process (core 1): SSE (raw HTTP/1.1
  reader) and WebSocket (``websockets``), RSS of the server process and its children.

Run::

    python bench/bench_memory.py [--levels 50,500] [--server-levels 10,250] [--seconds 12]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import (
    Sampler,
    fmt,
    locust_cmd,
    md_table,
    prioritise,
    run_against_emitter,
    shown_command,
    workdir,
    write_result,
)
from bench_burst import start_server, stop_server, suite_body


def _steady_rss(sampler: Sampler, name: str, lo: float, hi: float) -> float | None:
    vals = [v for t, v in sampler.rss[name] if lo <= t <= hi]
    return statistics.median(vals) if vals else None


def generator_rss(
    protocol: str, users: int, seconds: int, period_ms: float, keep: bool
) -> dict[str, Any]:
    """The generator's steady RSS holding ``users`` open streams."""
    with workdir(f"mem-{protocol}-{users}", keep) as work:
        cmd = locust_cmd(
            "{url}",
            users,
            seconds,
            "-f",
            "locustfiles/streaming_locustfile.py",
            "--results-dir",
            str(work / "results"),
            "--max-tokens",
            "100000",
            "--protocol",
            protocol,
        )
        run = run_against_emitter(work, cmd, seconds, period_ms=period_ms)
        opened = [s for s in run.emitted if s["w"]]
        # Steady: from the last stream's first token to the run's end (less a second).
        t_open = max((s["w"][0] for s in opened), default=run.t_start)
        t_end = run.t_start + seconds - 1.0
        rss = _steady_rss(run.sampler, "client", t_open + 1.0, t_end)
        return {
            "protocol": protocol,
            "users": users,
            "streams_open": len(opened),
            "rss_bytes": rss,
            "steady_s": t_end - t_open - 1.0,
            "rc": run.rc,
        }


async def _hold(
    protocol: str, port: int, streams: int, body: bytes, stop_at: float, opened: list[int]
) -> None:
    async def sse() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        head = (
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        writer.write(head + body)
        first = True
        try:
            while time.time() < stop_at:
                line = await asyncio.wait_for(reader.readline(), max(0.1, stop_at - time.time()))
                if not line:
                    return
                if first and line.startswith(b"data: "):
                    first = False
                    opened.append(1)
        except TimeoutError:
            pass
        finally:
            writer.close()

    async def ws() -> None:
        from websockets.asyncio.client import connect

        async with connect(
            f"ws://127.0.0.1:{port}/v1/ws", ping_interval=None, compression=None, open_timeout=60
        ) as conn:
            await conn.send(body.decode())
            first = True
            try:
                while time.time() < stop_at:
                    await asyncio.wait_for(conn.recv(), max(0.1, stop_at - time.time()))
                    if first:
                        first = False
                        opened.append(1)
            except TimeoutError:
                pass

    one = ws if protocol == "ws" else sse
    await asyncio.gather(*[one() for _ in range(streams)], return_exceptions=True)


def server_rss(protocol: str, streams: int, seconds: int, max_tokens: int) -> dict[str, Any]:
    """The fixed server's steady RSS holding ``streams`` open streams."""
    import os
    import threading

    proc, port = start_server(extra=["--max-streams", str(max(512, streams))])
    opened: list[int] = []
    sampler = Sampler({"server": proc.pid}, children=True)
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {1})
    try:
        done = threading.Event()

        def sample() -> None:
            while not done.is_set():
                sampler.sample()
                time.sleep(0.5)

        th = threading.Thread(target=sample, daemon=True)
        th.start()
        t0 = time.time()
        stop_at = t0 + seconds
        marks: dict[str, float] = {}

        async def main() -> None:
            task = asyncio.ensure_future(
                _hold(protocol, port, streams, suite_body(max_tokens), stop_at, opened)
            )
            while not task.done():
                if len(opened) >= streams and "all_open" not in marks:
                    marks["all_open"] = time.time()
                await asyncio.sleep(0.1)

        asyncio.run(main())
        done.set()
        th.join(2)
    finally:
        os.sched_setaffinity(0, before)
        stop_server(proc)
    t_open = marks.get("all_open")
    rss = _steady_rss(sampler, "server", t_open + 1.0, stop_at - 0.5) if t_open else None
    return {
        "protocol": protocol,
        "streams": streams,
        "streams_open": len(opened),
        "rss_bytes": rss,
        "steady_s": (stop_at - 0.5 - t_open - 1.0) if t_open else None,
    }


def per_stream(lo: dict[str, Any], hi: dict[str, Any], key: str) -> float | None:
    a, b = lo.get("rss_bytes"), hi.get("rss_bytes")
    n = hi[key] - lo[key]
    return (b - a) / n if a is not None and b is not None and n > 0 else None


def render(data: dict[str, Any]) -> str:
    """The Markdown section of ``bench/RESULTS.md`` from this bench's JSON."""
    rows = []
    for side, cells, key in (
        ("generator", data.get("generator", []), "streams_open"),
        ("server (fixed)", data.get("server", []), "streams_open"),
    ):
        for proto in dict.fromkeys(c["protocol"] for c in cells):
            cs = sorted((c for c in cells if c["protocol"] == proto), key=lambda c: c[key])
            if len(cs) < 2:
                continue
            lo, hi = cs[0], cs[-1]
            ps = per_stream(lo, hi, key)
            rows.append(
                [
                    side,
                    proto,
                    f"{lo[key]} → {hi[key]}",
                    f"{fmt((lo['rss_bytes'] or 0) / 2**20, 0)} → {fmt((hi['rss_bytes'] or 0) / 2**20, 0)}",
                    "-" if ps is None else f"{ps / 1024:.1f} KiB",
                ]
            )
    return (
        f"Command: `{data['command']}`\n\nRSS at two stream counts of one process kind, steady window "
        "(every stream open, none ended); per stream = ΔRSS / Δstreams.\n\n"
        + md_table(
            ["process", "protocol", "open streams", "RSS MiB", "per open stream"], rows, "lllrr"
        )
    )


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--levels", default="50,500", help="generator stream counts (two)")
    p.add_argument("--server-levels", default="10,250", help="server stream counts (two)")
    p.add_argument("--protocols", default="sse,ws")
    p.add_argument("--seconds", type=int, default=14)
    # One token a second: a stream also holds 64 bytes per token received (its gap and its time,
    # two Python floats in lists), so at 10 tokens/s the figure grew with how long the streams
    # had been open (20 -> 27 KiB between an 8 s and a 24 s run); this measures the stream.
    p.add_argument("--period-ms", type=float, default=1000.0)
    p.add_argument("--no-server", action="store_true")
    p.add_argument("--json", default="", help="default bench/results/memory.json")
    p.add_argument("--keep", action="store_true")
    args = p.parse_args(argv)
    protos = [x.strip() for x in args.protocols.split(",") if x.strip()]
    gen, srv = [], []
    for proto in protos:
        for n in [int(x) for x in args.levels.split(",")]:
            gen.append(generator_rss(proto, n, args.seconds, args.period_ms, args.keep))
            print(json.dumps(gen[-1]), file=sys.stderr, flush=True)
        if not args.no_server:
            for n in [int(x) for x in args.server_levels.split(",")]:
                srv.append(server_rss(proto, n, args.seconds, 4000))
                print(json.dumps(srv[-1]), file=sys.stderr, flush=True)
    data = {"command": shown_command("bench_memory", argv), "generator": gen, "server": srv}
    print(render(data))
    print(f"\nwrote {write_result('memory', data, args.json or None)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    prioritise()
    sys.exit(main())
