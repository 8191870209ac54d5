"""A lean token emitter for the stream-user benchmark (``bench/bench_stream_users.py``).

A raw asyncio TCP server (``asyncio.Protocol``, no framework) on 127.0.0.1 that answers
``POST /v1/chat/completions`` with ``200 text/event-stream``, chunked, one chunk per token on an
ABSOLUTE schedule: token k (k = 1..max_tokens) is due at ``t_req + k * period`` where ``t_req``
is when the request was fully read, so a late tick never shifts later tokens (no drift).

Leanness at 500 streams x 50 tokens/s (25k chunks/s): one timer callback, driven by a heap of
due times, writes every stream that is due on each tick (no coroutine or timer per token); a
chunk is two pre-built byte strings around one formatted timestamp.

Measurement hooks:

- each token chunk's ``id`` is the epoch (``time.time()``, 6 decimals) taken just before its
  write, so a client can compute lateness = its receive time - the emit time exactly;
- the emitter keeps every write's epoch per stream, and on SIGTERM/SIGINT writes them to
  ``--log`` (JSON: one object per stream with ``t_req``, ``bytes`` = body bytes after de-chunking,
  ``w`` = the write epochs of tokens 1..n, ``done``);
- each response starts with one SSE comment line whose length is ``seq % 1024`` bytes, so the
  body size of a complete stream identifies the stream (with its start time) for clients that
  keep only byte counts, not chunk ids (streamslo's results directory).

Also answers ``GET /v1/models`` (streamslo asks for a model name once) and keeps connections
alive unless the client sends ``Connection: close``.

Run: ``python bench/_emitter.py --port 0 --ready FILE --log FILE`` (the chosen port is written to
``--ready``).
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import json
import os
import signal
import time

_CHAT = (
    b'","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"tok"},'
    b'"finish_reason":null}]}\n\n'
)
_HEAD = b'data: {"id":"'
_DONE = b"data: [DONE]\n\n"
_MODELS = b'{"object":"list","data":[{"id":"bench","object":"model"}]}'


def _last_tail(n: int) -> bytes:
    return (
        b'","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"tok"},'
        b'"finish_reason":"length"}],"usage":{"prompt_tokens":1,"completion_tokens":'
        + str(n).encode()
        + b',"total_tokens":'
        + str(n + 1).encode()
        + b"}}\n\n"
    )


def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


class Stream:
    __slots__ = ("alive", "body_bytes", "close_after", "k", "n", "proto", "seq", "t_req", "writes")

    def __init__(self, proto: EmitterProtocol, seq: int, t_req: float, n: int, close_after: bool) -> None:
        self.proto = proto
        self.seq = seq
        self.t_req = t_req
        self.n = n
        self.k = 0
        self.alive = True
        self.close_after = close_after
        self.body_bytes = 0
        self.writes: list[float] = []


class Emitter:
    """The schedule: a heap of (due, seq, stream); one timer callback writes what is due."""

    def __init__(self, period: float, slack: float) -> None:
        self.period = period
        self.slack = slack
        self.heap: list[tuple[float, int, Stream]] = []
        self.streams: list[Stream] = []
        self.seq = 0
        self.loop = asyncio.get_event_loop()
        self.timer: asyncio.TimerHandle | None = None
        self.timer_at = float("inf")

    def add(self, proto: EmitterProtocol, n: int, close_after: bool) -> None:
        t_req = time.time()
        self.seq += 1
        st = Stream(proto, self.seq, t_req, n, close_after)
        self.streams.append(st)
        head = (
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
            b"Transfer-Encoding: chunked\r\n"
            + (b"Connection: close\r\n" if close_after else b"")
            + b"\r\n"
        )
        pad = b":" + b"p" * (self.seq % 1024) + b"\n"
        st.body_bytes += len(pad)
        proto.transport.write(head + _chunk(pad))
        proto.stream = st
        if n <= 0:
            self._finish(st, b"")
            return
        due = t_req + self.period
        heapq.heappush(self.heap, (due, st.seq, st))
        self._arm(due)

    def _arm(self, due: float) -> None:
        if due < self.timer_at:
            if self.timer is not None:
                self.timer.cancel()
            self.timer_at = due
            self.timer = self.loop.call_later(max(0.0, due - time.time()), self.tick)

    def _finish(self, st: Stream, last: bytes) -> None:
        tail = last + _chunk(_DONE) + b"0\r\n\r\n"
        st.body_bytes += len(_DONE)
        st.proto.transport.write(tail)
        st.proto.stream = None
        if st.close_after:
            st.proto.transport.close()

    def tick(self) -> None:
        self.timer = None
        self.timer_at = float("inf")
        heap = self.heap
        period = self.period
        pop, push = heapq.heappop, heapq.heappush
        now = time.time()
        horizon = now + self.slack
        while heap and heap[0][0] <= horizon:
            due, seq, st = pop(heap)
            if not st.alive:
                continue
            st.k += 1
            t = time.time()
            stamp = b"%.6f" % t
            if st.k >= st.n:
                payload = _HEAD + stamp + _last_tail(st.n)
                st.body_bytes += len(payload)
                st.writes.append(t)
                self._finish(st, _chunk(payload))
            else:
                payload = _HEAD + stamp + _CHAT
                st.body_bytes += len(payload)
                st.writes.append(t)
                st.proto.transport.write(b"%x\r\n%s\r\n" % (len(payload), payload))
                push(heap, (due + period, seq, st))
        if heap:
            self._arm(max(heap[0][0], time.time() + self.slack))

    def dump(self, path: str) -> None:
        out = [
            {"t_req": s.t_req, "bytes": s.body_bytes, "n": s.n, "done": s.k >= s.n, "w": s.writes}
            for s in self.streams
        ]
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"period": self.period, "streams": out}, f)
        os.replace(tmp, path)


class EmitterProtocol(asyncio.Protocol):
    __slots__ = ("buf", "emitter", "stream", "transport")

    def __init__(self, emitter: Emitter) -> None:
        self.emitter = emitter
        self.buf = b""
        self.stream: Stream | None = None
        self.transport: asyncio.Transport = None  # type: ignore[assignment]

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        if self.stream is not None:
            self.stream.alive = False
            self.stream = None

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while self.stream is None:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end].decode("latin-1")
            lines = head.split("\r\n")
            parts = lines[0].split(" ")
            headers = {}
            for line in lines[1:]:
                k, _, v = line.partition(":")
                headers[k.strip().lower()] = v.strip()
            length = int(headers.get("content-length", "0") or 0)
            if len(self.buf) < end + 4 + length:
                return
            body = self.buf[end + 4 : end + 4 + length]
            self.buf = self.buf[end + 4 + length :]
            close = headers.get("connection", "").lower() == "close"
            method, path = [*parts, "", ""][:2]
            if method == "GET" and path.startswith("/v1/models"):
                self.transport.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                    % (len(_MODELS), _MODELS)
                )
                if close:
                    self.transport.close()
                    return
                continue
            if method != "POST" or not path.startswith("/v1/chat/completions"):
                self.transport.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                self.transport.close()
                return
            try:
                n = int(json.loads(body or b"{}").get("max_tokens") or 100)
            except (ValueError, AttributeError):
                n = 100
            self.emitter.add(self, n, close)
            if close:
                return


async def _main(args: argparse.Namespace) -> None:
    emitter = Emitter(args.period_ms / 1000.0, args.slack_ms / 1000.0)
    loop = asyncio.get_running_loop()
    emitter.loop = loop
    server = await loop.create_server(
        lambda: EmitterProtocol(emitter), "127.0.0.1", args.port, backlog=4096, reuse_address=True
    )
    port = server.sockets[0].getsockname()[1]
    if args.ready:
        tmp = args.ready + ".tmp"
        with open(tmp, "w") as f:
            f.write(str(port))
        os.replace(tmp, args.ready)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    server.close()
    if args.log:
        emitter.dump(args.log)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--ready", default="", help="write the bound port here once listening")
    p.add_argument("--log", default="", help="write per-stream write epochs here on SIGTERM")
    p.add_argument("--period-ms", type=float, default=20.0)
    p.add_argument("--slack-ms", type=float, default=0.2, help="write tokens due this soon early")
    asyncio.run(_main(p.parse_args()))


if __name__ == "__main__":
    main()
