"""The bundled server under a burst: N streams opened in the same instant, measured by the suite
and by an independent asyncio client, side by side; and the fixed engine's serving overhead.

Per transport (SSE, WebSocket), against a fresh bundled server in fixed mode each time
(``python -m streamslo.server --mode fixed``, core 0), the client on core 1:

- **independent**: one asyncio process opens N streams at once (``asyncio.gather``; SSE: a raw
  HTTP/1.1 reader; WebSocket: the ``websockets`` asyncio client), the same request body as the
  suite (chat completions, the suite's synthetic prompt, ``max_tokens``, ``ignore_eos``), one
  ``perf_counter()`` per token;
- **suite**: the real locustfile, ``-u N -r N`` (every user spawned at once), ``--results-dir``,
  ``--think-time 3600`` (each user streams once: the burst, nothing after it); the figures come
  from ``gaps.parquet``/``streams.csv``.

Compared: ITL p50/p99 and TTFT p50/p99 and the ratio suite / independent (the load test
``tests/bench/test_burst.py`` asserts they agree within its tolerance).

``--overhead``: tokens/s of the fixed engine at N streams (the independent SSE client's tokens
over the burst's wall time) against the raw batched forward pass of the same model with no HTTP
(``GPT.decode`` on N slots, one sampled token per slot per step, ``token_interval_ms = 0``
and unpaced: the limit), and against the pacing limit (N x 1000 / ``token_interval_ms``).
Serving overhead = raw forward tokens/s / served tokens/s at the same pacing; goal < 2x. The
served rate is the independent SSE client's while every stream decodes (from the last stream's
first token to the first stream's last: prefill and the tail are left out, as the raw pass has
neither).

Run::

    python bench/bench_burst.py [--streams 250] [--tokens 128] [--protocols sse,ws] [--overhead]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import (
    REPO,
    Sampler,
    SchedWatch,
    fmt,
    locust_cmd,
    md_table,
    pct,
    pinned,
    prioritise,
    priority_note,
    shown_command,
    stop,
    workdir,
    write_result,
)

#: Suite / independent ITL p99 and TTFT p99 agree within this factor (plus an absolute slack).
AGREE_RATIO = 1.5
AGREE_SLACK_MS = 15.0


# --------------------------------------------------------------------------- the server
def start_server(
    mode: str = "fixed",
    core: str | None = "0",
    extra: list[str] | None = None,
    log: Path | None = None,
) -> tuple[subprocess.Popen[Any], int]:
    """The bundled server (``python -m streamslo.server``) on ``core``, ready; (process, port)."""
    from streamslo.server.bundled import free_port

    port = free_port()
    cmd = pinned(
        core,
        [
            sys.executable,
            "-m",
            "streamslo.server",
            "--mode",
            mode,
            "--port",
            str(port),
            *(extra or []),
        ],
    )
    out = open(log, "w") if log else subprocess.DEVNULL  # noqa: SIM115 (the child owns it)
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
    for _ in range(300):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                s.sendall(b"GET /readyz HTTP/1.1\r\nhost: x\r\n\r\n")
                if b"200" in s.recv(64):
                    return proc, port
        except OSError:
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    stop(proc)
    raise RuntimeError(f"{mode} server did not start")


def stop_server(proc: subprocess.Popen[Any]) -> None:
    """Two SIGINTs: stop now, skip the drain."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        time.sleep(0.2)
    stop(proc, 20, signal.SIGINT)


def suite_body(max_tokens: int, model: str = "streamslo-tiny") -> bytes:
    """The request body the suite sends by default (its synthetic prompt)."""
    from streamslo.workload.requests import PromptSource, RequestOptions, build_body

    return build_body(
        RequestOptions(model=model, max_tokens=max_tokens), PromptSource.synthetic().next()
    )


# --------------------------------------------------------------------------- independent client
def _token(rec: dict[str, Any], t: float, t0: float, last: float | None) -> float:
    """Count one content token read at ``t``: its TTFT or its gap; the new ``last``."""
    rec["tokens"] += 1
    if last is None:
        rec["ttft"] = t - t0
    else:
        rec["gaps"].append(t - last)
    return t


