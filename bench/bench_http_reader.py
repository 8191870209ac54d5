"""The load generator's HTTP/1.1 response reader against h11, on the same recorded bytes (issue 19).

Both are Sans-I/O: :class:`streamslo.stream.http1.ResponseReader` (``feed`` one read, get the
de-framed body bytes) and ``h11.Connection(h11.CLIENT)`` (``receive_data`` one read, then
``next_event`` until ``NEED_DATA``; the same driver a client on h11 would run). Each gets the
same list of reads, so what is compared is the reading alone: no socket, no SSE decoding.

Happy path: one 2,000-token chunked SSE response (OpenAI chunks, one chunk per token as the
bundled server and vLLM write them), split into reads the way they arrive (mostly one chunk a
read, some coalesced, some cut mid-chunk; seeded), and split into 1-byte reads.

Hostile: the bytes a broken or malicious server sends (an endless or oversized head, a flood of
header lines, an endless chunk-size line, bad chunk sizes, a flood of interim responses, a
slowloris head one byte a read). For each: the outcome (the error class and message, or what
was read), the bytes consumed before the reader stopped, and the peak memory the reader
allocated (``tracemalloc``) while it was fed, so a cap that does not hold shows as memory that
grows with the input.

Figures: CPU time per token (``process_time``, best of ``--repeats``), the ratio h11 / ours,
and Python function calls per token (``cProfile``, deterministic: the same on any machine).

Run (about 20 s)::

    python bench/bench_http_reader.py [--repeats 5] [--json bench/results/http_reader.json]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import random
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import h11

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from streamslo.stream.http1 import ResponseReader  # noqa: E402

TOKENS = 2000
HEAD = (
    b"HTTP/1.1 200 OK\r\n"
    b"date: Wed, 02 Dec 2026 01:00:00 GMT\r\n"
    b"server: uvicorn\r\n"
    b"content-type: text/event-stream; charset=utf-8\r\n"
    b"cache-control: no-cache\r\n"
    b"x-request-id: 6f1c2a9e-2b4d-4c1e-9f7a-0d3b5e8c1a27\r\n"
    b"transfer-encoding: chunked\r\n"
    b"\r\n"
)


def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def sse_chunks(tokens: int = TOKENS) -> list[bytes]:
    """The body's chunks: one OpenAI chat-completion event per token, then ``[DONE]``."""
    out = []
    for i in range(tokens):
        event = (
            b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1764637200,'
            b'"model":"streamslo","choices":[{"index":0,"delta":{"content":" tok%d"},'
            b'"finish_reason":null}]}\n\n' % i
        )
        out.append(_chunk(event))
    out.append(_chunk(b"data: [DONE]\n\n"))
    out.append(b"0\r\n\r\n")
    return out


def realistic_reads(seed: int = 19) -> list[bytes]:
    """The head in one read, then mostly a chunk a read; 1 in 8 reads carries 2-4 chunks (the
    client fell behind), 1 in 16 chunks is cut in two (a TCP segment ended mid-chunk)."""
    rng = random.Random(seed)
    reads = [HEAD]
    chunks = sse_chunks()
    i = 0
    while i < len(chunks):
        n = rng.randint(2, 4) if rng.random() < 1 / 8 else 1
        data = b"".join(chunks[i : i + n])
        i += n
        if rng.random() < 1 / 16 and len(data) > 2:
            cut = rng.randint(1, len(data) - 1)
            reads += [data[:cut], data[cut:]]
        else:
            reads.append(data)
    return reads


def byte_reads(data: bytes) -> list[bytes]:
    return [data[i : i + 1] for i in range(len(data))]


# --------------------------------------------------------------------------- the two readers
@dataclass
class Outcome:
    """What a reader made of a list of reads."""

    result: str
    """``complete``, ``incomplete`` (it wants more bytes), or the error: ``Class: message``."""
    body_bytes: int
    consumed: int
    """Bytes fed before it stopped (an error, or the end of the response)."""
    heads: int
    """Heads seen (interim included)."""


def run_ours(reads: list[bytes]) -> Outcome:
    reader = ResponseReader()
    body = consumed = 0
    try:
        for data in reads:
            consumed += len(data)
            body += len(reader.feed(data))
            if reader.complete:
                break
    except Exception as exc:
        return Outcome(_err(exc), body, consumed, reader.interim + (reader.head is not None))
    state = "complete" if reader.complete else "incomplete"
    return Outcome(state, body, consumed, reader.interim + (reader.head is not None))


