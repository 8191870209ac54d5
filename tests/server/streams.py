"""Small real-socket clients for the tests: read an SSE or WebSocket stream to its end."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect


@dataclass
class StreamResult:
    status: int
    chunks: list[dict[str, Any]] = field(default_factory=list)
    done: bool = False
    error: str | None = None

    @property
    def text(self) -> str:
        out = []
        for c in self.chunks:
            for ch in c.get("choices", []):
                out.append(ch.get("delta", {}).get("content") or ch.get("text") or "")
        return "".join(out)

    @property
    def content_chunks(self) -> int:
        n = 0
        for c in self.chunks:
            for ch in c.get("choices", []):
                if ch.get("delta", {}).get("content") or ch.get("text"):
                    n += 1
        return n

    @property
    def finish_reason(self) -> str | None:
        for c in reversed(self.chunks):
            for ch in c.get("choices", []):
                if ch.get("finish_reason"):
                    return str(ch["finish_reason"])
        return None

    @property
    def usage(self) -> dict[str, int] | None:
        for c in reversed(self.chunks):
            if c.get("usage"):
                return dict(c["usage"])
        return None


def sse(
    base: str | httpx.Client, path: str, body: dict[str, Any], timeout: float = 30
) -> StreamResult:
    """POST and read the SSE body to its end; a transport error is recorded, not raised.
    ``base`` is a server's URL, or a client of the app in this process
    (:func:`tests.server.inprocess.app_client`)."""
    try:
        if isinstance(base, str):
            with httpx.Client() as client:
                return read_sse(client, base + path, body, timeout)
        return read_sse(base, path, body, timeout)
    except httpx.HTTPError as exc:
        return StreamResult(0, error=type(exc).__name__)


def read_sse(
    client: httpx.Client, url: str, body: dict[str, Any], timeout: float = 30
) -> StreamResult:
    """POST with ``client`` and read the SSE body to its end: every line a ``data:`` line or
    blank, nothing after ``[DONE]``."""
    with client.stream("POST", url, json=body, timeout=timeout) as r:
        res = StreamResult(r.status_code)
        if r.status_code != 200:
            r.read()
            res.error = r.text
            return res
        assert r.headers["content-type"].startswith("text/event-stream")
        try:
            for line in r.iter_lines():
                if not line.startswith("data: "):
                    assert line == "", line
                    continue
                data = line[len("data: ") :]
                assert not res.done, "data after [DONE]"
                if data == "[DONE]":
                    res.done = True
                else:
                    res.chunks.append(json.loads(data))
        except httpx.HTTPError as exc:
            res.error = type(exc).__name__
    return res


def ws_requests(
    ws_url: str, bodies: list[dict[str, Any]], timeout: float = 30
) -> list[StreamResult]:
    """Send each body in turn on one connection, reading each to its [DONE]."""
    results = []
    with connect(ws_url, open_timeout=timeout) as ws:
        for body in bodies:
            res = StreamResult(101)
            ws.send(json.dumps(body))
            try:
                while True:
                    msg = ws.recv(timeout=timeout)
                    if msg == "[DONE]":
                        res.done = True
                        break
                    res.chunks.append(json.loads(msg))
            except ConnectionClosed as exc:
                res.error = f"closed {exc.rcvd.code if exc.rcvd else None}"
            results.append(res)
            if not res.done:
                break
    return results


def ws_refusal(ws_url: str, frame: str | bytes) -> tuple[dict[str, Any] | None, int | None]:
    """Send one message; (the last JSON message read, the close code) once the server closes."""
    with connect(ws_url, max_size=None) as ws:
        ws.send(frame)
        err = None
        try:
            while True:
                err = json.loads(ws.recv(timeout=10))
        except ConnectionClosed as exc:
            return err, exc.rcvd.code if exc.rcvd else None


@dataclass
class RawResponse:
    """One HTTP response read off a raw socket, up to the server's close."""

    status: int
    head: str
    body: bytes
    elapsed: float
    """Seconds from the first byte sent to the connection's close (or the read's end)."""

    def error(self) -> dict[str, Any]:
        """The error object of the body."""
        return dict(json.loads(self.body)["error"])


def read_response(sock: socket.socket, t0: float, timeout: float = 15) -> RawResponse:
    """Read one response with a content-length (a refusal), or up to the server's close."""
    sock.settimeout(timeout)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
            head, sep, body = data.partition(b"\r\n\r\n")
            for line in head.lower().split(b"\r\n") if sep else ():
                if line.startswith(b"content-length:") and len(body) >= int(line[15:]):
                    return _response(data, t0)
    except (TimeoutError, ConnectionResetError):
        pass
    return _response(data, t0)


def _response(data: bytes, t0: float) -> RawResponse:
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/1.1 ") else 0
    return RawResponse(status, head.decode("latin-1"), body, time.monotonic() - t0)


def closed_by_peer(sock: socket.socket, timeout: float = 15) -> bool:
    """Whether the server closes ``sock`` within ``timeout`` (reading whatever comes first)."""
    sock.settimeout(timeout)
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        return False
    except ConnectionResetError:
        pass
    return True


def raw_request(port: int, data: bytes, timeout: float = 15) -> RawResponse:
    """Send ``data`` on a new connection and read the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        t0 = time.monotonic()
        sock.sendall(data)
        return read_response(sock, t0, timeout)


async def sse_many(
    url: str, path: str, bodies: list[dict[str, Any]], spread_s: float, timeout: float = 120
) -> list[StreamResult]:
    """Open one SSE stream per body, their starts spread evenly over ``spread_s`` seconds,
    each read to its end on its own connection (asyncio, for hundreds at once)."""
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=timeout) as client:

        async def one(i: int, body: dict[str, Any]) -> StreamResult:
            await asyncio.sleep(i * spread_s / max(1, len(bodies)))
            res = StreamResult(0)
            try:
                async with client.stream("POST", path, json=body) as r:
                    res.status = r.status_code
                    if r.status_code != 200:
                        res.error = (await r.aread()).decode()
                        return res
                    async for line in r.aiter_lines():
                        if line == "data: [DONE]":
                            res.done = True
                        elif line.startswith("data: "):
                            res.chunks.append(json.loads(line[6:]))
            except httpx.HTTPError as exc:
                res.error = type(exc).__name__
            return res

        return list(await asyncio.gather(*(one(i, b) for i, b in enumerate(bodies))))
