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
- each response starts with one SSE comment line whose length is ``seq % 1024`` bytes (not with
  ``--no-tag``; on
  WebSocket: a ``"p"`` field of that length in the first chunk), so the body size of a complete
  stream identifies the stream (with its start time) for clients that keep only byte counts,
  not chunk ids (streamslo's results directory);
- ``--ttft-ms`` sets the first token's delay apart from the interval (a known schedule: token 1
  at ``t_req + ttft``, token k at ``t_req + ttft + (k - 1) * period``).

Also answers ``GET /v1/models`` (streamslo asks for a model name once), keeps connections alive
unless the client sends ``Connection: close``, and speaks the suite's WebSocket protocol on
``GET /v1/ws`` (one JSON request per text message; one chunk per text message, then
``[DONE]``; the same schedule), so the WebSocket clients are measured against the same emitter.

Run: ``python bench/_emitter.py --port 0 --ready FILE --log FILE`` (the chosen port is written to
``--ready``).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import heapq
import json
import os
import signal
import time

_CHAT_JSON = (
    b'","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"tok"},'
    b'"finish_reason":null}]}'
)
_MODELS = b'{"object":"list","data":[{"id":"bench","object":"model"}]}'
_WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def _last_json(n: int) -> bytes:
    return (
        b'","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"tok"},'
        b'"finish_reason":"length"}],"usage":{"prompt_tokens":1,"completion_tokens":'
        + str(n).encode()
        + b',"total_tokens":'
        + str(n + 1).encode()
        + b"}}"
    )


def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _ws_frame(payload: bytes, opcode: int = 0x1) -> bytes:
    """One unmasked server frame (FIN set)."""
    n = len(payload)
    if n < 126:
        head = bytes((0x80 | opcode, n))
    elif n < 65536:
        head = bytes((0x80 | opcode, 126)) + n.to_bytes(2, "big")
    else:
        head = bytes((0x80 | opcode, 127)) + n.to_bytes(8, "big")
    return head + payload


class Framing:
    """How one transport wraps a chunk's JSON: SSE (chunked ``data:`` events) or WebSocket
    (one text message per chunk)."""

    __slots__ = ("done", "head", "tail", "wrap")

    def __init__(self, ws: bool) -> None:
        self.head = b'{"id":"' if ws else b'data: {"id":"'
        self.tail = b"" if ws else b"\n\n"
        self.done = b"[DONE]" if ws else b"data: [DONE]\n\n"
        self.wrap = _ws_frame if ws else _chunk


SSE, WS = Framing(False), Framing(True)


class Stream:
    __slots__ = (
        "alive",
        "body_bytes",
        "close_after",
        "fr",
        "k",
        "n",
        "pad",
        "proto",
        "seq",
        "t_req",
        "writes",
    )

    def __init__(
        self, proto: EmitterProtocol, seq: int, t_req: float, n: int, close_after: bool, fr: Framing
    ) -> None:
        self.proto = proto
        self.fr = fr
        self.pad = b""
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

    def __init__(
        self,
        period: float,
        slack: float,
        ttft: float | None = None,
        tag: bool = True,
        seq_start: int = 0,
        seq_step: int = 1,
    ) -> None:
        self.tag = tag
        self.period = period
        self.ttft = period if ttft is None else ttft
        self.slack = slack
        self.heap: list[tuple[float, int, Stream]] = []
        self.streams: list[Stream] = []
        self.seq = seq_start
        self.seq_step = seq_step
        self.loop = asyncio.get_event_loop()
        self.timer: asyncio.TimerHandle | None = None
        self.timer_at = float("inf")

    def add(self, proto: EmitterProtocol, n: int, close_after: bool, ws: bool = False) -> None:
        t_req = time.time()
        self.seq += self.seq_step
        st = Stream(proto, self.seq, t_req, n, close_after, WS if ws else SSE)
        self.streams.append(st)
        if ws:
            # The size tag rides in the first chunk: ``","p":"ppp`` (10 bytes + the pad).
            st.pad = b'","p":"' + b"p" * (self.seq % 1024)
        else:
            head = (
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                b"Transfer-Encoding: chunked\r\n"
                + (b"Connection: close\r\n" if close_after else b"")
                + b"\r\n"
            )
            if self.tag:
                pad = b":" + b"p" * (self.seq % 1024) + b"\n"
                st.body_bytes += len(pad)
                proto.transport.write(head + _chunk(pad))
            else:
                proto.transport.write(head)
        proto.stream = st
        if n <= 0:
            self._finish(st, b"")
            return
        due = t_req + self.ttft
        heapq.heappush(self.heap, (due, st.seq, st))
        self._arm(due)

    def _arm(self, due: float) -> None:
        if due < self.timer_at:
            if self.timer is not None:
                self.timer.cancel()
            self.timer_at = due
            self.timer = self.loop.call_later(max(0.0, due - time.time()), self.tick)

    def _finish(self, st: Stream, last: bytes) -> None:
        fr = st.fr
        tail = last + fr.wrap(fr.done) + (b"" if fr is WS else b"0\r\n\r\n")
        st.body_bytes += len(fr.done)
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
            fr = st.fr
            t = time.time()
            stamp = b"%.6f" % t
            if st.pad:
                stamp += st.pad
                st.pad = b""
            if st.k >= st.n:
                payload = fr.head + stamp + _last_json(st.n) + fr.tail
                st.body_bytes += len(payload)
                st.writes.append(t)
                self._finish(st, fr.wrap(payload))
            else:
                payload = fr.head + stamp + _CHAT_JSON + fr.tail
                st.body_bytes += len(payload)
                st.writes.append(t)
                st.proto.transport.write(fr.wrap(payload))
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
            json.dump({"period": self.period, "ttft": self.ttft, "streams": out}, f)
        os.replace(tmp, path)


