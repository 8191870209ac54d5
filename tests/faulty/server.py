"""A deliberately faulty streaming LLM server: every outcome of SPEC §3, on purpose.

This is a raw :func:`asyncio.start_server` TCP server (no framework), so every byte on the
wire is under control: HTTP/1.1 chunked bodies that never finish, HTTP chunks cut in half,
resets (``SO_LINGER`` 0), responses that never start, hand-rolled RFC 6455 WebSocket frames
with arbitrary close codes, binary frames, fragmented messages and frames that never end.

Routes (SPEC §2): ``POST /v1/chat/completions``, ``POST /v1/completions``,
``POST /v1/stream``, ``GET /v1/models``, ``GET /health`` and WebSocket ``GET /v1/ws`` (one
JSON text frame per request; chunk frames, then a ``[DONE]`` text frame; the connection may
carry the next request).

Selecting a scenario:

* by the request body's ``model`` field (so any client's ``--model NAME`` selects it; on
  WebSocket, the ``model`` of each request frame). No ``model`` means ``ok``; an unknown one
  gets a 404 (``model_not_found``; on WebSocket an error frame and close 1008).
* by a path prefix, ``/s/<scenario>/v1/...`` (also ``/s/<scenario>/v1/ws``). The prefix
  wins over ``model``. WebSocket scenarios that act on the *handshake* (``ws_refuse_403``,
  ``ws_refuse_500``, ``no_headers``, ``close_immediately``, ``reset_immediately``) can only
  do so when selected by the path, since the handshake comes before any request frame; see
  :data:`WS_HANDSHAKE_SCENARIOS`. :data:`EXPECTED` assumes the path for those.

The request's ``max_tokens`` (or ``max_completion_tokens``; default 16) is the token count
``n``. Content chunk ``i`` (0-based) carries exactly one token, the text ``" t{i}"``. Usage
(``prompt_tokens`` = words in the prompt) is sent only when ``stream_options.include_usage``
is true, except where a scenario says otherwise. ``ignore_eos`` and ``stream`` are read but
change nothing: the server always streams. Where a scenario says ``k``, ``k = max(1, n // 2)``.

:data:`EXPECTED` gives the outcome a correct client reports, assuming it asks for
``ignore_eos: true`` and ``stream_options.include_usage: true``, expects ``[DONE]``, and runs
with :data:`STALL_TIMEOUT_S` and :data:`REQUEST_TIMEOUT_S`; every delay here is comfortably
on one side of those. ``cancelled`` is the client's own doing: use ``endless`` with a short
drain. Outcomes the SPEC does not settle are left out of :data:`EXPECTED` and explained in
:data:`UNSETTLED`.

Run: ``python -m tests.faulty.server --port N`` prints ``READY <port>`` once listening on
127.0.0.1 (``--port 0`` picks a free port). Tests use
:func:`tests.faulty.process.start_faulty_server`.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import hashlib
import itertools
import json
import os
import signal
import socket
import struct
import sys
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "ENDLESS_INTERVAL_S",
    "ENDLESS_LINE_MAX_BYTES",
    "ENDLESS_S",
    "EXPECTED",
    "GIANT_EVENT_BYTES",
    "HOLD_MAX_S",
    "OUTCOMES",
    "REQUEST_TIMEOUT_S",
    "SCENARIOS",
    "SHORT_PAUSE_S",
    "STALL_S",
    "STALL_TIMEOUT_S",
    "TIMED_ITL_S",
    "TIMED_TTFT_S",
    "UNSETTLED",
    "WS_HANDSHAKE_SCENARIOS",
    "Scenario",
    "main",
    "serve",
    "token_text",
]

# --- the client settings EXPECTED assumes, and the server's own timings -------------------

#: Client stall timeout (``--stall-timeout``) that :data:`EXPECTED` assumes.
STALL_TIMEOUT_S = 1.0
#: Client request deadline (``--request-timeout``) that :data:`EXPECTED` assumes.
REQUEST_TIMEOUT_S = 4.0
#: Token count when the request has no ``max_tokens``.
DEFAULT_MAX_TOKENS = 16
#: Silence in the stall scenarios (3x the stall timeout), after which the server hangs up.
STALL_S = 3.0
#: ``no_headers`` holds the connection silent until the client leaves, at most this long.
HOLD_MAX_S = 30.0
#: ``endless`` streams this long (7.5x the request timeout), one chunk every interval.
ENDLESS_S = 30.0
ENDLESS_INTERVAL_S = 0.2
#: ``timed``: first token this long after the request is read, then one every TIMED_ITL_S.
TIMED_TTFT_S = 0.3
TIMED_ITL_S = 0.05
#: ``ok_short_pause``: one pause, well under the stall timeout.
SHORT_PAUSE_S = 0.4
#: ``giant_event``: one content chunk whose text is this many bytes.
GIANT_EVENT_BYTES = 8 * 1024 * 1024
#: ``endless_line``: bytes of one line (WS: one frame) with no end, sent in blocks.
ENDLESS_LINE_MAX_BYTES = 64 * 1024 * 1024
ENDLESS_LINE_BLOCK = 64 * 1024
ENDLESS_LINE_INTERVAL_S = 0.005
#: ``ok_dribble``: SSE pieces cycle through these sizes (bytes), a pause every 2 pieces.
DRIBBLE_SIZES = (1, 2, 3)
DRIBBLE_PAUSE_S = 0.001
#: ``ok_dribble`` on WebSocket: fragment payload size (bytes).
WS_FRAGMENT = 16
#: How long the server waits for the client's close frame after sending its own.
WS_CLOSE_WAIT_S = 2.0
#: Idle keep-alive connections are closed after this long.
IDLE_TIMEOUT_S = 120.0

#: Every outcome of SPEC §3.
OUTCOMES = (
    "ok",
    "truncated",
    "silent_truncation",
    "error_event",
    "malformed",
    "stalled",
    "timeout",
    "http_4xx",
    "http_5xx",
    "connect_error",
    "cancelled",
)

_WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_IDS = itertools.count(1)
_REASONS = {
    101: "Switching Protocols",
    200: "OK",
    400: "Bad Request",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Payload Too Large",
    426: "Upgrade Required",
    429: "Too Many Requests",
    500: "Internal Server Error",
    503: "Service Unavailable",
}
_ERROR_TYPES = {
    400: "invalid_request_error",
    403: "permission_error",
    404: "not_found_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    503: "service_unavailable",
}


def token_text(i: int) -> str:
    """The text of content chunk ``i`` (0-based): exactly one token."""
    return f" t{i}"


def _ws_close_code(status: int) -> int:
    """The WebSocket close code that twins an HTTP error status (SPEC §2)."""
    if status == 413:
        return 1009
    if status == 429:
        return 1013
    if status >= 500:
        return 1011
    return 1008


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


def _error_body(status: int, message: str) -> dict[str, Any]:
    return {
        "error": {"message": message, "type": _ERROR_TYPES.get(status, "error"), "code": status}
    }


# --- requests and chunks -----------------------------------------------------------------


@dataclass
class Request:
    """One streaming request, as the scenario sees it."""

    endpoint: str  # "chat" | "completions" | "stream"
    body: dict[str, Any]
    scenario: str

    @property
    def chat(self) -> bool:
        """True when the chunks are ``chat.completion.chunk`` (else ``text_completion``)."""
        return self.endpoint == "chat"

    @property
    def max_tokens(self) -> int:
        """The token count ``n``."""
        value = self.body.get("max_tokens", self.body.get("max_completion_tokens"))
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            return DEFAULT_MAX_TOKENS
        return value

    @property
    def include_usage(self) -> bool:
        """Whether ``stream_options.include_usage`` was asked for."""
        options = self.body.get("stream_options")
        return isinstance(options, dict) and options.get("include_usage") is True

    @property
    def prompt_tokens(self) -> int:
        """Words in the prompt (or in the messages' text)."""
        if self.chat:
            messages = self.body.get("messages")
            text = " ".join(
                str(m.get("content", "")) for m in messages or () if isinstance(m, dict)
            )
        else:
            text = str(self.body.get("prompt", ""))
        return len(text.split())

    def usage_if_asked(self, completion_tokens: int) -> int | None:
        """``completion_tokens`` when usage was asked for, else ``None``."""
        return completion_tokens if self.include_usage else None


class Chunks:
    """Builds the chunk objects of one response (SPEC §2 shapes)."""

    def __init__(self, req: Request) -> None:
        self.req = req
        prefix = "chatcmpl" if req.chat else "cmpl"
        self.id = f"{prefix}-faulty-{next(_IDS)}"
        self.created = int(time.time())

    def _base(self, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "chat.completion.chunk" if self.req.chat else "text_completion",
            "created": self.created,
            "model": self.req.scenario,
            "choices": choices,
        }

    def usage(self, completion_tokens: int) -> dict[str, int]:
        prompt = self.req.prompt_tokens
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt + completion_tokens,
        }

    def piece(
        self,
        text: str,
        finish: str | None = None,
        usage: int | None = None,
        *,
        delta: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """One chunk with ``text`` (chat: ``delta.content``, or ``delta`` as given)."""
        if self.req.chat:
            choice: dict[str, Any] = {
                "index": 0,
                "delta": {"content": text} if delta is None else delta,
                "logprobs": None,
                "finish_reason": finish,
            }
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
        obj = self._base([choice])
        if usage is not None:
            obj["usage"] = self.usage(usage)
        return obj

    def usage_only(self, completion_tokens: int) -> dict[str, Any]:
        """A vLLM/OpenAI-style final chunk: ``choices: []`` and ``usage``."""
        obj = self._base([])
        obj["usage"] = self.usage(completion_tokens)
        return obj

    def completion(self, n: int) -> dict[str, Any]:
        """A whole non-streaming completion object (for ``json_body``)."""
        text = "".join(token_text(i) for i in range(n))
        if self.req.chat:
            choice: dict[str, Any] = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "length",
            }
            obj_type = "chat.completion"
        else:
            choice = {"index": 0, "text": text, "finish_reason": "length"}
            obj_type = "text_completion"
        return {
            "id": self.id,
            "object": obj_type,
            "created": self.created,
            "model": self.req.scenario,
            "choices": [choice],
            "usage": self.usage(n),
        }