async def _sse_one(port: int, body: bytes, t_open: float, out: list[dict[str, Any]]) -> None:
    rec: dict[str, Any] = {"ok": False, "ttft": None, "gaps": [], "tokens": 0}
    out.append(rec)
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Accept: text/event-stream\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    t0 = time.perf_counter()
    writer = None
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(head + body)
        last = None
        while True:
            line = await reader.readline()
            if not line:
                break
            if not line.startswith(b"data: "):
                continue
            t = time.perf_counter()
            if line.startswith(b"data: [DONE]"):
                rec["ok"] = True
                break
            if b'"content"' in line:
                last = _token(rec, t, t0, last)
    except OSError as exc:
        rec["error"] = type(exc).__name__
    finally:
        rec["t0"] = t0 - t_open
        if writer is not None:
            writer.close()


async def _ws_one(port: int, body: bytes, t_open: float, out: list[dict[str, Any]]) -> None:
    from websockets.asyncio.client import connect

    rec: dict[str, Any] = {"ok": False, "ttft": None, "gaps": [], "tokens": 0}
    out.append(rec)
    t0 = time.perf_counter()
    try:
        async with connect(
            f"ws://127.0.0.1:{port}/v1/ws",
            ping_interval=None,
            compression=None,
            max_size=2**24,
            open_timeout=60,
        ) as ws:
            await ws.send(body.decode())
            last = None
            while True:
                msg = await ws.recv()
                t = time.perf_counter()
                if msg == "[DONE]":
                    rec["ok"] = True
                    break
                if '"content"' in msg:
                    last = _token(rec, t, t0, last)
    except Exception as exc:  # a failed stream is recorded as not ok
        rec["error"] = type(exc).__name__
    finally:
        rec["t0"] = t0 - t_open


async def independent_burst(
    protocol: str, port: int, streams: int, body: bytes
) -> tuple[list[dict[str, Any]], float]:
    """Open ``streams`` streams at once; their records and the wall time of the burst."""
    out: list[dict[str, Any]] = []
    one = _ws_one if protocol == "ws" else _sse_one
    t_open = time.perf_counter()
    await asyncio.wait_for(
        asyncio.gather(*[one(port, body, t_open, out) for _ in range(streams)]), 600
    )
    return out, time.perf_counter() - t_open


def _figures(
    ttft_s: list[float], gaps_s: list[float], ok: int, n: int, tokens: int, wall: float | None
) -> dict[str, Any]:
    import numpy as np

    g = np.asarray(gaps_s) * 1000.0
    t = np.asarray(ttft_s) * 1000.0
    return {
        "streams": n,
        "ok": ok,
        "tokens": tokens,
        # Tokens read together (a gap under 1 ms): the reader fell behind and caught up.
        "bunched": float((g < 1.0).mean()) if len(g) else None,
        "itl_p50_ms": pct(g, 50),
        "itl_p99_ms": pct(g, 99),
        "itl_max_ms": float(g.max()) if len(g) else None,
        "ttft_p50_ms": pct(t, 50),
        "ttft_p99_ms": pct(t, 99),
        "ttft_max_ms": float(t.max()) if len(t) else None,
        "tokens_per_s": tokens / wall if wall else None,
    }


def run_independent(protocol: str, port: int, streams: int, tokens: int) -> dict[str, Any]:
    import os

    watch = SchedWatch(os.getpid())
    cpu0 = time.process_time()
    try:
        recs, wall = asyncio.run(independent_burst(protocol, port, streams, suite_body(tokens)))
    finally:
        watch.stop()
    cpu = time.process_time() - cpu0
    ok = [r for r in recs if r["ok"]]
    fig = _figures(
        [r["ttft"] for r in ok if r["ttft"] is not None],
        [g for r in ok for g in r["gaps"]],
        len(ok),
        len(recs),
        sum(r["tokens"] for r in recs),
        wall,
    )
    fig["client_runqueue_wait_s"] = watch.total()
    fig["client_cpu_s"] = cpu
    fig["decode_tokens_per_s"] = decode_rate(ok)
    return fig


def decode_rate(recs: list[dict[str, Any]]) -> float | None:
    """Tokens/s while every stream decodes: the tokens received between the last stream's
    first token and the first stream's last token, over that window (prefill and the tail,
    when fewer streams are left, are outside it)."""
    import numpy as np

    times = [
        rec["t0"] + rec["ttft"] + np.concatenate([[0.0], np.cumsum(rec["gaps"])])
        for rec in recs
        if rec["ttft"] is not None and rec["gaps"]
    ]
    if not times:
        return None
    lo, hi = max(t[0] for t in times), min(t[-1] for t in times)
    if hi <= lo:
        return None
    n = sum(int(((t > lo) & (t <= hi)).sum()) for t in times)
    return float(n / (hi - lo))


