"""Benchmark: the bundled target server, fixed vs naive, at N concurrent SSE streams.

The server is pinned to one core and this load generator to another (``taskset`` /
``sched_setaffinity``), so the client does not steal the server's CPU. The client is a lean
asyncio raw-socket HTTP/1.1 reader: an httpx client spends about four times its CPU per event
(bench/RESULTS.md, the flood table), so at hundreds of streams it would measure itself. Per mode it reports tokens/s, per-token latency (ITL) p50/p99, TTFT p99,
truncated and silently truncated streams, and the server's peak RSS; a second pass holds the
same number of *slow readers* and reports peak RSS and write backlog.

    python bench/bench_target_server.py                 # 250 streams x 128 tokens
    python bench/bench_target_server.py --streams 100 --tokens 64 --duration 20
    python bench/bench_target_server.py --sigterm       # SIGTERM during 250 streams

``--sigterm`` runs the drain check instead (fixed mode, under Uvicorn and Gunicorn): it opens
``--streams`` streams of ``--tokens`` tokens, sends SIGTERM once the server holds all of them,
and reports the streams that ended complete, were cut, or were refused, how long the drain took
and the exit code. Goal: 0 cut, exit code 0.

Issue 3's targets: fixed ITL p99 < 200 ms with zero truncations at 250 x 128; fixed tokens/s
>= 10x naive; RSS < 1.5 GB with 250 slow readers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import psutil

__all__ = ["StreamStats", "main", "run_load"]

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class StreamStats:
    """One stream as the client saw it."""

    ok: bool = False
    finish: str | None = None
    tokens: int = 0
    ttft: float | None = None
    gaps: list[float] = field(default_factory=list)
    error: str | None = None
    ended: float | None = None
    """``perf_counter`` when the stream ended (its [DONE], a cut, or an error)."""


async def _stream(port: int, body: bytes, deadline: float, slow: bool, delay: float) -> StreamStats:
    await asyncio.sleep(delay)
    st = StreamStats()
    t0 = time.perf_counter()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError as exc:
        st.error = type(exc).__name__
        return st
    if slow:  # a small receive window makes a slow reader push back on the server quickly
        writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    writer.write(
        b"POST /v1/stream HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\n"
        b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )
    last = None
    try:
        status = await asyncio.wait_for(reader.readline(), max(0.1, deadline - time.monotonic()))
        if b" 200 " not in status:
            st.error = status.decode(errors="replace").strip()
            return st
        while time.monotonic() < deadline:
            line = await asyncio.wait_for(reader.readline(), max(0.1, deadline - time.monotonic()))
            if not line:
                st.error = "closed before [DONE]"
                return st
            if not line.startswith(b"data: "):
                continue
            now = time.perf_counter()
            if line.startswith(b"data: [DONE]"):
                st.ok = True
                return st
            if b'"finish_reason":null' in line:
                st.tokens += 1
                if last is None:
                    st.ttft = now - t0
                else:
                    st.gaps.append(now - last)
                last = now
            elif b'"finish_reason":"' in line:
                st.finish = json.loads(line[6:])["choices"][0]["finish_reason"]
            if slow:
                await asyncio.sleep(0.25)
        st.error = "deadline"
    except (TimeoutError, OSError) as exc:
        st.error = st.error or type(exc).__name__
    finally:
        st.ended = time.perf_counter()
        writer.close()
    return st


async def run_load(
    port: int, streams: int, tokens: int, duration: float, slow: bool, ramp: float = 0.0
) -> tuple[list[StreamStats], float]:
    """Open ``streams`` streams, spread evenly over ``ramp`` seconds (a Locust-style spawn
    rate; 0 opens them all in one instant); returns their stats and the wall time."""
    body = json.dumps(
        {"prompt": "Explain quantum entanglement", "max_tokens": tokens, "ignore_eos": True}
    ).encode()
    deadline = time.monotonic() + duration
    t0 = time.perf_counter()
    res = await asyncio.gather(
        *[_stream(port, body, deadline, slow, i * ramp / streams) for i in range(streams)]
    )
    return list(res), time.perf_counter() - t0


def _active_streams(port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as r:
        return int(json.loads(r.read())["active_streams"])


async def _sigterm_pass(
    proc: subprocess.Popen[bytes], port: int, args: argparse.Namespace
) -> dict[str, object]:
    """Streams in flight, SIGTERM once all run; what became of them."""
    load = asyncio.ensure_future(
        run_load(port, args.streams, args.tokens, args.duration, False, args.ramp)
    )
    deadline = time.monotonic() + args.duration
    held = 0
    while time.monotonic() < deadline and held < args.streams:
        await asyncio.sleep(0.05)
        held = await asyncio.to_thread(_active_streams, port)
    t_term = time.perf_counter()
    proc.send_signal(signal.SIGTERM)

    def wait_exit() -> tuple[int, float]:
        rc = proc.wait(90)
        return rc, time.perf_counter()

    exited = asyncio.ensure_future(asyncio.to_thread(wait_exit))
    res, _ = await load
    rc, t_exit = await exited
    began = [r for r in res if r.ttft is not None or r.ok]
    return {
        "streams": len(res),
        "in_flight": held,
        "ok": sum(1 for r in res if r.ok and r.finish == "length" and r.tokens == args.tokens),
        "cut": sum(1 for r in began if not (r.ok and r.tokens == args.tokens)),
        "refused": sum(1 for r in res if r.error is not None and " 503 " in r.error),
        "last_end_s": max(r.ended or t_term for r in res) - t_term,
        "drain_s": t_exit - t_term,
        "exit_code": rc,
    }


def _sigterm(args: argparse.Namespace) -> int:
    cols = [
        "server",
        "streams",
        "in_flight",
        "ok",
        "cut",
        "refused",
        "last_end_s",
        "drain_s",
        "exit_code",
    ]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    failed = False
    for kind in ("uvicorn", "gunicorn"):
        proc, port = _start(
            "fixed",
            args.server_core,
            ["--server", kind, "--max-streams", str(max(512, args.streams))],
        )
        try:
            row = {"server": kind, **asyncio.run(_sigterm_pass(proc, port, args))}
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        failed |= row["cut"] != 0 or row["exit_code"] != 0
        print(
            "| "
            + " | ".join(
                f"{row[c]:.2f}" if isinstance(row[c], float) else str(row[c]) for c in cols
            )
            + " |"
        )
    return 1 if failed else 0


def _start(mode: str, core: int, extra: list[str]) -> tuple[subprocess.Popen[bytes], int]:
    from bench_burst import start_server  # bench/ is this script's directory

    return start_server(mode, str(core), extra)


def _rss_mb(pid: int) -> float:
    p = psutil.Process(pid)
    procs = [p, *p.children(recursive=True)]
    return float(sum(q.memory_info().rss for q in procs if q.is_running())) / 2**20


async def _measure(
    pid: int, port: int, args: argparse.Namespace, slow: bool
) -> tuple[list[StreamStats], float, float]:
    peak = 0.0

    async def sample() -> None:
        nonlocal peak
        while True:
            peak = max(peak, _rss_mb(pid))
            await asyncio.sleep(0.5)

    sampler = asyncio.ensure_future(sample())
    duration = args.slow_duration if slow else args.duration
    res, wall = await run_load(port, args.streams, args.tokens, duration, slow, args.ramp)
    sampler.cancel()
    return res, wall, peak


def _row(mode: str, res: list[StreamStats], wall: float, rss: float) -> dict[str, object]:
    gaps = np.array([g for r in res for g in r.gaps]) * 1000
    ttft = np.array([r.ttft for r in res if r.ttft is not None]) * 1000
    began = [r for r in res if r.ttft is not None or r.ok]
    truncated = sum(1 for r in began if not r.ok and r.error != "deadline")
    silent = sum(1 for r in res if r.ok and (r.finish != "length" or r.tokens < 1))
    return {
        "mode": mode,
        "streams": len(res),
        "ok": sum(1 for r in res if r.ok and r.finish == "length"),
        "tokens/s": sum(r.tokens for r in res) / wall,
        "itl_p50": float(np.percentile(gaps, 50)) if gaps.size else float("nan"),
        "itl_p99": float(np.percentile(gaps, 99)) if gaps.size else float("nan"),
        "ttft_p99": float(np.percentile(ttft, 99)) if ttft.size else float("nan"),
        "truncated": truncated,
        "silent": silent,
        "unfinished": sum(1 for r in res if r.error == "deadline"),
        "errors": sum(1 for r in res if r.ttft is None and not r.ok and r.error != "deadline"),
        "rss_mb": rss,
    }


def _print(rows: list[dict[str, object]]) -> None:
    cols = [
        "mode",
        "streams",
        "ok",
        "tokens/s",
        "itl_p50",
        "itl_p99",
        "ttft_p99",
        "truncated",
        "silent",
        "unfinished",
        "errors",
        "rss_mb",
    ]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        cells = [f"{r[c]:.1f}" if isinstance(r[c], float) else str(r[c]) for c in cols]
        print("| " + " | ".join(cells) + " |")


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the table."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--streams", type=int, default=250)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--duration", type=float, default=30.0, help="cap per mode, seconds")
    p.add_argument("--slow-duration", type=float, default=15.0)
    p.add_argument("--modes", default="fixed,naive")
    p.add_argument(
        "--ramp",
        type=float,
        default=2.0,
        help="seconds over which streams open (spawn rate = streams / ramp)",
    )
    p.add_argument("--server-core", type=int, default=0)
    p.add_argument("--client-core", type=int, default=1)
    p.add_argument("--no-slow", action="store_true", help="skip the slow-reader pass")
    p.add_argument(
        "--sigterm",
        action="store_true",
        help="instead: SIGTERM during --streams streams, uvicorn and gunicorn",
    )
    args = p.parse_args(argv)
    if hasattr(os, "sched_setaffinity") and args.client_core < (os.cpu_count() or 1):
        os.sched_setaffinity(0, {args.client_core})
    if args.sigterm:
        return _sigterm(args)
    rows = []
    for mode in args.modes.split(","):
        passes = [False] if args.no_slow else [False, True]
        for slow in passes:
            proc, port = _start(
                mode, args.server_core, ["--max-streams", str(max(512, args.streams))]
            )
            try:
                res, wall, rss = asyncio.run(_measure(proc.pid, port, args, slow))
            finally:
                proc.send_signal(signal.SIGINT)  # a second signal: stop now, skip the drain
                time.sleep(0.2)
                proc.send_signal(signal.SIGINT)
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            rows.append(_row(mode + (" slow-readers" if slow else ""), res, wall, rss))
    _print(rows)
    by = {r["mode"]: r for r in rows}
    if "fixed" in by and "naive" in by:
        ratio = float(by["fixed"]["tokens/s"]) / max(float(by["naive"]["tokens/s"]), 1e-9)  # type: ignore[arg-type]
        print(f"\nfixed/naive tokens/s: {ratio:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
