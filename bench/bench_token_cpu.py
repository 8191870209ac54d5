"""CPU per token of the Sans-I/O read path (no sockets, no gevent): old code against new.

Per token, the suite's hot path is: one socket read holding one chunked SSE event (or one
WebSocket frame) -> the chunked framing -> the SSE decoder -> the chunk's JSON -> the tracker.
This bench replays exactly what ``bench/_emitter.py`` writes (a head, a padding comment, 100
token chunks, the last one with ``usage``, ``[DONE]``, the terminator; or the WebSocket frames)
into ``SSEExchange`` / ``WSReader`` for many streams, one ``receive`` per token, and checks
that every stream ends ``ok`` with 100 tokens.

Two measures, both for the current tree and for a baseline revision (``--baseline REV``:
``git archive`` of ``streamslo/`` at REV, imported through ``PYTHONPATH``):

- **instructions per token** (load-independent): ``valgrind --tool=cachegrind`` counts the
  instructions of a run with N and with 2N streams; (Ir(2N) - Ir(N)) / (100 N) is the cost of
  one token, start-up excluded;
- **µs per token**: old and new in alternating subprocesses, ``--repeats`` each, the median of
  each and their ratio (wall-clock on a shared machine: the ratio is what to read).

``--shape vllm`` uses a vLLM-like chunk (``id``, ``object``, ``created``, ``model``,
``choices`` with ``logprobs``/``stop_reason``/``token_ids``) instead of the emitter's; ``--shape
tgi`` TGI's chat chunk as axum writes it (``data:`` with no space after the colon).

Run::

    python bench/bench_token_cpu.py [--baseline 05b9810] [--streams 200] [--repeats 7]
        [--protocols sse,ws] [--shapes emitter,vllm] [--json bench/results/token_cpu.json]

``python bench/bench_token_cpu.py --child sse emitter 200`` runs one measurement in this
process and prints ``µs/token`` (what the parent runs, with or without the baseline on the path).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
TOKENS = 100

_EMITTER_JSON = (
    b'","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"tok"},'
    b'"finish_reason":null}]}'
)
_EMITTER_LAST = (
    b'","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"tok"},'
    b'"finish_reason":"length"}],"usage":{"prompt_tokens":1,"completion_tokens":100,'
    b'"total_tokens":101}}'
)
_VLLM_JSON = (
    b'","object":"chat.completion.chunk","created":1733100000,"model":"meta-llama/Llama-3.1-8B",'
    b'"choices":[{"index":0,"delta":{"content":" the"},"logprobs":null,"finish_reason":null,'
    b'"stop_reason":null,"token_ids":[279]}]}'
)
_VLLM_LAST = (
    b'","object":"chat.completion.chunk","created":1733100000,"model":"meta-llama/Llama-3.1-8B",'
    b'"choices":[{"index":0,"delta":{"content":"."},"logprobs":null,"finish_reason":"length",'
    b'"stop_reason":null,"token_ids":[13]}],"usage":{"prompt_tokens":1,"total_tokens":101,'
    b'"completion_tokens":100}}'
)
# TGI's chat chunk (its OpenAI route), written by axum: ``data:`` with no space after the colon.
_TGI_JSON = (
    b'","object":"chat.completion.chunk","created":1733100000,"model":"tgi",'
    b'"system_fingerprint":"3.3.6-native","choices":[{"index":0,"delta":{"role":"assistant",'
    b'"content":" the"},"logprobs":null,"finish_reason":null}],"usage":null}'
)
_TGI_LAST = (
    b'","object":"chat.completion.chunk","created":1733100000,"model":"tgi",'
    b'"system_fingerprint":"3.3.6-native","choices":[{"index":0,"delta":{"role":"assistant",'
    b'"content":"."},"logprobs":null,"finish_reason":"length"}],"usage":{"prompt_tokens":1,'
    b'"completion_tokens":100,"total_tokens":101}}'
)
#: shape -> (a token's chunk after its id, the last chunk after its id, the SSE field written)
SHAPES = {
    "emitter": (_EMITTER_JSON, _EMITTER_LAST, b"data: "),
    "vllm": (_VLLM_JSON, _VLLM_LAST, b"data: "),
    "tgi": (_TGI_JSON, _TGI_LAST, b"data:"),
}


def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _ws_frame(payload: bytes) -> bytes:
    n = len(payload)
    head = bytes((0x81, n)) if n < 126 else bytes((0x81, 126)) + n.to_bytes(2, "big")
    return head + payload


def _reads(proto: str, shape: str) -> tuple[bytes, list[bytes]]:
    """(what comes before the tokens, one read per token; the last read ends the stream)."""
    body, last, field = SHAPES[shape]
    stamps = [b"%.6f" % (1733100000.0 + k * 0.02) for k in range(TOKENS)]
    if proto == "ws":
        reads = [_ws_frame(b'{"id":"' + s + body) for s in stamps[:-1]]
        reads.append(_ws_frame(b'{"id":"' + stamps[-1] + last) + _ws_frame(b"[DONE]"))
        return b"", reads
    head = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n" + _chunk(b":" + b"p" * 37 + b"\n")
    )
    reads = [_chunk(field + b'{"id":"' + s + body + b"\n\n") for s in stamps[:-1]]
    reads.append(
        _chunk(field + b'{"id":"' + stamps[-1] + last + b"\n\n")
        + _chunk(field + b"[DONE]\n\n")
        + b"0\r\n\r\n"
    )
    return head, reads


def _ws_proto() -> Any:
    """A websockets client protocol, handshake done (as the suite holds one per user)."""
    import base64
    import hashlib

    from websockets.client import ClientProtocol
    from websockets.uri import parse_uri

    proto = ClientProtocol(parse_uri("ws://127.0.0.1:1/v1/ws"), max_size=1 << 20)
    req = proto.connect()
    proto.send_request(req)
    proto.data_to_send()
    key = req.headers["Sec-WebSocket-Key"].encode()
    accept = base64.b64encode(hashlib.sha1(key + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest())
    proto.receive_data(
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n"
    )
    proto.events_received()
    return proto


def run_streams(proto: str, shape: str, streams: int) -> float:
    """Drive ``streams`` whole streams through the Sans-I/O path; seconds spent in the reads."""
    from streamslo.stream.exchange import SSEExchange
    from streamslo.stream.timing import StreamExpectations, StreamRecord
    from streamslo.stream.tracker import StreamTracker

    head, reads = _reads(proto, shape)
    expect = StreamExpectations(max_tokens=TOKENS)  # (a forced length: the default, old and new)
    clock = time.perf_counter
    spent = 0.0
    ws_proto = _ws_proto() if proto == "ws" else None
    for i in range(streams):
        rec = StreamRecord(f"s{i}", proto, "bench", 0.0, 0.0)
        tracker = StreamTracker(rec, expect)
        if ws_proto is not None:
            from streamslo.stream.ws import WSReader

            begin = getattr(
                tracker, "begin", None
            )  # (a baseline before the pipeline: on_ws_accepted)
            if begin is not None:
                begin(0.0, 101)
            else:
                tracker.on_ws_accepted(0.0)  # type: ignore[attr-defined]
            ex: Any = WSReader(ws_proto, tracker, 10.0, 300.0)
        else:
            ex = SSEExchange(tracker, 10.0, 300.0)
            ex.receive(0.0, head)
        t = 0.1
        receive = ex.receive
        s0 = clock()
        for data in reads:
            receive(t, data)
            t += 0.02
        spent += clock() - s0
        if rec.outcome != "ok" or rec.tokens != TOKENS:
            raise SystemExit(f"stream {i}: {rec.outcome} {rec.tokens} tokens: {rec.error}")
    return spent


def _child(argv: list[str]) -> int:
    proto, shape, streams = argv[0], argv[1], int(argv[2])
    run_streams(proto, shape, 5)  # warm
    spent = run_streams(proto, shape, streams)
    print(f"{spent / (streams * TOKENS) * 1e6:.3f}")
    return 0


def _export(rev: str) -> Path:
    """``streamslo/`` at ``rev`` in a temp directory (for ``PYTHONPATH``)."""
    out = Path(tempfile.mkdtemp(prefix="streamslo-base-"))
    tar = subprocess.run(
        ["git", "-C", str(REPO), "archive", rev, "streamslo"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(out)], input=tar, check=True)
    return out


def _env(path: Path | None) -> dict[str, str]:
    env = dict(os.environ)
    if path is not None:
        env["PYTHONPATH"] = str(path) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _us(path: Path | None, proto: str, shape: str, streams: int) -> float:
    cmd = [sys.executable, __file__, "--child", proto, shape, str(streams)]
    out = subprocess.run(cmd, env=_env(path), check=True, capture_output=True, text=True).stdout
    return float(out.split()[-1])


def _ir(path: Path | None, proto: str, shape: str, streams: int) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cg.out"
        cmd = [
            "valgrind",
            "--tool=cachegrind",
            "--cache-sim=no",
            f"--cachegrind-out-file={out}",
            sys.executable,
            __file__,
            "--child",
            proto,
            shape,
            str(streams),
        ]
        res = subprocess.run(cmd, env=_env(path), check=True, capture_output=True, text=True)
    m = re.search(r"I\s+refs:\s+([\d,]+)", res.stderr)
    if m is None:
        raise RuntimeError(res.stderr[-500:])
    return int(m.group(1).replace(",", ""))


def ir_per_token(path: Path | None, proto: str, shape: str, streams: int) -> float:
    """Instructions per token: the difference of a run with 2N and one with N streams."""
    return (_ir(path, proto, shape, 2 * streams) - _ir(path, proto, shape, streams)) / (
        streams * TOKENS
    )


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--child"]:
        return _child(argv[1:])
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--baseline", default="", help="a git revision to compare with (old path)")
    p.add_argument("--streams", type=int, default=200, help="streams per timed run")
    p.add_argument("--repeats", type=int, default=7, help="timed runs of each, alternating")
    p.add_argument("--protocols", default="sse,ws")
    p.add_argument("--shapes", default="emitter,vllm")
    p.add_argument("--ir-streams", type=int, default=20, help="N for the valgrind difference")
    p.add_argument("--no-valgrind", action="store_true")
    p.add_argument("--json", default=str(BENCH / "results" / "token_cpu.json"))
    args = p.parse_args(argv)
    # The working tree as it is now (a copy: editing it while this runs changes nothing here).
    cur = Path(tempfile.mkdtemp(prefix="streamslo-cur-"))
    shutil.copytree(REPO / "streamslo", cur / "streamslo")
    variants: list[tuple[str, Path | None]] = [("current", cur)]
    base = None
    if args.baseline:
        base = _export(args.baseline)
        variants.insert(0, (args.baseline, base))
    use_vg = not args.no_valgrind and shutil.which("valgrind") is not None
    rows: list[dict[str, Any]] = []
    try:
        for proto in args.protocols.split(","):
            for shape in args.shapes.split(","):
                times: dict[str, list[float]] = {name: [] for name, _ in variants}
                for _ in range(args.repeats):
                    for name, path in variants:
                        times[name].append(_us(path, proto, shape, args.streams))
                for name, path in variants:
                    row: dict[str, Any] = {
                        "protocol": proto,
                        "shape": shape,
                        "code": name,
                        "us_per_token_median": statistics.median(times[name]),
                        "us_per_token_min": min(times[name]),
                        "runs": times[name],
                    }
                    if use_vg:
                        row["instructions_per_token"] = ir_per_token(
                            path, proto, shape, args.ir_streams
                        )
                    rows.append(row)
                    print(json.dumps(row), file=sys.stderr, flush=True)
    finally:
        for tmp in (base, cur):
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)
    # Ratios against the first variant (the baseline), per protocol and shape.
    lines = [
        "| protocol | chunk | code | µs/token (median of runs) | instructions/token | vs baseline (µs, instructions) |",
        "| --- | --- | --- | ---: | ---: | --- |",
    ]
    first: dict[tuple[str, str], dict[str, Any]] = {}
    for r in rows:
        key = (r["protocol"], r["shape"])
        ref = first.setdefault(key, r)
        ir = r.get("instructions_per_token")
        vs = ""
        if ref is not r:
            vs = f"{r['us_per_token_median'] / ref['us_per_token_median']:.2f}x"
            if ir and ref.get("instructions_per_token"):
                vs += f", {ir / ref['instructions_per_token']:.2f}x"
        lines.append(
            f"| {r['protocol']} | {r['shape']} | {r['code']} | {r['us_per_token_median']:.2f} | "
            f"{'' if ir is None else f'{ir:,.0f}'} | {vs} |"
        )
    table = "\n".join(lines)
    print(table)
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()
    out.write_text(
        json.dumps(
            {
                "command": "python bench/bench_token_cpu.py " + " ".join(argv),
                "rows": rows,
                "table": table,
                "loadavg": load,
                "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            },
            indent=1,
        )
    )
    print(f"load average {load[0]:.1f}; wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
