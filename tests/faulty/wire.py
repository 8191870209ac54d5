"""Wire helpers of the faulty server: one TCP connection (writes, FIN, RST, hold), HTTP/1.1
requests and responses, and a hand-framed server-side RFC 6455 WebSocket."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct
import time
from dataclasses import dataclass
from typing import Any

from tests.faulty.constants import IDLE_TIMEOUT_S, WS_CLOSE_WAIT_S

__all__ = [
    "ERROR_TYPES",
    "REASONS",
    "WS_GUID",
    "Conn",
    "HttpRequest",
    "PeerGone",
    "WsConn",
    "dumps",
    "error_body",
    "read_request",
    "response_head",
    "send_json",
    "ws_close_code",
]

WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
REASONS = {
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
ERROR_TYPES = {
    400: "invalid_request_error",
    403: "permission_error",
    404: "not_found_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    503: "service_unavailable",
}


def ws_close_code(status: int) -> int:
    """The WebSocket close code that twins an HTTP error status (the wire protocol)."""
    if status == 413:
        return 1009
    if status == 429:
        return 1013
    if status >= 500:
        return 1011
    return 1008


def dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


def error_body(status: int, message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": ERROR_TYPES.get(status, "error"), "code": status}}


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


async def read_request(reader: asyncio.StreamReader) -> HttpRequest | None:
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


def response_head(status: int, headers: list[tuple[str, str]]) -> bytes:
    lines = [f"HTTP/1.1 {status} {REASONS.get(status, 'Status')}"]
    lines += [f"{k}: {v}" for k, v in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def send_json(
    conn: Conn,
    status: int,
    obj: Any,
    *,
    keep_alive: bool,
    extra: tuple[tuple[str, str], ...] = (),
) -> None:
    body = dumps(obj).encode()
    headers = [
        ("content-type", "application/json"),
        ("content-length", str(len(body))),
        *extra,
    ]
    if not keep_alive:
        headers.append(("connection", "close"))
    await conn.send(response_head(status, headers) + body)


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