# --------------------------------------------------------------------------- the suite
def suite_figures(results: Path, users: int) -> dict[str, Any]:
    """The burst as the suite recorded it: each user's first stream (the first ``users``
    streams by start time)."""
    import pandas as pd

    rows = pd.read_csv(results / "streams.csv").sort_values("started_at")
    first = rows.head(users)
    ok = first[first["outcome"] == "ok"]
    gaps_dir = results / "gaps.parquet"
    gaps = (
        pd.read_parquet(gaps_dir)
        if any(gaps_dir.glob("*.parquet"))
        else pd.DataFrame(columns=["stream_id", "gap_ms"])
    )
    g = gaps[gaps["stream_id"].isin(set(ok["stream_id"]))]["gap_ms"].to_numpy() / 1000.0
    spread = float(first["started_at"].max() - first["started_at"].min()) if len(first) else None
    fig = _figures(
        list(ok["ttft_ms"].dropna() / 1000.0),
        list(g),
        len(ok),
        len(first),
        int(first["tokens"].sum()),
        None,
    )
    fig["start_spread_ms"] = spread * 1000.0 if spread is not None else None
    fig["outcomes"] = first["outcome"].value_counts().to_dict()
    return fig


def run_suite(
    protocol: str, port: int, streams: int, tokens: int, work: Path, seconds: int
) -> dict[str, Any]:
    cmd = locust_cmd(
        f"http://127.0.0.1:{port}",
        streams,
        seconds,
        "-f",
        "locustfiles/streaming_locustfile.py",
        "--results-dir",
        str(work / "results"),
        "--max-tokens",
        str(tokens),
        "--protocol",
        protocol,
        # one stream per user (the burst), then a think time longer than the run
        "--think-time",
        "3600",
    )
    with open(work / "suite.log", "w") as log:
        proc = subprocess.Popen(pinned("1", cmd), cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        sampler = Sampler({"client": proc.pid})
        watch = SchedWatch(proc.pid)
        try:
            sampler.run_until(proc, time.time() + seconds + 90)
        finally:
            stop(proc)
            watch.stop()
    if not (work / "results" / "streams.csv").exists():
        return {"error": (work / "suite.log").read_text()[-1500:]}
    fig = suite_figures(work / "results", streams)
    fig["client_peak_cpu_pct"] = max((c for _, c in sampler.cpu["client"]), default=None)
    fig["client_cpu_s"] = sampler.cpu_s.get("client")  # the whole run, Locust's start included
    fig["client_runqueue_wait_s"] = watch.total()
    return fig


def burst_pair(
    protocol: str,
    streams: int,
    tokens: int,
    seconds: int,
    keep: bool = False,
    order: tuple[str, ...] = ("independent", "suite"),
) -> dict[str, Any]:
    """One transport: the independent client and the suite (in ``order``), each against a
    fresh server."""
    out: dict[str, Any] = {"protocol": protocol, "streams": streams, "tokens": tokens}
    with workdir(f"burst-{protocol}", keep) as work:
        for side in order:
            proc, port = start_server(
                extra=["--max-streams", str(max(512, streams))], log=work / f"server-{side}.log"
            )
            try:
                if side == "independent":
                    # Pinned like the suite: this process on core 1 while it runs.
                    import os

                    before = os.sched_getaffinity(0)
                    os.sched_setaffinity(0, {1})
                    try:
                        out[side] = run_independent(protocol, port, streams, tokens)
                    finally:
                        os.sched_setaffinity(0, before)
                else:
                    out[side] = run_suite(protocol, port, streams, tokens, work, seconds)
            finally:
                stop_server(proc)
    return out


def agree(pair: dict[str, Any], key: str) -> tuple[bool, float | None]:
    """Whether the suite's figure ``key`` agrees with the independent one (ratio, slack)."""
    a, b = pair["suite"].get(key), pair["independent"].get(key)
    if a is None or b is None:
        return False, None
    ratio = a / b if b else None
    ok = a <= b * AGREE_RATIO + AGREE_SLACK_MS and b <= a * AGREE_RATIO + AGREE_SLACK_MS
    return ok, ratio


# --------------------------------------------------------------------------- overhead
def raw_forward(streams: int, steps: int = 60) -> dict[str, Any]:
    """The fixed engine's model without HTTP, as the server builds it: each of ``streams``
    slots prefilled with the suite's prompt, then ``steps`` batched decode steps (the model's
    forward pass and the sampler: what one engine step computes), unpaced; tokens/s."""
    import torch

    from streamslo.server.config import ServerConfig
    from streamslo.server.model import GPT, GPTConfig, KVCache
    from streamslo.server.sampling import sample
    from streamslo.server.tokenizer import EOS_ID, Tokenizer
    from streamslo.workload.requests import PromptSource

    cfg = ServerConfig()
    torch.set_num_threads(cfg.torch_threads)
    tok = Tokenizer.from_seed(cfg.seed)
    model = GPT.from_seed(GPTConfig(vocab_size=tok.size), cfg.seed)
    model.eval()
    dev = torch.device("cpu")
    cache = KVCache(model.cfg, streams, dev)
    prompt = [EOS_ID, *tok.encode(PromptSource.synthetic().next())]
    with torch.inference_mode():
        t = time.perf_counter()
        last = [int(model.prefill(cache, s, prompt).argmax()) for s in range(streams)]
        prefill_s = time.perf_counter() - t
        ids = torch.tensor(last, device=dev)
        temps = torch.ones(streams)
        seeds = torch.arange(streams)
        ban = torch.ones(streams, dtype=torch.bool)
        t = time.perf_counter()
        for k in range(steps):
            ids = sample(model.decode(cache, ids), temps, seeds, torch.full((streams,), k), ban)
            ids.tolist()  # the engine's one device->host copy per step
        step_s = (time.perf_counter() - t) / steps
    return {
        "streams": streams,
        "prefill_ms_per_stream": prefill_s / streams * 1000.0,
        "step_ms": step_s * 1000.0,
        "tokens_per_s": streams / step_s,
    }


# --------------------------------------------------------------------------- report
def summary_rows(pairs: list[dict[str, Any]]) -> list[list[Any]]:
    """Per transport: the median suite/independent ratio of ITL p50, ITL p99 and TTFT p99."""
    import statistics

    rows = []
    for proto in dict.fromkeys(p["protocol"] for p in pairs):
        ps = [p for p in pairs if p["protocol"] == proto]

        def med(key: str, ps: list[dict[str, Any]] = ps) -> float | None:
            rs = [r for p in ps if (r := agree(p, key)[1]) is not None]
            return statistics.median(rs) if rs else None

        n_ok = sum(1 for p in ps if agree(p, "itl_p99_ms")[0] and agree(p, "ttft_p99_ms")[0])
        rows.append(
            [
                proto,
                fmt(med("itl_p50_ms"), 2) + "x",
                fmt(med("itl_p99_ms"), 2) + "x",
                fmt(med("ttft_p99_ms"), 2) + "x",
                f"{n_ok} of {len(ps)}",
            ]
        )
    return rows


def render(data: dict[str, Any]) -> str:
    """The Markdown section of ``bench/RESULTS.md`` from this bench's JSON."""
    rows = []
    for pair in data.get("pairs", []):
        for side in ("independent", "suite"):
            f = pair.get(side) or {}
            b = f.get("bunched")
            rows.append(
                [
                    pair["protocol"],
                    pair.get("repeat", 0),
                    side,
                    f"{f.get('ok', '-')}/{f.get('streams', '-')}",
                    fmt(f.get("itl_p50_ms")),
                    fmt(f.get("itl_p99_ms")),
                    fmt(f.get("itl_max_ms")),
                    fmt(f.get("ttft_p50_ms"), 0),
                    fmt(f.get("ttft_p99_ms"), 0),
                    fmt(f.get("start_spread_ms"), 0) if side == "suite" else "0",
                    "-" if b is None else f"{b:.0%}",
                    fmt(f.get("client_runqueue_wait_s"), 1),
                    fmt(f.get("client_cpu_s"), 1),
                ]
            )
    out = [
        f"Command: `{data['command']}`\n",
        f"{data['streams']} streams x {data['tokens']} tokens opened in the same instant against the bundled "
        "server in fixed mode (core 0); client on core 1; a fresh server per row. Agreement: within "
        f"{AGREE_RATIO:g}x + {AGREE_SLACK_MS:g} ms. Priority: {data.get('priority', 'default')}. "
        "Client CPU s: the suite's includes Locust's start (about 1.5 s).\n",
        md_table(
            [
                "protocol",
                "repeat",
                "client",
                "ok",
                "ITL p50 ms",
                "ITL p99 ms",
                "ITL max ms",
                "TTFT p50 ms",
                "TTFT p99 ms",
                "start spread ms",
                "gaps < 1 ms",
                "client run-queue wait s",
                "client CPU s",
            ],
            rows,
            "lrlrrrrrrrrrr",
        ),
        "\nSuite / independent, per transport (median over repeats of each pair's ratio):\n",
        md_table(
            [
                "protocol",
                "ITL p50 ratio",
                "ITL p99 ratio",
                "TTFT p99 ratio",
                "pairs agreeing (ITL p99, TTFT p99)",
            ],
            summary_rows(data.get("pairs", [])),
            "lrrrl",
        ),
    ]
    ov = data.get("overhead")
    if ov:
        out.append("\nServing overhead (fixed engine, same pacing):\n")
        out.append(
            md_table(
                [
                    "streams",
                    "served tokens/s (HTTP, SSE, every stream decoding)",
                    "pacing limit tokens/s",
                    "raw forward step ms",
                    "raw forward tokens/s (unpaced)",
                    "paced raw limit tokens/s",
                    "overhead (paced raw / served)",
                ],
                [
                    [
                        ov["streams"],
                        fmt(ov["served_tokens_per_s"], 0),
                        fmt(ov["pacing_limit"], 0),
                        fmt(ov["raw"]["step_ms"], 2),
                        fmt(ov["raw"]["tokens_per_s"], 0),
                        fmt(ov["paced_raw_limit"], 0),
                        fmt(ov["overhead"], 2) + "x",
                    ]
                ],
            )
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--streams", type=int, default=250)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--protocols", default="sse,ws")
    p.add_argument(
        "--seconds",
        type=int,
        default=40,
        help="the suite's run time: long enough for the burst's streams to end (each user streams once)",
    )
    p.add_argument("--repeats", type=int, default=1, help="pairs per transport (medians reported)")
    p.add_argument(
        "--overhead", action="store_true", help="also the serving overhead vs the raw forward pass"
    )
    p.add_argument("--json", default="", help="default bench/results/burst.json")
    p.add_argument("--keep", action="store_true")
    args = p.parse_args(argv)
    pairs = []
    for r in range(args.repeats):
        for proto in [x.strip() for x in args.protocols.split(",") if x.strip()]:
            # Alternate which side goes first, so a drift in the machine's load hits both alike.
            order = ("independent", "suite") if r % 2 == 0 else ("suite", "independent")
            pair = burst_pair(proto, args.streams, args.tokens, args.seconds, args.keep, order)
            pair["repeat"] = r
            pairs.append(pair)
            print(json.dumps(pair, default=str)[:600], file=sys.stderr, flush=True)
    data: dict[str, Any] = {
        "command": shown_command("bench_burst", argv),
        "pairs": pairs,
        "streams": args.streams,
        "tokens": args.tokens,
        "priority": priority_note(),
    }
    if args.overhead:
        data["overhead"] = overhead(pairs, args.streams)
    print(render(data))
    print(f"\nwrote {write_result('burst', data, args.json or None)}", file=sys.stderr)
    return 0


def overhead(pairs: list[dict[str, Any]], streams: int) -> dict[str, Any]:
    from streamslo.server.config import ServerConfig

    interval = ServerConfig().token_interval_ms
    sse = next((p for p in pairs if p["protocol"] == "sse"), None)
    served = (
        (sse["independent"].get("decode_tokens_per_s") or sse["independent"]["tokens_per_s"])
        if sse
        else None
    )
    raw = raw_forward(streams)
    pacing = streams * 1000.0 / interval if interval else float("inf")
    paced_raw = min(raw["tokens_per_s"], pacing)
    return {
        "streams": streams,
        "served_tokens_per_s": served,
        "pacing_limit": pacing,
        "raw": raw,
        "paced_raw_limit": paced_raw,
        "overhead": paced_raw / served if served else None,
        "token_interval_ms": interval,
    }


if __name__ == "__main__":
    prioritise()
    sys.exit(main())
