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

Every child runs with ``PYTHONHASHSEED=0``: with a random seed a dict's probes, and so the
instruction count, move by 1-2 % from run to run; with a fixed one the count repeats to the
instruction.

Two more modes, on the current tree:

- ``--shortcuts``: instructions per token with each shortcut of the read path turned off
  (:data:`SHORTCUTS`; the general rule then reads what it took): what each one pays, the
  figure its comment in ``streamslo/stream`` cites (``bench/results/token_cpu_shortcuts.json``,
  bench/RESULTS.md "What each shortcut of the read path pays");
- ``--check REFERENCE``: instructions per token against the committed figures
  (``bench/results/token_cpu_reference.json``), failing (exit 1) past the reference's tolerance
  (+5 %); ``--record REFERENCE`` writes them. Instruction counts depend on the interpreter's
  build and the libraries' versions: where this machine's differ from the reference's, the
  reference's commit is measured here beside the current tree and the current tree is held to
  it instead (``tests/bench/test_token_cpu_guard.py``, ``tox -e bench``, the nightly job).

Run::

    python bench/bench_token_cpu.py [--baseline 05b9810] [--streams 200] [--repeats 7]
        [--protocols sse,ws] [--shapes emitter,vllm] [--json bench/results/token_cpu.json]
    python bench/bench_token_cpu.py --shortcuts
    python bench/bench_token_cpu.py --check bench/results/token_cpu_reference.json

``python bench/bench_token_cpu.py --child sse emitter 200 [--off lane,...]`` runs one
measurement in this process and prints ``µs/token`` (what the parent runs, with or without the
baseline on the path).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, cast

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


#: The shortcuts of the read path, each with what it takes from the general rule; ``--off NAME``
#: turns it off in a child (the general rule then reads what it took).
SHORTCUTS = {
    "lane": "a read that is one whole chunk holding one data event skips the chunked reader "
    "and the SSE decoder (stream/lane.py, SSEExchange.receive)",
    "one-event": "a body read that is one whole one-line data event skips the SSE decoder's "
    "lines (SSEDecoder.one_event)",
    "typed-chunk": "a token chunk decoded into a TokenChunk and read in one pass "
    "(OpenAIChunks.read_bytes)",
    "plain-answer": "a dict chunk whose one choice is plainly an answer token read in one pass "
    "(chunkjson.plain_answer in OpenAIChunks._chunk)",
    "msgspec": "chunk JSON decoded by msgspec first, json's full parse only for what it refuses "
    "(chunkjson; off: STREAMSLO_CHUNK_JSON=stdlib)",
    "whole-frames": "a read of whole text frames skips websockets' protocol object "
    "(WSReader._whole_frames)",
}


def turn_off(names: list[str]) -> None:
    """Turn the named shortcuts off in this process (before any stream is read)."""
    unknown = set(names) - set(SHORTCUTS)
    if unknown:
        raise SystemExit(f"unknown shortcut(s) {sorted(unknown)}: {sorted(SHORTCUTS)}")
    if "msgspec" in names:  # read when chunkjson is imported: before it is
        os.environ["STREAMSLO_CHUNK_JSON"] = "stdlib"
    from streamslo.stream import chunks, exchange, ws
    from streamslo.stream.sse import SSEDecoder

    def none(*_: object) -> None:
        return None

    # (The names the tests turn off the same way: tests/stream/test_lane.py, test_answer_rule.py,
    # test_ws_whole_frames.py, test_chunkjson_fast.py.)
    switches: dict[str, tuple[object, str, object]] = {
        "lane": (exchange, "chunk_event", none),
        "one-event": (SSEDecoder, "one_event", none),
        "typed-chunk": (chunks, "_typed_decode", None),
        "plain-answer": (chunks, "plain_answer", none),
        "whole-frames": (ws, "_WHOLE_FRAMES", False),
    }
    for name in names:
        if name in switches:
            owner, attr, value = switches[name]
            setattr(owner, attr, value)


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
        rec = StreamRecord(f"s{i}", cast(Any, proto), "bench", 0.0, 0.0)  # (old trees: a str)
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
    if argv[3:4] == ["--off"]:
        turn_off([n for n in argv[4].split(",") if n])
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
    env["PYTHONHASHSEED"] = "0"  # (instruction counts that repeat: see the module's text)
    env.pop("STREAMSLO_CHUNK_JSON", None)  # (the msgspec shortcut: --off msgspec)
    if path is not None:
        env["PYTHONPATH"] = str(path) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _child_cmd(proto: str, shape: str, streams: int, off: list[str]) -> list[str]:
    cmd = [sys.executable, __file__, "--child", proto, shape, str(streams)]
    return [*cmd, "--off", ",".join(off)] if off else cmd