def _max_tokens(body: bytes) -> int:
    try:
        return int(json.loads(body or b"{}").get("max_tokens") or 100)
    except (ValueError, AttributeError):
        return 100


class EmitterProtocol(asyncio.Protocol):
    __slots__ = ("buf", "emitter", "stream", "transport", "ws")

    def __init__(self, emitter: Emitter) -> None:
        self.emitter = emitter
        self.buf = b""
        self.ws = False  # upgraded to WebSocket
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
        if self.ws:
            self._ws_frames()
            return
        while self.stream is None and not self.ws:
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
            if method == "GET" and path.startswith("/v1/ws") and "sec-websocket-key" in headers:
                key = headers["sec-websocket-key"].encode()
                accept = base64.b64encode(hashlib.sha1(key + _WS_GUID).digest())
                self.transport.write(
                    b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                    b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n"
                )
                self.ws = True
                self._ws_frames()
                return
            if method != "POST" or not path.startswith("/v1/chat/completions"):
                self.transport.write(
                    b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                )
                self.transport.close()
                return
            self.emitter.add(self, _max_tokens(body), close)
            if close:
                return

    def _ws_frames(self) -> None:
        """Client frames (masked): a text message is a request; close is answered; ping, pong."""
        buf = self.buf
        while len(buf) >= 2:
            b0, b1 = buf[0], buf[1]
            n, pos = b1 & 0x7F, 2
            if n == 126:
                if len(buf) < 4:
                    break
                n, pos = int.from_bytes(buf[2:4], "big"), 4
            elif n == 127:
                if len(buf) < 10:
                    break
                n, pos = int.from_bytes(buf[2:10], "big"), 10
            masked = b1 & 0x80
            if len(buf) < pos + (4 if masked else 0) + n:
                break
            if masked:
                mask = buf[pos : pos + 4]
                pos += 4
                raw = buf[pos : pos + n]
                payload = bytes(b ^ mask[i & 3] for i, b in enumerate(raw))
            else:
                payload = buf[pos : pos + n]
            buf = buf[pos + n :]
            opcode = b0 & 0x0F
            if opcode == 0x8:  # close: answer it and end
                self.transport.write(_ws_frame(payload[:2], 0x8))
                self.transport.close()
                self.buf = b""
                return
            if opcode == 0x9:
                self.transport.write(_ws_frame(payload, 0xA))
            elif opcode == 0x1 and self.stream is None:
                self.emitter.add(self, _max_tokens(payload), False, ws=True)
        self.buf = buf


async def _main(args: argparse.Namespace) -> None:
    ttft = None if args.ttft_ms is None else args.ttft_ms / 1000.0
    if args.flood:
        global _CHAT_JSON
        _CHAT_JSON = _CHAT_JSON.replace(b'"content":"tok"', b'"content":"x"')
        args.period_ms, ttft = 0.0, 0.0
    emitter = Emitter(
        args.period_ms / 1000.0,
        args.slack_ms / 1000.0,
        ttft,
        not args.no_tag,
        args.seq_start,
        args.seq_step,
    )
    loop = asyncio.get_running_loop()
    emitter.loop = loop
    server = await loop.create_server(
        lambda: EmitterProtocol(emitter),
        "127.0.0.1",
        args.port,
        backlog=4096,
        reuse_address=True,
        reuse_port=args.reuse_port or None,
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
    p.add_argument(
        "--ttft-ms", type=float, default=None, help="first token's delay (default: the period)"
    )
    p.add_argument("--slack-ms", type=float, default=0.2, help="write tokens due this soon early")
    p.add_argument(
        "--flood",
        action="store_true",
        help="write every event of a response at once, as fast as the socket takes them, each "
        "a one-character token (bench/bench_flood.py); no schedule",
    )
    p.add_argument(
        "--reuse-port",
        action="store_true",
        help="listen with SO_REUSEPORT: several emitters on one port share its connections "
        "(bench/bench_scaleout.py --layout shared)",
    )
    p.add_argument(
        "--seq-start",
        type=int,
        default=0,
        help="streams are numbered seq-start + k * seq-step (k = 1, 2...): emitters sharing a "
        "port give their streams disjoint size tags",
    )
    p.add_argument("--seq-step", type=int, default=1)
    p.add_argument(
        "--no-tag",
        action="store_true",
        help="no size-tag comment before an SSE stream's first event (vLLM's bench client, which "
        "strips each read's trailing blank line, then never finds an event's end after a comment)",
    )
    asyncio.run(_main(p.parse_args()))


if __name__ == "__main__":
    main()