# --- the connection ----------------------------------------------------------------------


class PeerGone(ConnectionError):
    """The client went away (or the server already hung up); the scenario stops."""


class Conn:
    """One TCP connection: writes that stop when the peer is gone, FIN, RST, hold."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.closed = False

    def write_nowait(self, data: bytes) -> None:
        """Queue bytes without waiting (whole frames that must not interleave)."""
        if self.closed or self.writer.transport.is_closing():
            raise PeerGone("connection closed")
        self.writer.write(data)

    async def send(self, data: bytes) -> None:
        """Write bytes and wait for the buffer to drain."""
        self.write_nowait(data)
        await self.writer.drain()

    async def flushed(self, timeout: float = 2.0) -> None:
        """Wait until asyncio's own buffer is empty (handed to the kernel)."""
        deadline = time.monotonic() + timeout
        transport = self.writer.transport
        while (
            not transport.is_closing()
            and transport.get_write_buffer_size()
            and time.monotonic() < deadline
        ):
            await asyncio.sleep(0.005)

    async def fin(self) -> None:
        """Close after flushing (a FIN, no more bytes); abort if that hangs."""
        if self.closed:
            return
        self.closed = True
        self.writer.close()
        try:
            await asyncio.wait_for(self.writer.wait_closed(), 2.0)
        except (TimeoutError, OSError):
            self.writer.transport.abort()

    async def rst(self) -> None:
        """Close with a TCP reset (``SO_LINGER`` 0), dropping anything unsent."""
        if self.closed:
            return
        self.closed = True
        sock = self.writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.writer.transport.abort()
        await asyncio.sleep(0)

    async def hold(self, max_s: float) -> None:
        """Send nothing; wait for the client to leave (EOF), at most ``max_s``; then FIN."""
        deadline = time.monotonic() + max_s
        with contextlib.suppress(TimeoutError, OSError):
            while (left := deadline - time.monotonic()) > 0:
                if not await asyncio.wait_for(self.reader.read(65536), left):
                    break
        await self.fin()


# --- HTTP ----------------------------------------------------------------------------------


@dataclass
class HttpRequest:
    """A parsed HTTP/1.1 request."""

    method: str
    target: str
    headers: dict[str, str]
    body: bytes

    @property
    def keep_alive(self) -> bool:
        return "close" not in self.headers.get("connection", "").lower()


async def _read_request(reader: asyncio.StreamReader) -> HttpRequest | None:
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), IDLE_TIMEOUT_S)
    except (asyncio.IncompleteReadError, TimeoutError):
        return None
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3:
        return None
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if ":" in line:
            key, value = line.split(":", 1)
            headers[key.strip().lower()] = value.strip()
    body = b""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        pieces = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0].strip(), 16)
            if size == 0:
                await reader.readuntil(b"\r\n")
                break
            pieces.append(await reader.readexactly(size))
            await reader.readexactly(2)
        body = b"".join(pieces)
    elif headers.get("content-length"):
        body = await reader.readexactly(int(headers["content-length"]))
    return HttpRequest(parts[0].upper(), parts[1], headers, body)