def h11_client() -> h11.Connection:
    conn = h11.Connection(h11.CLIENT)
    conn.send(
        h11.Request(
            method="POST",
            target="/v1/chat/completions",
            headers=[("Host", "127.0.0.1:8000"), ("Content-Length", "2")],
        )
    )
    conn.send(h11.Data(data=b"{}"))
    conn.send(h11.EndOfMessage())
    return conn


def run_h11(reads: list[bytes]) -> Outcome:
    conn = h11_client()
    body = consumed = heads = 0
    try:
        for data in reads:
            consumed += len(data)
            conn.receive_data(data)
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    break
                if isinstance(event, h11.Data):
                    body += len(event.data)
                elif isinstance(event, h11.Response | h11.InformationalResponse):
                    heads += 1
                elif isinstance(event, h11.EndOfMessage):
                    return Outcome("complete", body, consumed, heads)
    except Exception as exc:
        return Outcome(_err(exc), body, consumed, heads)
    return Outcome("incomplete", body, consumed, heads)


def _err(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc)[:70]}"


READERS: dict[str, Callable[[list[bytes]], Outcome]] = {"ours": run_ours, "h11": run_h11}


# --------------------------------------------------------------------------- hostile inputs
def _endless(piece: bytes, total: int, read: int = 65536) -> Iterator[bytes]:
    block = (piece * (read // len(piece) + 1))[:read]
    for _ in range(total // read):
        yield block


def hostile_cases(total: int) -> dict[str, list[bytes]]:
    """Each case's reads. ``total``: bytes of each endless input (the caps must stop it long
    before)."""
    ok_head = HEAD
    cases: dict[str, list[bytes]] = {
        "oversized head (one endless header value)": [
            b"HTTP/1.1 200 OK\r\nx-big: ",
            *_endless(b"a", total),
        ],
        "huge header count (a: b lines)": [b"HTTP/1.1 200 OK\r\n", *_endless(b"a: b\r\n", total)],
        "endless status line": list(_endless(b"H", total)),
        "interim flood (103 heads forever)": list(
            _endless(b"HTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\n", total)
        ),
        "endless chunk-size line": [ok_head, *_endless(b"1", total)],
        "endless chunk extension": [ok_head, b"5;", *_endless(b"x", total)],
        "endless trailer": [ok_head, b"0\r\n", *_endless(b"x-t: y\r\n", total)],
        "chunk size -5": [ok_head, b"-5\r\nhello\r\n0\r\n\r\n"],
        "chunk size 0x10": [ok_head, b"0x10\r\n" + b"a" * 16 + b"\r\n0\r\n\r\n"],
        "chunk size 21 hex digits": [ok_head, b"1" + b"0" * 20 + b"\r\nabc"],
        "chunk size 17 hex digits": [ok_head, b"1" + b"0" * 16 + b"\r\nabc"],
        "chunk size ' 5' (leading space)": [ok_head, b" 5\r\nhello\r\n0\r\n\r\n"],
        "chunk size '5 ' (trailing space)": [ok_head, b"5 \r\nhello\r\n0\r\n\r\n"],
        "chunk longer than its size": [ok_head, b"5\r\nhello world\r\n0\r\n\r\n"],
        "chunk size with NUL in extension": [ok_head, b"5;a\x00b\r\nhello\r\n0\r\n\r\n"],
        "Content-Length and chunked": [
            b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ntransfer-encoding: chunked\r\n\r\n"
            b"5\r\nhello\r\n0\r\n\r\n"
        ],
        "Content-Length: 5, 5": [b"HTTP/1.1 200 OK\r\ncontent-length: 5, 5\r\n\r\nhello"],
        "two Content-Length: 5": [
            b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-length: 5\r\n\r\nhello"
        ],
        "obs-fold header": [b"HTTP/1.1 200 OK\r\nx-a: b\r\n c\r\ncontent-length: 0\r\n\r\n"],
        "space before colon": [b"HTTP/1.1 200 OK\r\nx-a : b\r\ncontent-length: 0\r\n\r\n"],
        "status 2 digits": [b"HTTP/1.1 20 OK\r\ncontent-length: 0\r\n\r\n"],
        "bare LF lines": [b"HTTP/1.1 200 OK\ncontent-length: 5\n\nhello"],
        "no reason phrase": [b"HTTP/1.1 200\r\ncontent-length: 5\r\n\r\nhello"],
    }
    return cases


def slowloris_reads() -> list[bytes]:
    """A 15 KiB head (under both head caps), one byte a read, never finished."""
    head = b"HTTP/1.1 200 OK\r\n" + b"x-pad: " + b"p" * (15 * 1024) + b"\r\n"
    return byte_reads(head)


# --------------------------------------------------------------------------- measuring
def cpu_time(fn: Callable[[list[bytes]], Outcome], reads: list[bytes], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.process_time()
        fn(reads)
        best = min(best, time.process_time() - t0)
    return best


def calls(fn: Callable[[list[bytes]], Outcome], reads: list[bytes]) -> int:
    prof = cProfile.Profile()
    prof.enable()
    fn(reads)
    prof.disable()
    return sum(entry.callcount for entry in prof.getstats())


def peak_memory(fn: Callable[[list[bytes]], Outcome], reads: list[bytes]) -> int:
    """Bytes the reader allocated at its peak beyond its input (the reads are built first)."""
    tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    fn(reads)
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    return peak


def md_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def happy(repeats: int) -> tuple[str, dict[str, object]]:
    realistic = realistic_reads()
    data = b"".join(realistic)
    one_byte = byte_reads(data)
    rows: list[list[str]] = []
    out: dict[str, object] = {}
    for label, reads in (("realistic reads", realistic), ("1-byte reads", one_byte)):
        res = {}
        for name, fn in READERS.items():
            outcome = fn(reads)
            assert outcome.result == "complete", (name, label, outcome)
            t = cpu_time(fn, reads, repeats if len(reads) < 10_000 else 1)
            res[name] = {
                "cpu_us_per_token": t / TOKENS * 1e6,
                "cpu_ms_per_mb": t / (len(data) / 1e6) * 1e3,
                "calls_per_token": calls(fn, reads) / TOKENS,
                "peak_kib": peak_memory(fn, reads) / 1024,
                "body_bytes": outcome.body_bytes,
            }
        assert res["ours"]["body_bytes"] == res["h11"]["body_bytes"]
        ratio = res["h11"]["cpu_us_per_token"] / res["ours"]["cpu_us_per_token"]
        rows.append(
            [
                f"{label} ({len(reads):,})",
                f"{res['ours']['cpu_us_per_token']:.2f}",
                f"{res['h11']['cpu_us_per_token']:.2f}",
                f"**{ratio:.1f}x**",
                f"{res['ours']['calls_per_token']:.1f}",
                f"{res['h11']['calls_per_token']:.1f}",
                f"{res['ours']['peak_kib']:.0f}",
                f"{res['h11']['peak_kib']:.0f}",
            ]
        )
        out[label] = res
    header = [
        f"{TOKENS:,}-token chunked SSE response, {len(data):,} bytes (reads)",
        "ours µs CPU/token",
        "h11 µs CPU/token",
        "h11 / ours",
        "ours calls/token",
        "h11 calls/token",
        "ours peak KiB",
        "h11 peak KiB",
    ]
    return md_table(header, rows), out


def hostile(total: int, repeats: int) -> tuple[str, dict[str, object]]:
    rows: list[list[str]] = []
    out: dict[str, object] = {}
    cases = hostile_cases(total)
    cases["slowloris head, 1-byte reads (15 KiB)"] = slowloris_reads()
    for label, reads in cases.items():
        fed = sum(map(len, reads))
        cells = [f"{label} ({fed:,} B)"]
        res = {}
        for name, fn in READERS.items():
            outcome = fn(reads)
            peak = peak_memory(fn, reads)
            t = cpu_time(fn, reads, repeats) if "slowloris" in label else None
            res[name] = {**outcome.__dict__, "peak_kib": peak / 1024, "cpu_s": t}
            where = f"after {outcome.consumed:,} B" if outcome.consumed < fed else "all fed"
            cpu = f", {t * 1e3:.0f} ms CPU" if t is not None else ""
            cells.append(f"{outcome.result} ({where}, peak {peak / 1024:,.0f} KiB{cpu})")
        rows.append(cells)
        out[label] = res
    return md_table(["input", "ours", "h11"], rows), out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--endless-mib", type=int, default=16, help="bytes of each endless input")
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args(argv)
    happy_md, happy_data = happy(args.repeats)
    hostile_md, hostile_data = hostile(args.endless_mib << 20, args.repeats)
    print(f"h11 {version('h11')}, Python {sys.version.split()[0]}\n")
    print(happy_md, end="\n\n")
    print(hostile_md)
    if args.json:
        doc = {"h11": version("h11"), "happy": happy_data, "hostile": hostile_data}
        Path(args.json).write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
