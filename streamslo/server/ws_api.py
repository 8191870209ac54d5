"""``GET /v1/ws``: the WebSocket twin of the SSE endpoints (the wire protocol in ``docs/server.md``).

Per request: the client sends one JSON text frame (chat when it has ``messages``, completion
when it has ``prompt``); the server sends each chunk as a text frame, then ``[DONE]``; the
connection may carry the next request. Errors: an error frame, then close 1008 (bad request),
1011 (server fault) or 1013 (try later: full or draining). A binary frame is a bad request
(1008); a message over ``max_body_bytes`` is refused by the protocol layer with 1009.

A read-ahead task receives frames while a stream runs, so a client that leaves mid-stream
stops its generation at once. What it reads ahead is bounded: at most
:data:`MAX_QUEUED_REQUESTS` requests and ``max_body_bytes`` bytes may wait behind the current
stream; past that the connection is refused (error frame, close 1008) and reading stops, so the
transport pushes back instead of one client filling the worker's memory.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from typing import Any

from starlette.websockets import WebSocket, WebSocketDisconnect

from streamslo.server import metrics
from streamslo.server.engine import TokenStream
from streamslo.server.protocol import APIError, ChunkFactory, parse_request
from streamslo.server.runtime import Runtime
from streamslo.server.streaming import pump, write_timed_out

__all__ = ["MAX_QUEUED_REQUESTS", "ws_endpoint"]

_ENDPOINT = "/v1/ws"
#: Requests one connection may send ahead of the stream it is reading.
MAX_QUEUED_REQUESTS = 4
#: What a write to a client that has gone can raise (Starlette turns Uvicorn's
#: ``ClientDisconnected`` into ``WebSocketDisconnect``; a closed state is a RuntimeError).
_GONE = (OSError, RuntimeError, WebSocketDisconnect)


async def _refuse(ws: WebSocket, err: APIError) -> None:
    metrics.REQUESTS.labels(_ENDPOINT, str(err.status)).inc()
    # A close reason may hold 123 bytes of UTF-8.
    reason = err.message.encode()[:120].decode(errors="ignore")
    try:
        await ws.send_text(json.dumps(err.body()))
        await ws.close(err.ws_close_code, reason)
    except _GONE:
        pass  # the client is already gone


class _ReadAhead:
    """Frames received while a stream runs, bounded in count and bytes."""

    def __init__(self, ws: WebSocket, max_bytes: int) -> None:
        self.ws = ws
        self.max_bytes = max_bytes
        self.current: TokenStream | None = None
        """The stream being written; cancelled when the client leaves or overflows."""
        self.overflow = False
        self._frames: deque[str | bytes | None] = deque()  # None: the client left
        self._bytes = 0
        self._wake = asyncio.Event()

    def _push(self, frame: str | bytes | None) -> None:
        self._frames.append(frame)
        self._bytes += len(frame) if frame is not None else 0
        self._wake.set()

    def _stop_current(self) -> None:
        if self.current is not None:
            self.current.cancel()

    async def run(self) -> None:
        """The read-ahead task: receive until the client leaves or overflows the bound."""
        while True:
            msg: dict[str, Any] = dict(await self.ws.receive())
            if msg["type"] == "websocket.disconnect":
                if self.current is not None:
                    self.current.client_gone()
                self._push(None)
                return
            frame: str | bytes = (
                msg["text"] if msg.get("text") is not None else msg.get("bytes") or b""
            )
            if (
                len(self._frames) >= MAX_QUEUED_REQUESTS
                or self._bytes + len(frame) > self.max_bytes
            ):
                self.overflow = True
                self._stop_current()
                self._wake.set()
                return  # stop reading: the transport now pushes back on the client
            self._push(frame)

    async def next(self) -> str | bytes | None:
        """The next request frame, or None when the client has left.

        Raises:
            APIError: the client sent more requests ahead than the bound allows.
        """
        while True:
            if self.overflow:
                raise APIError(
                    400,
                    f"more than {MAX_QUEUED_REQUESTS} requests (or "
                    f"{self.max_bytes} bytes) queued on one connection; "
                    "send the next request after [DONE]",
                )
            if self._frames:
                frame = self._frames.popleft()
                self._bytes -= len(frame) if frame is not None else 0
                return frame
            self._wake.clear()
            await self._wake.wait()


async def ws_endpoint(ws: WebSocket) -> None:
    """Serve requests on one WebSocket connection until the client leaves or an error."""
    rt: Runtime = ws.app.state.runtime
    try:
        await ws.accept()
    except _GONE:
        return
    inbox = _ReadAhead(ws, rt.cfg.max_body_bytes)
    read_task = asyncio.ensure_future(inbox.run())
    try:
        while True:
            try:
                frame = await inbox.next()
                if frame is None:
                    return
                if not isinstance(frame, str):
                    raise APIError(400, "binary frames are not supported; send JSON text")
                req = parse_request(
                    frame, None, rt.cfg.default_max_tokens, True, rt.rng, rt.cfg.max_tokens_limit
                )
                stream, chunks = rt.open(req)
            except APIError as err:
                await _refuse(ws, err)
                return
            metrics.REQUESTS.labels(_ENDPOINT, "101").inc()
            inbox.current = stream
            more = await _serve_one(ws, stream, chunks)
            inbox.current = None
            if not more and not inbox.overflow:
                return  # on overflow, the loop's next() refuses the connection
    finally:
        read_task.cancel()


async def _serve_one(ws: WebSocket, stream: TokenStream, chunks: ChunkFactory) -> bool:
    """Stream one request; True when the connection may carry the next one."""
    t0 = time.perf_counter()
    outcome = "error"
    try:
        outcome = await pump(stream, chunks, ws.send_text, "ws")
        if outcome == "cancelled":
            return False
        if outcome == "error":
            await ws.close(1011, "generation failed")
            return False
        await ws.send_text("[DONE]")
        return True
    except asyncio.CancelledError:
        if not write_timed_out(stream):
            raise
        outcome = "write_timeout"
        return False
    except _GONE:  # client gone mid-stream
        stream.client_gone()
        outcome = "cancelled"
        return False
    finally:
        metrics.OUTCOMES.labels(outcome).inc()
        metrics.REQUEST_LATENCY.labels(_ENDPOINT).observe(time.perf_counter() - t0)