def _us(path: Path | None, proto: str, shape: str, streams: int) -> float:
    cmd = _child_cmd(proto, shape, streams, [])
    out = subprocess.run(cmd, env=_env(path), check=True, capture_output=True, text=True).stdout
    return float(out.split()[-1])


def _ir(path: Path | None, proto: str, shape: str, streams: int, off: list[str]) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cg.out"
        cmd = [
            "valgrind",
            "--tool=cachegrind",
            "--cache-sim=no",
            f"--cachegrind-out-file={out}",
            *_child_cmd(proto, shape, streams, off),
        ]
        res = subprocess.run(cmd, env=_env(path), check=True, capture_output=True, text=True)
    m = re.search(r"I\s+refs:\s+([\d,]+)", res.stderr)
    if m is None:
        raise RuntimeError(res.stderr[-500:])
    return int(m.group(1).replace(",", ""))


def ir_per_token(
    path: Path | None, proto: str, shape: str, streams: int, off: list[str] | None = None
) -> float:
    """Instructions per token: the difference of a run with 2N and one with N streams (the
    shortcuts named in ``off`` turned off)."""
    off = off or []
    return (_ir(path, proto, shape, 2 * streams, off) - _ir(path, proto, shape, streams, off)) / (
        streams * TOKENS
    )


def _current_tree() -> Path:
    """A copy of the working tree's ``streamslo/`` (editing it while this runs changes nothing)."""
    cur = Path(tempfile.mkdtemp(prefix="streamslo-cur-"))
    shutil.copytree(REPO / "streamslo", cur / "streamslo")
    return cur


# ---------------------------------------------------------------- what each shortcut pays
#: (shortcut, what is turned off without it, what is turned off with it): each shortcut's
#: saving is measured where it works. The one-event read and the dict reading work only where
#: the shortcut before them (the lane; the typed chunk) did not take the read, so they are
#: measured with that one off; msgspec likewise on the dict decode, the typed chunk off.
SAVINGS = [
    ("lane", ["lane"], []),
    ("one-event", ["lane", "one-event"], ["lane"]),
    ("typed-chunk", ["typed-chunk"], []),
    ("plain-answer", ["typed-chunk", "plain-answer"], ["typed-chunk"]),
    ("msgspec", ["typed-chunk", "msgspec"], ["typed-chunk"]),
    ("whole-frames", ["whole-frames"], []),
]
_SSE_ONLY = {"lane", "one-event"}
_WS_ONLY = {"whole-frames"}


def measure_shortcuts(protocols: list[str], shapes: list[str], streams: int) -> dict[str, Any]:
    """Instructions per token of the current tree with each shortcut off, and each saving."""
    cur = _current_tree()
    cache: dict[tuple[str, str, tuple[str, ...]], float] = {}

    def ir(proto: str, shape: str, off: list[str]) -> float:
        key = (proto, shape, tuple(sorted(off)))
        if key not in cache:
            cache[key] = ir_per_token(cur, proto, shape, streams, off)
            print(f"{proto} {shape} off={off}: {cache[key]:,.0f}", file=sys.stderr, flush=True)
        return cache[key]

    rows: list[dict[str, Any]] = []
    try:
        for name, without, with_ in SAVINGS:
            for proto in protocols:
                if (proto == "ws" and name in _SSE_ONLY) or (proto == "sse" and name in _WS_ONLY):
                    continue
                for shape in shapes:
                    off, on = ir(proto, shape, without), ir(proto, shape, with_)
                    rows.append(
                        {
                            "shortcut": name,
                            "protocol": proto,
                            "shape": shape,
                            "measured_with_off": with_,
                            "instructions_without": off,
                            "instructions_with": on,
                            "saved": off - on,
                            "saved_share": (off - on) / off,
                        }
                    )
    finally:
        shutil.rmtree(cur, ignore_errors=True)
    lines = [
        "| shortcut | protocol | chunk | also off | instructions/token without | with | saved |",
        "| --- | --- | --- | --- | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['shortcut']} | {r['protocol']} | {r['shape']} | "
            f"{', '.join(r['measured_with_off']) or '-'} | {r['instructions_without']:,.0f} | "
            f"{r['instructions_with']:,.0f} | {r['saved']:,.0f} ({r['saved_share']:.0%}) |"
        )
    return {"rows": rows, "table": "\n".join(lines), "shortcuts": SHORTCUTS}


# ---------------------------------------------------------------- the committed figure
#: The cases the guard holds: each transport, the emitter's chunk and vLLM's.
GUARDED = ["sse/emitter", "sse/vllm", "ws/emitter", "ws/vllm"]