def _response_head(status: int, headers: list[tuple[str, str]]) -> bytes:
    lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}"]
    lines += [f"{k}: {v}" for k, v in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def _send_json(
    conn: Conn,
    status: int,
    obj: Any,
    *,
    keep_alive: bool,
    extra: tuple[tuple[str, str], ...] = (),
) -> None:
    body = _dumps(obj).encode()
    headers = [
        ("content-type", "application/json"),
        ("content-length", str(len(body))),
        *extra,
    ]
    if not keep_alive:
        headers.append(("connection", "close"))
    await conn.send(_response_head(status, headers) + body)


# --- the output of one request: SSE and WebSocket share one interface ----------------------


class Out:
    """Where a scenario writes one request's response. Subclassed per transport."""

    proto = ""

    def __init__(self, conn: Conn, req: Request) -> None:
        self.conn = conn
        self.req = req
        self.chunks = Chunks(req)

    @property
    def closed(self) -> bool:
        return self.conn.closed

    async def begin(self) -> None:
        """Start the stream (SSE: the 200 headers; WS: nothing)."""

    async def chunk(self, obj: dict[str, Any]) -> None:
        """Send one chunk object."""
        await self.data(_dumps(obj))

    async def data(self, text: str) -> None:
        """Send one SSE data event / WS text frame with arbitrary text."""
        raise NotImplementedError

    async def done(self) -> None:
        """Send the terminal marker ``[DONE]``."""
        await self.data("[DONE]")

    async def finish(self) -> None:
        """End the response cleanly (SSE: end of the chunked body; WS: nothing)."""

    async def close_normal(self) -> None:
        """SSE: a clean end of body; WS: close 1000."""
        raise NotImplementedError

    async def error_before(self, status: int, message: str) -> None:
        """An error before the stream (SSE: HTTP status + JSON; WS: error frame + close)."""
        raise NotImplementedError

    async def error_event(self, code: int, message: str) -> None:
        """An error object inside the stream."""
        await self.chunk(_error_body(code, message))

    async def after_error(self, code: int) -> None:
        """What follows an in-stream error (SSE: [DONE] + end; WS: close by the code)."""
        raise NotImplementedError

    async def sleep(self, seconds: float) -> None:
        """Pause (WS: answers a client's close meanwhile and stops the scenario)."""
        await asyncio.sleep(seconds)

    async def sleep_until(self, when: float) -> None:
        """Pause until the loop time ``when``."""
        left = when - asyncio.get_running_loop().time()
        if left > 0:
            await self.sleep(left)

    async def drop(self) -> None:
        """Hang up with a FIN, mid-whatever (SSE: the chunked body left unfinished)."""
        await self.conn.flushed()
        await self.conn.fin()

    async def reset(self) -> None:
        """Hang up with a TCP reset, after letting the client read what was sent."""
        await self.conn.flushed()
        await asyncio.sleep(0.1)
        await self.conn.rst()

    async def hold(self) -> None:
        """Send nothing until the client leaves (at most HOLD_MAX_S), then FIN."""
        await self.conn.hold(HOLD_MAX_S)

    async def partial(self, obj: dict[str, Any]) -> None:
        """Send half of one chunk's framing unit, then FIN."""
        raise NotImplementedError

    async def endless_line(self) -> None:
        """One line (WS: one frame) that never ends, then FIN."""
        raise NotImplementedError


class SseOut(Out):
    """SSE over HTTP/1.1, normally one HTTP chunk per event."""

    proto = "sse"

    def __init__(self, conn: Conn, req: Request, *, keep_alive: bool) -> None:
        super().__init__(conn, req)
        self.keep_alive = keep_alive
        self.started = False
        self.ended = False
        self.eol = "\n"
        self.fields = False  # comments, event:/id:/retry:, unknown fields, "data:" w/o space
        self.multiline = False  # JSON split over two data: lines
        self.dribble = False  # 1-3 byte HTTP chunks, every CR ends a piece
        self.chunked = True  # False: no Transfer-Encoding, body ends at the close
        self.events = 0

    async def begin(self) -> None:
        if self.started:
            return
        self.started = True
        headers = [
            ("content-type", "text/event-stream; charset=utf-8"),
            ("cache-control", "no-cache"),
            ("x-faulty-scenario", self.req.scenario),
        ]
        if self.chunked:
            headers.append(("transfer-encoding", "chunked"))
        if not self.chunked or not self.keep_alive:
            headers.append(("connection", "close"))
        await self.conn.send(_response_head(200, headers))

    async def body(self, data: bytes) -> None:
        """Body bytes, framed as HTTP chunk(s) when chunked."""
        await self.begin()
        if not self.chunked:
            await self.conn.send(data)
            return
        if not self.dribble:
            await self.conn.send(b"%x\r\n%s\r\n" % (len(data), data))
            return
        sizes = itertools.cycle(DRIBBLE_SIZES)
        pos = 0
        count = 0
        while pos < len(data):
            end = min(pos + next(sizes), len(data))
            cr = data.find(b"\r", pos, end)
            if cr != -1:
                end = cr + 1  # every CRLF is split between two pieces
            piece = data[pos:end]
            await self.conn.send(b"%x\r\n%s\r\n" % (len(piece), piece))
            pos = end
            count += 1
            if count % 2 == 0:
                await asyncio.sleep(DRIBBLE_PAUSE_S)

    def render(self, text: str) -> bytes:
        """One SSE event holding ``text`` as its data, in this response's style."""
        eol = self.eol
        lines: list[str] = []
        n = self.events
        self.events += 1
        if self.fields:
            lines.append(": faulty comment line")
            if n == 0:
                lines.append("retry: 3000")
            lines += ["event: message", f"id: {n}", "x-unknown-field: ignored per HTML rules"]
        payloads = [text]
        if self.multiline and text.startswith("{"):
            cut = text.find(",") + 1
            if cut > 0:
                payloads = [text[:cut], text[cut:]]
        sep = ":" if self.fields and n % 2 else ": "
        lines += [f"data{sep}{p}" for p in payloads]
        event = eol.join(lines) + eol + eol
        if self.fields:
            event += f": keep-alive, an event with no data{eol}{eol}"
        return event.encode()

    async def data(self, text: str) -> None:
        await self.body(self.render(text))

    async def finish(self) -> None:
        await self.begin()
        if self.ended:
            return
        self.ended = True
        if self.chunked:
            await self.conn.send(b"0\r\n\r\n")
        else:
            await self.drop()

    async def close_normal(self) -> None:
        await self.finish()

    async def error_before(self, status: int, message: str) -> None:
        extra = (("retry-after", "1"),) if status in (429, 503) else ()
        self.ended = True
        await _send_json(
            self.conn,
            status,
            _error_body(status, message),
            keep_alive=self.keep_alive,
            extra=extra,
        )

    async def after_error(self, code: int) -> None:
        await self.done()
        await self.finish()

    async def partial(self, obj: dict[str, Any]) -> None:
        data = self.render(_dumps(obj))
        await self.conn.send(b"%x\r\n%s" % (len(data), data[: len(data) // 2]))
        await self.drop()

    async def endless_line(self) -> None:
        await self.body(b'data: {"id":"')
        block = b"x" * ENDLESS_LINE_BLOCK
        sent = 0
        while sent < ENDLESS_LINE_MAX_BYTES:
            await self.body(block)
            sent += len(block)
            await asyncio.sleep(ENDLESS_LINE_INTERVAL_S)
        await self.drop()

    async def json_response(self, obj: Any) -> None:
        """A 200 ``application/json`` body instead of an event stream."""
        self.ended = True
        await _send_json(self.conn, 200, obj, keep_alive=self.keep_alive)


class WsConn:
    """A server-side RFC 6455 connection over :class:`Conn`, framed by hand."""

    def __init__(self, conn: Conn) -> None:
        self.conn = conn
        self.messages: asyncio.Queue[tuple[int, bytes] | None] = asyncio.Queue()
        self.peer_closed = asyncio.Event()
        self.close_sent = False
        self.raw_mode = False  # a frame is being written in pieces: no pongs in between
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._read_loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    @staticmethod
    def frame_header(opcode: int, length: int, *, fin: bool = True) -> bytes:
        first = (0x80 if fin else 0) | opcode
        if length < 126:
            return struct.pack("!BB", first, length)
        if length < 65536:
            return struct.pack("!BBH", first, 126, length)
        return struct.pack("!BBQ", first, 127, length)

    def send_frame_nowait(self, opcode: int, payload: bytes, *, fin: bool = True) -> None:
        self.conn.write_nowait(self.frame_header(opcode, len(payload), fin=fin) + payload)

    async def send_frame(self, opcode: int, payload: bytes, *, fin: bool = True) -> None:
        self.send_frame_nowait(opcode, payload, fin=fin)
        await self.conn.writer.drain()

    async def _read_frame(self) -> tuple[bool, int, bytes]:
        reader = self.conn.reader
        first, second = await reader.readexactly(2)
        length = second & 0x7F
        if length == 126:
            (length,) = struct.unpack("!H", await reader.readexactly(2))
        elif length == 127:
            (length,) = struct.unpack("!Q", await reader.readexactly(8))
        mask = await reader.readexactly(4) if second & 0x80 else b""
        payload = await reader.readexactly(length)
        if mask:
            key = int.from_bytes((mask * (length // 4 + 1))[:length], "big")
            payload = (int.from_bytes(payload, "big") ^ key).to_bytes(length, "big")
        return bool(first & 0x80), first & 0x0F, payload

    async def _read_loop(self) -> None:
        parts: list[bytes] = []
        opcode = 0
        try:
            while True:
                fin, op, payload = await self._read_frame()
                if op == 0x9:  # ping
                    if not self.raw_mode and not self.close_sent:
                        self.send_frame_nowait(0xA, payload)
                elif op == 0xA:
                    pass
                elif op == 0x8:  # close: answer it (unless ours was first), then FIN
                    if not self.close_sent and not self.raw_mode:
                        self.close_sent = True
                        with contextlib.suppress(OSError):
                            self.send_frame_nowait(0x8, payload[:2])
                    self.peer_closed.set()
                    await self.conn.fin()
                    break
                else:
                    if op in (0x1, 0x2):
                        opcode, parts = op, []
                    parts.append(payload)
                    if fin:
                        self.messages.put_nowait((opcode, b"".join(parts)))
        except (asyncio.IncompleteReadError, OSError):
            self.peer_closed.set()
            await self.conn.fin()
        finally:
            self.peer_closed.set()
            self.messages.put_nowait(None)

    async def next_message(self) -> tuple[int, bytes] | None:
        """The next whole text/binary message, or None once the connection is over."""
        if self.conn.closed and self.messages.empty():
            return None
        try:
            return await asyncio.wait_for(self.messages.get(), IDLE_TIMEOUT_S)
        except TimeoutError:
            return None

    async def close(self, code: int, reason: str = "") -> None:
        """Send a close frame with ``code``, wait for the client's, then FIN."""
        if not self.close_sent and not self.conn.closed:
            self.close_sent = True
            with contextlib.suppress(OSError):
                await self.send_frame(0x8, struct.pack("!H", code) + reason.encode()[:120])
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.peer_closed.wait(), WS_CLOSE_WAIT_S)
        await self.conn.fin()


class WsOut(Out):
    """One request's frames on a WebSocket connection."""

    proto = "ws"

    def __init__(self, ws: WsConn, req: Request) -> None:
        super().__init__(ws.conn, req)
        self.ws = ws
        self.fragmented = False  # each message as 16-byte fragments, header/payload split

    async def data(self, text: str) -> None:
        payload = text.encode()
        if not self.fragmented:
            await self.ws.send_frame(0x1, payload)
            return
        pieces = [payload[i : i + WS_FRAGMENT] for i in range(0, len(payload), WS_FRAGMENT)]
        for index, piece in enumerate(pieces):
            opcode = 0x1 if index == 0 else 0x0
            header = self.ws.frame_header(opcode, len(piece), fin=index == len(pieces) - 1)
            self.conn.write_nowait(header[:1])
            self.conn.write_nowait(header[1:] + piece[:1])
            self.conn.write_nowait(piece[1:])
            await self.conn.writer.drain()
            await self.sleep(DRIBBLE_PAUSE_S)

    async def binary(self, payload: bytes) -> None:
        """One binary frame."""
        await self.ws.send_frame(0x2, payload)

    async def close(self, code: int, reason: str = "") -> None:
        """Close the connection with ``code``."""
        await self.ws.close(code, reason)

    async def close_normal(self) -> None:
        await self.close(1000)

    async def error_before(self, status: int, message: str) -> None:
        await self.chunk(_error_body(status, message))
        await self.close(_ws_close_code(status), message)

    async def after_error(self, code: int) -> None:
        await self.close(_ws_close_code(code))

    async def sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.ws.peer_closed.wait(), seconds)
        if self.ws.peer_closed.is_set():
            raise PeerGone("client closed the WebSocket")

    async def hold(self) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.ws.peer_closed.wait(), HOLD_MAX_S)
        await self.conn.fin()

    async def partial(self, obj: dict[str, Any]) -> None:
        payload = _dumps(obj).encode()
        self.ws.raw_mode = True
        await self.conn.send(self.ws.frame_header(0x1, len(payload)) + payload[: len(payload) // 2])
        await self.drop()

    async def endless_line(self) -> None:
        self.ws.raw_mode = True
        await self.conn.send(self.ws.frame_header(0x1, ENDLESS_LINE_MAX_BYTES) + b'{"id":"')
        block = b"x" * ENDLESS_LINE_BLOCK
        sent = 0
        while sent < ENDLESS_LINE_MAX_BYTES - len(block):
            await self.conn.send(block)
            sent += len(block)
            await self.sleep(ENDLESS_LINE_INTERVAL_S)
        await self.drop()


# --- the scenarios -------------------------------------------------------------------------

RunFn = Callable[[Out, Request], Awaitable[None]]
HandshakeFn = Callable[[Conn], Awaitable[None]]


@dataclass(frozen=True)
class Scenario:
    """One deliberate behaviour, precisely described, with the outcome it must produce."""

    name: str
    summary: str
    sse: str  # exactly what happens on SSE
    ws: str  # exactly what happens on WebSocket
    expected_sse: str
    expected_ws: str | None  # None: the SPEC does not settle it (see UNSETTLED)
    run: RunFn
    handshake: HandshakeFn | None = None  # WS, path-selected: acts on the handshake
    note: str = ""


#: The catalogue, in a stable order (``ok`` first: it is the first of ``/v1/models``).
SCENARIOS: dict[str, Scenario] = {}


def _scenario(
    name: str,
    expected: tuple[str, str | None],
    *,
    summary: str,
    sse: str,
    ws: str,
    handshake: HandshakeFn | None = None,
    note: str = "",
) -> Callable[[RunFn], RunFn]:
    def register(fn: RunFn) -> RunFn:
        SCENARIOS[name] = Scenario(
            name=name,
            summary=summary,
            sse=sse,
            ws=ws,
            expected_sse=expected[0],
            expected_ws=expected[1],
            run=fn,
            handshake=handshake,
            note=note,
        )
        return fn

    return register


def _half(n: int) -> int:
    return max(1, n // 2)


async def _tokens(
    out: Out,
    first: int,
    stop: int,
    *,
    finish: str | None = None,
    usage: int | None = None,
    interval: float = 0.0,
) -> None:
    """Content chunks ``first..stop-1``; the last carries ``finish`` and ``usage``.

    With no token to send but a finish or usage to give, one empty chunk carries them.
    """
    ch = out.chunks
    if first >= stop:
        if finish is not None or usage is not None:
            await out.chunk(ch.piece("", finish, usage))
        return
    for i in range(first, stop):
        last = i == stop - 1
        await out.chunk(ch.piece(token_text(i), finish if last else None, usage if last else None))
        if interval and not last:
            await out.sleep(interval)


async def _full(out: Out, req: Request) -> None:
    """The whole ``ok`` stream: n chunks, ``length`` and usage on the last, ``[DONE]``."""
    n = req.max_tokens
    await out.begin()
    await _tokens(out, 0, n, finish="length", usage=req.usage_if_asked(n))
    await out.done()
    await out.finish()


_OK_STREAM = (
    "200 text/event-stream, chunked, one HTTP chunk per event; n content chunks, one token "
    "each; the last has finish_reason 'length' and usage (if asked); 'data: [DONE]'; the "
    "0-length chunk; the connection stays open (keep-alive)."
)
_OK_WS = "n chunk frames as in ok, then '[DONE]'; the connection stays open for the next request."
_AS_OK_WS = "Same as ok (this fault is SSE framing only)."
_AS_OK_SSE = "Same as ok (this fault is WebSocket only)."

# ok family ---------------------------------------------------------------------------------


@_scenario("ok", ("ok", "ok"), summary="A correct stream.", sse=_OK_STREAM, ws=_OK_WS)
async def _ok(out: Out, req: Request) -> None:
    await _full(out, req)


@_scenario(
    "ok_crlf",
    ("ok", "ok"),
    summary="Every SSE line ends with CRLF.",
    sse="As ok, but every line (and the blank line ending each event) ends with '\\r\\n'.",
    ws=_AS_OK_WS,
)
async def _ok_crlf(out: Out, req: Request) -> None:
    if isinstance(out, SseOut):
        out.eol = "\r\n"
    await _full(out, req)


@_scenario(
    "ok_cr",
    ("ok", "ok"),
    summary="Every SSE line ends with a lone CR.",
    sse="As ok, but every line ends with a lone '\\r' (no '\\n' anywhere in the body).",
    ws=_AS_OK_WS,
)
async def _ok_cr(out: Out, req: Request) -> None:
    if isinstance(out, SseOut):
        out.eol = "\r"
    await _full(out, req)


@_scenario(
    "ok_sse_fields",
    ("ok", "ok"),
    summary="Comments, event:/id:/retry:, unknown fields, 'data:' without a space.",
    sse=(
        "As ok, but each event is preceded by ': faulty comment line', 'event: message', "
        "'id: <i>', 'x-unknown-field: ...' (and 'retry: 3000' on the first); odd events "
        "write 'data:{...}' with no space; each event is followed by a comment-only block "
        "(': keep-alive...' then a blank line), which dispatches nothing per HTML rules."
    ),
    ws=_AS_OK_WS,
)
async def _ok_sse_fields(out: Out, req: Request) -> None:
    if isinstance(out, SseOut):
        out.fields = True
    await _full(out, req)


@_scenario(
    "ok_multiline_data",
    ("ok", "ok"),
    summary="Each JSON chunk is split over two data: lines.",
    sse=(
        "As ok, but every JSON chunk is written as two 'data:' lines, cut after its first "
        "comma; the HTML rules join them with '\\n', which is valid JSON whitespace. "
        "'[DONE]' stays one line."
    ),
    ws=_AS_OK_WS,
)
async def _ok_multiline(out: Out, req: Request) -> None:
    if isinstance(out, SseOut):
        out.multiline = True
    await _full(out, req)


@_scenario(
    "ok_dribble",
    ("ok", "ok"),
    summary="Bytes arrive 1-3 at a time, boundaries mid-line and mid-CRLF.",
    sse=(
        "As ok with CRLF line endings, but the body goes out as HTTP chunks of 1, 2, 3, 1, "
        "2, 3... bytes, each piece its own chunk and write (TCP_NODELAY), a piece always "
        "ending right after every '\\r' (so every CRLF is split), 1 ms pause every 2 "
        "pieces. About 1 s for n=16; keep n <= 32."
    ),
    ws=(
        "As ok, but every message is fragmented: a text frame and continuation frames of "
        "16 payload bytes, each frame written in 3 pieces (header split), 1 ms apart."
    ),
)
async def _ok_dribble(out: Out, req: Request) -> None:
    if isinstance(out, SseOut):
        out.eol = "\r\n"
        out.dribble = True
    elif isinstance(out, WsOut):
        out.fragmented = True
    await _full(out, req)


@_scenario(
    "ok_role_empty",
    ("ok", "ok"),
    summary="Role-only first chunk, empty chunks, finish in its own chunk (OpenAI shape).",
    sse=(
        "Chat: a first chunk with delta {'role':'assistant','content':''}; completions: a "
        "first chunk with text ''. Then n content chunks, each token followed by an empty "
        "chunk (chat: delta {'content':''} and delta {} alternately; completions: text ''). "
        "Then a chunk with empty content and finish_reason 'length', then a chunk with "
        "choices [] and usage (if asked), then [DONE]. Only the n tokens are content."
    ),
    ws="The same chunks as frames, then '[DONE]'.",
)
async def _ok_role_empty(out: Out, req: Request) -> None:
    n = req.max_tokens
    ch = out.chunks
    await out.begin()
    await out.chunk(ch.piece("", delta={"role": "assistant", "content": ""}))
    for i in range(n):
        await out.chunk(ch.piece(token_text(i)))
        await out.chunk(ch.piece("", delta={"content": ""} if i % 2 == 0 else {}))
    await out.chunk(ch.piece("", "length", delta={}))
    if req.include_usage:
        await out.chunk(ch.usage_only(n))
    await out.done()
    await out.finish()


@_scenario(
    "ok_usage_separate",
    ("ok", "ok"),
    summary="Usage in a final chunk with choices [] (vLLM style).",
    sse=(
        "n content chunks, the last with finish_reason 'length' and no usage; then a chunk "
        "with choices [] and usage (if asked); then [DONE]."
    ),
    ws="The same chunks as frames, then '[DONE]'.",
)
async def _ok_usage_separate(out: Out, req: Request) -> None:
    n = req.max_tokens
    await out.begin()
    await _tokens(out, 0, n, finish="length")
    if req.include_usage:
        await out.chunk(out.chunks.usage_only(n))
    await out.done()
    await out.finish()


@_scenario(
    "ok_close_delimited",
    ("ok", "ok"),
    summary="No Transfer-Encoding: the body ends when the server closes (valid HTTP/1.1).",
    sse=(
        "200 text/event-stream with 'connection: close' and neither Content-Length nor "
        "Transfer-Encoding; the ok events; after [DONE] the server closes (FIN), which ends "
        "the body cleanly."
    ),
    ws="As ok, then after '[DONE]' the server closes with 1000 (a normal close).",
)
async def _ok_close_delimited(out: Out, req: Request) -> None:
    if isinstance(out, SseOut):
        out.chunked = False
    await _full(out, req)
    if isinstance(out, WsOut):
        await out.close(1000)


@_scenario(
    "ok_short_pause",
    ("ok", "ok"),
    summary=f"One {SHORT_PAUSE_S} s pause mid-stream: under the stall timeout, not a stall.",
    sse=f"As ok, but after k chunks a {SHORT_PAUSE_S} s pause, then the rest.",
    ws=f"As ok, with the same {SHORT_PAUSE_S} s pause after k frames.",
)
async def _ok_short_pause(out: Out, req: Request) -> None:
    n = req.max_tokens
    k = min(_half(n), n)
    await out.begin()
    await _tokens(out, 0, k, finish="length" if k == n else None)
    await out.sleep(SHORT_PAUSE_S)
    await _tokens(out, k, n, finish="length")
    if req.include_usage:
        await out.chunk(out.chunks.usage_only(n))
    await out.done()
    await out.finish()


@_scenario(
    "timed",
    ("ok", "ok"),
    summary=f"Exact timing: TTFT {TIMED_TTFT_S * 1000:.0f} ms, ITL {TIMED_ITL_S * 1000:.0f} ms.",
    sse=(
        "Headers at once; content chunk i at request-read time + "
        f"{TIMED_TTFT_S} s + i x {TIMED_ITL_S} s (absolute schedule, no drift); the last "
        "with finish_reason 'length' and usage (if asked); [DONE] right after it."
    ),
    ws="The same schedule, from when the request frame was read.",
)
async def _timed(out: Out, req: Request) -> None:
    n = req.max_tokens
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    await out.begin()
    for i in range(n):
        await out.sleep_until(t0 + TIMED_TTFT_S + i * TIMED_ITL_S)
        last = i == n - 1
        await out.chunk(
            out.chunks.piece(
                token_text(i),
                "length" if last else None,
                req.usage_if_asked(n) if last else None,
            )
        )
    await out.done()
    await out.finish()


# truncated -----------------------------------------------------------------------------------


@_scenario(
    "truncated_close",
    ("truncated", "truncated"),
    summary="The server hangs up (FIN) mid-stream.",
    sse=(
        "200 headers, k content chunks, then FIN at an HTTP-chunk boundary: no [DONE], no "
        "0-length chunk, so the chunked body is unfinished."
    ),
    ws="k chunk frames, then FIN with no close frame (the client sees 1006).",
)
async def _truncated_close(out: Out, req: Request) -> None:
    await out.begin()
    await _tokens(out, 0, _half(req.max_tokens))
    await out.drop()


@_scenario(
    "truncated_mid_chunk",
    ("truncated", "truncated"),
    summary="The server hangs up in the middle of an HTTP chunk / a WS frame.",
    sse=(
        "200 headers, k content chunks, then the chunk-size line of the next event and half "
        "of its bytes, then FIN."
    ),
    ws="k chunk frames, then the header of the next frame and half its payload, then FIN.",
)
async def _truncated_mid_chunk(out: Out, req: Request) -> None:
    k = _half(req.max_tokens)
    await out.begin()
    await _tokens(out, 0, k)
    await out.partial(out.chunks.piece(token_text(k)))


@_scenario(
    "truncated_reset",
    ("truncated", "truncated"),
    summary="The server resets the connection (RST) mid-stream.",
    sse="200 headers, k content chunks, a 100 ms pause, then RST (SO_LINGER 0).",
    ws="k chunk frames, a 100 ms pause, then RST.",
)
async def _truncated_reset(out: Out, req: Request) -> None:
    await out.begin()
    await _tokens(out, 0, _half(req.max_tokens))
    await out.reset()


@_scenario(
    "close_1000_midway",
    ("truncated", "truncated"),
    summary="A clean end mid-stream: body ends / WS close 1000, before [DONE].",
    sse="200 headers, k content chunks, then the 0-length chunk (a clean end), no [DONE].",
    ws="k chunk frames, then close 1000 with no '[DONE]'.",
)
async def _close_1000_midway(out: Out, req: Request) -> None:
    await out.begin()
    await _tokens(out, 0, _half(req.max_tokens))
    await out.close_normal()


@_scenario(
    "close_1011_midway",
    ("truncated", "truncated"),
    summary="WS close 1011 after some content (no error frame).",
    sse="As truncated_close: k content chunks, then FIN mid-body.",
    ws="k chunk frames, then close 1011 (after content: truncated, not http_5xx).",
)
async def _close_1011_midway(out: Out, req: Request) -> None:
    await out.begin()
    await _tokens(out, 0, _half(req.max_tokens))
    if isinstance(out, WsOut):
        await out.close(1011, "internal error")
    else:
        await out.drop()


@_scenario(
    "no_done",
    ("truncated", "truncated"),
    summary="Everything but [DONE]; the body ends cleanly.",
    sse=(
        "As ok (n chunks, finish_reason 'length', usage if asked) but no [DONE]: the "
        "0-length chunk ends the body cleanly."
    ),
    ws="n chunk frames as in ok, then close 1000 with no '[DONE]'.",
    note="A client run with --no-done-marker reports ok on both.",
)
async def _no_done(out: Out, req: Request) -> None:
    n = req.max_tokens
    await out.begin()
    await _tokens(out, 0, n, finish="length", usage=req.usage_if_asked(n))
    await out.close_normal()


# silent truncation ---------------------------------------------------------------------------


@_scenario(
    "early_stop",
    ("silent_truncation", "silent_truncation"),
    summary="finish_reason 'stop' early, under ignore_eos.",
    sse=(
        "k content chunks, the last with finish_reason 'stop' and usage.completion_tokens = "
        "k (if asked), then [DONE]."
    ),
    ws="The same as frames, then '[DONE]'.",
    note="Silent under --coalesced-chunks too (rule a).",
)
async def _early_stop(out: Out, req: Request) -> None:
    k = _half(req.max_tokens)
    await out.begin()
    await _tokens(out, 0, k, finish="stop", usage=req.usage_if_asked(k))
    await out.done()
    await out.finish()


@_scenario(
    "usage_overcount",
    ("silent_truncation", "silent_truncation"),
    summary="usage.completion_tokens (= n) exceeds the content chunks sent (n // 2).",
    sse=(
        "n // 2 content chunks, the last with finish_reason 'length' and usage "
        "completion_tokens = n (always, even if not asked), then [DONE]. With n // 2 = 0, "
        "one empty chunk carries the finish_reason and usage. Use n >= 2."
    ),
    ws="The same as frames, then '[DONE]'.",
    note="Rule (b); under --coalesced-chunks (rule a only) it is ok.",
)
async def _usage_overcount(out: Out, req: Request) -> None:
    n = req.max_tokens
    await out.begin()
    await _tokens(out, 0, n // 2, finish="length", usage=n)
    await out.done()
    await out.finish()


@_scenario(
    "missing_chunks_no_usage",
    ("silent_truncation", "silent_truncation"),
    summary="Fewer content chunks than max_tokens, finish 'length', no usage at all.",
    sse=(
        "n // 2 content chunks, the last with finish_reason 'length', never any usage "
        "(even if asked), then [DONE]. With n // 2 = 0, one empty chunk carries the "
        "finish_reason. Use n >= 2."
    ),
    ws="The same as frames, then '[DONE]'.",
    note="Rule (b) with no usage, under ignore_eos.",
)
async def _missing_chunks_no_usage(out: Out, req: Request) -> None:
    await out.begin()
    await _tokens(out, 0, req.max_tokens // 2, finish="length")
    await out.done()
    await out.finish()


# error events ----------------------------------------------------------------------------------


@_scenario(
    "error_midstream",
    ("error_event", "error_event"),
    summary="An error object after some content.",
    sse=(
        'k content chunks, then \'data: {"error":{"message","type":"server_error",'
        "\"code\":500}}', then [DONE] and the 0-length chunk (vLLM's shape)."
    ),
    ws="k chunk frames, then an error frame (code 500), then close 1011.",
)
async def _error_midstream(out: Out, req: Request) -> None:
    await out.begin()
    await _tokens(out, 0, _half(req.max_tokens))
    await out.error_event(500, "faulty: the engine died mid-stream")
    await out.after_error(500)


@_scenario(
    "error_first_500",
    ("error_event", "http_5xx"),
    summary="An error (code 500) before any content.",
    sse="200 headers, at once an error event (code 500), then [DONE]: the stream began.",
    ws="An error frame (code 500) before any content, then close 1011.",
)
async def _error_first_500(out: Out, req: Request) -> None:
    await out.begin()
    await out.error_event(500, "faulty: the engine failed before the first token")
    await out.after_error(500)


@_scenario(
    "error_first_400",
    ("error_event", "http_4xx"),
    summary="An error (code 400) before any content.",
    sse="200 headers, at once an error event (code 400), then [DONE]: the stream began.",
    ws="An error frame (code 400) before any content, then close 1008.",
)
async def _error_first_400(out: Out, req: Request) -> None:
    await out.begin()
    await out.error_event(400, "faulty: the request was rejected after the headers")
    await out.after_error(400)


# malformed ---------------------------------------------------------------------------------------

_BAD_JSON = '{"id":"cmpl-faulty-bad","choices":[{not json'


@_scenario(
    "bad_json",
    ("malformed", "malformed"),
    summary="A data line / text frame that is not JSON.",
    sse=f"k content chunks, then 'data: {_BAD_JSON}', then the rest as in ok and [DONE].",
    ws=f"k chunk frames, then a text frame '{_BAD_JSON}', then the rest and '[DONE]'.",
)
async def _bad_json(out: Out, req: Request) -> None:
    n = req.max_tokens
    k = _half(n)
    await out.begin()
    await _tokens(out, 0, k)
    await out.data(_BAD_JSON)
    await _tokens(out, k, n, finish="length", usage=req.usage_if_asked(n))
    await out.done()
    await out.finish()


@_scenario(
    "data_after_done",
    ("malformed", None),
    summary="A content chunk after [DONE].",
    sse="The ok stream, [DONE], then one more content chunk event, then the 0-length chunk.",
    ws="The ok frames, '[DONE]', one more chunk frame, then close 1000.",
)
async def _data_after_done(out: Out, req: Request) -> None:
    n = req.max_tokens
    await _full_until_done(out, req)
    await out.chunk(out.chunks.piece(token_text(n)))
    if isinstance(out, WsOut):
        await out.close(1000)
    else:
        await out.finish()


async def _full_until_done(out: Out, req: Request) -> None:
    n = req.max_tokens
    await out.begin()
    await _tokens(out, 0, n, finish="length", usage=req.usage_if_asked(n))
    await out.done()


@_scenario(
    "done_no_finish",
    ("malformed", "malformed"),
    summary="[DONE] arrives but no chunk ever had a finish_reason.",
    sse="n content chunks, all with finish_reason null (usage on the last if asked), [DONE].",
    ws="The same as frames, then '[DONE]'.",
)
async def _done_no_finish(out: Out, req: Request) -> None:
    n = req.max_tokens
    await out.begin()
    await _tokens(out, 0, n, usage=req.usage_if_asked(n))
    await out.done()
    await out.finish()


@_scenario(
    "extra_chunks",
    ("malformed", "malformed"),
    summary="More content chunks (n + 2) than max_tokens and than usage (n).",
    sse=(
        "n + 2 content chunks, the last with finish_reason 'length' and usage "
        "completion_tokens = n (if asked), then [DONE]."
    ),
    ws="The same as frames, then '[DONE]'.",
)
async def _extra_chunks(out: Out, req: Request) -> None:
    n = req.max_tokens
    await out.begin()
    await _tokens(out, 0, n + 2, finish="length", usage=req.usage_if_asked(n))
    await out.done()
    await out.finish()


@_scenario(
    "json_body",
    ("malformed", "ok"),
    summary="A 200 whose body is application/json, not an event stream.",
    sse=(
        "200 application/json with Content-Length: a whole non-streaming completion "
        "(chat.completion / text_completion) of n tokens; keep-alive."
    ),
    ws=_AS_OK_WS,
)
async def _json_body(out: Out, req: Request) -> None:
    if isinstance(out, SseOut):
        await out.json_response(out.chunks.completion(req.max_tokens))
    else:
        await _full(out, req)


@_scenario(
    "endless_line",
    ("malformed", "malformed"),
    summary="One line (WS: one frame) that never ends.",
    sse=(
        "200 headers, then 'data: {\"id\":\"' and 'x' bytes with no newline, 64 KiB every "
        "5 ms (about 12 MiB/s) up to 64 MiB, then FIN."
    ),
    ws=(
        "A text frame whose header announces 64 MiB, then its payload at the same pace "
        "(never completed), then FIN. A client with websockets' default max_size (1 MiB) "
        "rejects it at the header with close 1009."
    ),
    note="Assumes the client caps one SSE line/event and one WS message well below 64 MiB.",
)
async def _endless_line(out: Out, req: Request) -> None:
    await out.begin()
    await out.endless_line()


@_scenario(
    "giant_event",
    ("malformed", "malformed"),
    summary="One 8 MiB event / frame.",
    sse=(
        "200 headers, one content chunk, then one content chunk whose text is 8 MiB of 'x' "
        "(a single 'data:' line, one HTTP chunk), then the other n - 1 chunks and [DONE]."
    ),
    ws="The same as frames (one 8 MiB text frame), then '[DONE]'.",
    note=(
        "Malformed either way: a client that caps events below 8 MiB rejects it, and one "
        "that does not sees n + 1 content chunks."
    ),
)
async def _giant_event(out: Out, req: Request) -> None:
    n = req.max_tokens
    await out.begin()
    await _tokens(out, 0, 1, finish="length" if n == 1 else None)
    await out.chunk(out.chunks.piece("x" * GIANT_EVENT_BYTES))
    await _tokens(out, 1, n, finish="length", usage=req.usage_if_asked(n))
    await out.done()
    await out.finish()


@_scenario(
    "ws_binary_frame",
    ("ok", "malformed"),
    summary="A binary frame in a WebSocket stream.",
    sse=_AS_OK_SSE,
    ws=(
        "k chunk frames, then chunk k as a binary frame (its JSON as UTF-8 bytes), then "
        "chunks k+1.. as text frames and '[DONE]'."
    ),
)
async def _ws_binary_frame(out: Out, req: Request) -> None:
    if not isinstance(out, WsOut):
        await _full(out, req)
        return
    n = req.max_tokens
    k = min(_half(n), n - 1)
    await _tokens(out, 0, k)
    await out.binary(_dumps(out.chunks.piece(token_text(k))).encode())
    await _tokens(out, k + 1, n, finish="length", usage=req.usage_if_asked(n))
    await out.done()


# stalled and timeout ---------------------------------------------------------------------------


async def _hold_handshake(conn: Conn) -> None:
    await conn.hold(HOLD_MAX_S)


@_scenario(
    "no_headers",
    ("stalled", "stalled"),
    summary="The request is read; nothing is ever sent.",
    sse=f"Reads the request, sends nothing; FIN when the client leaves or after {HOLD_MAX_S} s.",
    ws=(
        "By path: reads the handshake request and never answers it. By model: after the "
        f"request frame, sends nothing. Either way until the client leaves (or {HOLD_MAX_S} s)."
    ),
    handshake=_hold_handshake,
)
async def _no_headers(out: Out, req: Request) -> None:
    await out.hold()


@_scenario(
    "stall_after_headers",
    ("stalled", "stalled"),
    summary=f"200 headers, then {STALL_S} s of silence, then FIN.",
    sse=f"200 headers, no event for {STALL_S} s, then FIN (chunked body unfinished).",
    ws=f"After the request frame, nothing for {STALL_S} s, then FIN (no close frame).",
)
async def _stall_after_headers(out: Out, req: Request) -> None:
    await out.begin()
    await out.sleep(STALL_S)
    await out.drop()


@_scenario(
    "stall_midway",
    ("stalled", "stalled"),
    summary=f"Some tokens, then {STALL_S} s of silence, then FIN.",
    sse=f"200 headers, k content chunks, nothing for {STALL_S} s, then FIN mid-body.",
    ws=f"k chunk frames, nothing for {STALL_S} s, then FIN (no close frame).",
)
async def _stall_midway(out: Out, req: Request) -> None:
    await out.begin()
    await _tokens(out, 0, _half(req.max_tokens))
    await out.sleep(STALL_S)
    await out.drop()


@_scenario(
    "endless",
    ("timeout", "timeout"),
    summary=f"A stream that never ends: a chunk every {ENDLESS_INTERVAL_S} s for {ENDLESS_S} s.",
    sse=(
        f"200 headers; one chunk every {ENDLESS_INTERVAL_S} s (the first at "
        f"{ENDLESS_INTERVAL_S} s): content chunks 0..n-2 (never more than n - 1 tokens, so "
        "no chunk-count rule can fire), then chunks with empty content (chat: delta {}) "
        f"forever; after {ENDLESS_S} s, FIN mid-body."
    ),
    ws="The same frames on the same schedule, then FIN with no close frame.",
    note="Also the scenario for cancelled: stop the run with a drain shorter than the stream.",
)
async def _endless(out: Out, req: Request) -> None:
    n = req.max_tokens
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    await out.begin()
    tick = 1
    while tick * ENDLESS_INTERVAL_S <= ENDLESS_S:
        await out.sleep_until(t0 + tick * ENDLESS_INTERVAL_S)
        i = tick - 1
        text = token_text(i) if i < n - 1 else ""
        await out.chunk(out.chunks.piece(text, delta=None if text else {}))
        tick += 1
    await out.drop()


# HTTP / handshake errors -------------------------------------------------------------------------


def _http_error(status: int, message: str) -> RunFn:
    async def run(out: Out, req: Request) -> None:
        await out.error_before(status, message)

    return run


def _refuse(status: int, message: str) -> HandshakeFn:
    async def handshake(conn: Conn) -> None:
        await _send_json(conn, status, _error_body(status, message), keep_alive=False)
        await conn.fin()

    return handshake


def _register_http_error(name: str, status: int, message: str, ws: str) -> None:
    outcome = "http_4xx" if status < 500 else "http_5xx"
    retry = " and Retry-After: 1" if status in (429, 503) else ""
    _scenario(
        name,
        (outcome, outcome),
        summary=f"HTTP {status} before the stream.",
        sse=(
            f"{status} application/json{retry}: "
            f"{{'error': {{'message', 'type': '{_ERROR_TYPES[status]}', 'code': {status}}}}}; "
            "keep-alive."
        ),
        ws=ws,
    )(_http_error(status, message))


for _status, _message in (
    (400, "faulty: bad request"),
    (404, "faulty: no such thing"),
    (429, "faulty: too many requests"),
    (500, "faulty: internal server error"),
    (503, "faulty: overloaded, try again later"),
):
    _register_http_error(
        f"http_{_status}",
        _status,
        _message,
        f"An error frame (code {_status}) before any content, then close "
        f"{_ws_close_code(_status)}.",
    )

_scenario(
    "ws_refuse_403",
    ("http_4xx", "http_4xx"),
    summary="The WebSocket handshake is refused with 403.",
    sse="403 application/json error (code 403); keep-alive.",
    ws=(
        "By path: the handshake is answered 403 with a JSON error body, then FIN. By model: "
        "an error frame (code 403), then close 1008."
    ),
    handshake=_refuse(403, "faulty: forbidden"),
)(_http_error(403, "faulty: forbidden"))

_scenario(
    "ws_refuse_500",
    ("http_5xx", "http_5xx"),
    summary="The WebSocket handshake is refused with 500.",
    sse="500 application/json error (code 500); keep-alive.",
    ws=(
        "By path: the handshake is answered 500 with a JSON error body, then FIN. By model: "
        "an error frame (code 500), then close 1011."
    ),
    handshake=_refuse(500, "faulty: handshake failed"),
)(_http_error(500, "faulty: handshake failed"))


def _ws_close_only(code: int, status: int, message: str) -> RunFn:
    async def run(out: Out, req: Request) -> None:
        if isinstance(out, WsOut):
            await out.close(code, message)
        else:
            await out.error_before(status, message)

    return run


_scenario(
    "ws_close_1013",
    ("http_4xx", "http_4xx"),
    summary="WS close 1013 (try again later) before any content, no error frame.",
    sse="429 application/json error (code 429) with Retry-After: 1; keep-alive.",
    ws="After the request frame, close 1013 at once (no error frame, no content).",
)(_ws_close_only(1013, 429, "faulty: try again later"))

_scenario(
    "ws_close_1009",
    ("http_4xx", "http_4xx"),
    summary="WS close 1009 (message too big) before any content, no error frame.",
    sse="413 application/json error (code 413); keep-alive.",
    ws="After the request frame, close 1009 at once (no error frame, no content).",
)(_ws_close_only(1009, 413, "faulty: message too big"))


# connect errors ------------------------------------------------------------------------------------


async def _fin_handshake(conn: Conn) -> None:
    await conn.fin()


async def _rst_handshake(conn: Conn) -> None:
    await conn.rst()


@_scenario(
    "close_immediately",
    ("connect_error", "connect_error"),
    summary="The server hangs up (FIN) without sending a byte.",
    sse="Reads the request, then FIN without a single byte of response.",
    ws=(
        "By path: reads the handshake request, then FIN without a byte. By model: after the "
        "request frame, FIN with no close frame (unsettled: see UNSETTLED)."
    ),
    handshake=_fin_handshake,
)
async def _close_immediately(out: Out, req: Request) -> None:
    await out.conn.fin()


@_scenario(
    "reset_immediately",
    ("connect_error", "connect_error"),
    summary="The server resets (RST) without sending a byte.",
    sse="Reads the request, then RST (SO_LINGER 0) without a byte of response.",
    ws=(
        "By path: reads the handshake request, then RST. By model: after the request frame, "
        "RST (unsettled: see UNSETTLED)."
    ),
    handshake=_rst_handshake,
)
async def _reset_immediately(out: Out, req: Request) -> None:
    await out.conn.rst()


#: Scenarios that, on WebSocket, act on the handshake when selected by the path prefix.
#: :data:`EXPECTED` assumes the path prefix for these on ``ws``.
WS_HANDSHAKE_SCENARIOS = frozenset(n for n, s in SCENARIOS.items() if s.handshake is not None)

#: (scenario, "sse" | "ws") -> the outcome a correct client reports (see the module doc).
EXPECTED: dict[tuple[str, str], str] = {}
for _name, _sc in SCENARIOS.items():
    EXPECTED[(_name, "sse")] = _sc.expected_sse
    if _sc.expected_ws is not None:
        EXPECTED[(_name, "ws")] = _sc.expected_ws

#: Cases the SPEC does not settle, with why; left out of :data:`EXPECTED` on purpose.
UNSETTLED: dict[tuple[str, str], str] = {
    ("data_after_done", "ws"): (
        "SPEC §2 ends a WS request's stream at its [DONE], so the stray frame that follows "
        "belongs to no request; a client that reads on may call it malformed, one that "
        "stops at [DONE] reports ok."
    ),
    ("close_immediately", "ws (by model)"): (
        "A TCP drop after the request frame with no close frame: the stream began, so "
        "truncated, or 'reset before any response', so connect_error."
    ),
    ("reset_immediately", "ws (by model)"): "As close_immediately by model.",
}


# --- dispatch -------------------------------------------------------------------------------------

_ENDPOINTS = {
    "/v1/chat/completions": "chat",
    "/v1/completions": "completions",
    "/v1/stream": "stream",
}


def _models() -> dict[str, Any]:
    created = int(time.time())
    return {
        "object": "list",
        "data": [
            {"id": name, "object": "model", "created": created, "owned_by": "streamslo-faulty"}
            for name in SCENARIOS
        ],
    }


def _split_scenario(path: str) -> tuple[str | None, str]:
    """``/s/<name>/rest`` -> (name, ``/rest``); anything else -> (None, path)."""
    if path.startswith("/s/"):
        name, _, rest = path[3:].partition("/")
        return name, "/" + rest
    return None, path


async def _handle_http(conn: Conn, http: HttpRequest) -> bool:
    """Answer one HTTP request; True when the connection can carry another."""
    keep = http.keep_alive
    forced, path = _split_scenario(http.target.split("?", 1)[0])
    if forced is not None and forced not in SCENARIOS:
        await _send_json(conn, 404, _error_body(404, f"no scenario {forced!r}"), keep_alive=keep)
        return keep
    if path == "/v1/ws":
        await _handle_ws(conn, http, forced)
        return False
    if http.method == "GET" and path in ("/v1/models", "/health"):
        body = _models() if path == "/v1/models" else {"status": "ok"}
        await _send_json(conn, 200, body, keep_alive=keep)
        return keep
    endpoint = _ENDPOINTS.get(path)
    if endpoint is None or http.method != "POST":
        status = 404 if endpoint is None else 405
        await _send_json(conn, status, _error_body(status, f"no route {path}"), keep_alive=keep)
        return keep
    try:
        body = json.loads(http.body or b"{}")
        if not isinstance(body, dict):
            raise ValueError("not an object")
    except ValueError:
        await _send_json(conn, 400, _error_body(400, "body is not a JSON object"), keep_alive=keep)
        return keep
    name = forced or body.get("model") or "ok"
    if name not in SCENARIOS:
        await _send_json(conn, 404, _error_body(404, f"model {name!r} not found"), keep_alive=keep)
        return keep
    out = SseOut(conn, Request(endpoint, body, str(name)), keep_alive=keep)
    await SCENARIOS[name].run(out, out.req)
    if conn.closed:
        return False
    if not out.ended:  # a scenario that forgot to end: end it cleanly
        await out.finish()
    return keep and not conn.closed


async def _handle_ws(conn: Conn, http: HttpRequest, forced: str | None) -> None:
    if forced is not None and SCENARIOS[forced].handshake is not None:
        handshake = SCENARIOS[forced].handshake
        assert handshake is not None
        await handshake(conn)
        return
    key = http.headers.get("sec-websocket-key")
    if (
        http.method != "GET"
        or "websocket" not in http.headers.get("upgrade", "").lower()
        or not key
    ):
        await _send_json(
            conn, 426, _error_body(426, "WebSocket upgrade required"), keep_alive=False
        )
        await conn.fin()
        return
    accept = base64.b64encode(hashlib.sha1((key + _WS_GUID).encode()).digest()).decode()
    await conn.send(
        _response_head(
            101,
            [("upgrade", "websocket"), ("connection", "Upgrade"), ("sec-websocket-accept", accept)],
        )
    )
    ws = WsConn(conn)
    ws.start()
    try:
        while not conn.closed:
            message = await ws.next_message()
            if message is None:
                break
            opcode, payload = message
            if opcode != 0x1:
                await ws.close(1003, "send text frames")
                break
            try:
                body = json.loads(payload)
                if not isinstance(body, dict):
                    raise ValueError("not an object")
            except ValueError:
                await ws.send_frame(
                    0x1, _dumps(_error_body(400, "frame is not a JSON object")).encode()
                )
                await ws.close(1008, "bad request")
                break
            name = forced or body.get("model") or "ok"
            if name not in SCENARIOS:
                message_text = f"model {name!r} not found"
                await ws.send_frame(0x1, _dumps(_error_body(404, message_text)).encode())
                await ws.close(1008, "model not found")
                break
            endpoint = "chat" if "messages" in body else "completions"
            out = WsOut(ws, Request(endpoint, body, str(name)))
            await SCENARIOS[name].run(out, out.req)
    finally:
        await ws.stop()
        await conn.fin()


class _Server:
    def __init__(self) -> None:
        self.conns: set[Conn] = set()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = Conn(reader, writer)
        self.conns.add(conn)
        try:
            while not conn.closed:
                http = await _read_request(reader)
                if http is None or not await _handle_http(conn, http):
                    break
            await conn.fin()
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            pass  # the client left, or sent garbage: nothing to report
        except Exception:
            traceback.print_exc(file=sys.stderr)
        finally:
            self.conns.discard(conn)
            if not conn.closed:
                conn.closed = True
                writer.transport.abort()


async def serve(
    port: int = 0, *, exit_with_parent: bool = False, ready: Callable[[int], None] | None = None
) -> None:
    """Serve on 127.0.0.1:``port`` (0: a free one) until SIGTERM/SIGINT."""
    state = _Server()
    server = await asyncio.start_server(state.handle, "127.0.0.1", port, limit=1 << 16)
    bound = server.sockets[0].getsockname()[1]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    if ready is not None:
        ready(bound)
    parent = os.getppid()
    async with server:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)
            if exit_with_parent and os.getppid() != parent:
                break
        server.close()
        for conn in list(state.conns):
            conn.closed = True
            conn.writer.transport.abort()


def main(argv: list[str] | None = None) -> int:
    """``python -m tests.faulty.server --port N``: prints ``READY <port>`` when listening."""
    parser = argparse.ArgumentParser(prog="python -m tests.faulty.server", description=__doc__)
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: any free)")
    parser.add_argument(
        "--exit-with-parent", action="store_true", help="exit when the parent process dies"
    )
    parser.add_argument("--list", action="store_true", help="print the catalogue and exit")
    args = parser.parse_args(argv)
    if args.list:
        for name, sc in SCENARIOS.items():
            ws = EXPECTED.get((name, "ws"), "(unsettled)")
            print(f"{name:24} sse={sc.expected_sse:18} ws={ws:18} {sc.summary}")
        return 0

    def ready(port: int) -> None:
        print(f"READY {port}", flush=True)

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.port, exit_with_parent=args.exit_with_parent, ready=ready))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