def environment() -> dict[str, str]:
    """What an instruction count depends on besides the code: the interpreter's build, the C
    library, the decoders' versions."""
    from importlib.metadata import version

    return {
        "python": sys.version,
        "implementation": platform.python_implementation(),
        "machine": platform.machine(),
        "libc": " ".join(platform.libc_ver()),
        "msgspec": version("msgspec"),
        "websockets": version("websockets"),
    }


def _head() -> str:
    return subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "HEAD"], check=True, capture_output=True, text=True
    ).stdout.strip()


def record_reference(out: Path, streams: int, tolerance: float) -> dict[str, Any]:
    """Measure the current tree's guarded figures and write them as the reference (its commit:
    HEAD, which should hold the same ``streamslo/`` as the working tree)."""
    cur = _current_tree()
    try:
        figures = {}
        for key in GUARDED:
            proto, shape = key.split("/")
            figures[key] = round(ir_per_token(cur, proto, shape, streams), 1)
    finally:
        shutil.rmtree(cur, ignore_errors=True)
    ref = {
        "what": "instructions per token of the Sans-I/O read path (bench/bench_token_cpu.py), "
        "the figures tests/bench/test_token_cpu_guard.py holds the code to",
        "command": f"python bench/bench_token_cpu.py --record {out.relative_to(REPO)}"
        if out.is_relative_to(REPO)
        else f"python bench/bench_token_cpu.py --record {out}",
        "commit": _head(),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "tolerance": tolerance,
        "ir_streams": streams,
        "environment": environment(),
        "figures": figures,
    }
    out.write_text(json.dumps(ref, indent=1) + "\n")
    return ref


def check_reference(path: Path) -> tuple[bool, list[str]]:
    """The current tree's guarded figures against the reference at ``path``: (all within its
    tolerance, one line per case). Where this machine's environment is not the reference's, the
    reference's commit is measured here beside the current tree and is the figure to hold."""
    ref = json.loads(path.read_text())
    tolerance = float(ref["tolerance"])
    streams = int(ref["ir_streams"])
    here = environment()
    same = here == ref["environment"]
    lines = []
    if not same:
        differ = sorted(k for k in here if here[k] != ref["environment"].get(k))
        lines.append(
            f"this machine's {', '.join(differ)} differ from the reference's: the reference's "
            f"commit {ref['commit'][:12]} is measured here beside the current tree"
        )
    cur = _current_tree()
    base: Path | None = None
    ok = True
    try:
        if not same:
            try:
                base = _export(ref["commit"])
            except subprocess.CalledProcessError as exc:
                return False, [
                    *lines,
                    f"cannot export {ref['commit']} ({exc.stderr.decode(errors='replace')[:200]}"
                    "): a clone with the history is needed (actions/checkout fetch-depth: 0)",
                ]
        for key, figure in ref["figures"].items():
            proto, shape = key.split("/")
            now = ir_per_token(cur, proto, shape, streams)
            held = figure if base is None else ir_per_token(base, proto, shape, streams)
            source = "committed" if base is None else f"{ref['commit'][:12]} measured here"
            ratio = now / held
            passed = ratio <= 1 + tolerance
            ok = ok and passed
            lines.append(
                f"{key}: {now:,.0f} instructions/token, {source} {held:,.0f}: "
                f"{ratio - 1:+.1%} (fails past +{tolerance:.0%}) {'ok' if passed else 'FAILED'}"
            )
    finally:
        for tmp in (base, cur):
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)
    return ok, lines


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
    p.add_argument("--json", default=None, help="where the results go (default by the mode)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--shortcuts", action="store_true", help="instructions per token, each shortcut off"
    )
    mode.add_argument("--check", metavar="REFERENCE", help="hold the figures to REFERENCE's")
    mode.add_argument("--record", metavar="REFERENCE", help="write the reference figures")
    p.add_argument("--tolerance", type=float, default=0.05, help="--record: the margin kept")
    args = p.parse_args(argv)
    if args.check:
        ok, lines = check_reference(Path(args.check))
        print("\n".join(lines))
        return 0 if ok else 1
    if args.record:
        ref = record_reference(Path(args.record).resolve(), args.ir_streams, args.tolerance)
        print(json.dumps(ref["figures"], indent=1))
        return 0
    if args.shortcuts:
        data = measure_shortcuts(args.protocols.split(","), args.shapes.split(","), args.ir_streams)
        data["command"] = "python bench/bench_token_cpu.py " + " ".join(argv)
        data["when"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        data["environment"] = environment()
        print(data["table"])
        out = Path(args.json or BENCH / "results" / "token_cpu_shortcuts.json")
        out.write_text(json.dumps(data, indent=1) + "\n")
        print(f"wrote {out}", file=sys.stderr)
        return 0
    # The working tree as it is now (a copy: editing it while this runs changes nothing here).
    cur = _current_tree()
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
    out = Path(args.json or BENCH / "results" / "token_cpu.json")
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
