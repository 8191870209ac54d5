"""``GET /v1/ws``: the WebSocket twin of the SSE endpoints (SPEC §2).

Per request: the client sends one JSON text frame (chat when it has ``messages``, completion
when it has ``prompt``); the server sends each chunk as a text frame, then ``[DONE]``; the
connection may carry the next request. Errors: an error frame, then close 1008 (bad request),
1011 (server fault) or 1013 (try later: full or draining). A binary frame is a bad request
(1008); a frame over 1 MiB is refused by the protocol layer with 1009 (``ws_max_size``).
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from starlette.websockets import WebSocket

from streamslo.server import metrics
from streamslo.server.engine import TokenStream
from streamslo.server.protocol import APIError, parse_request
from streamslo.server.runtime import Runtime
from streamslo.server.streaming import pump

__all__ = ["ws_endpoint"]

_ENDPOINT = "/v1/ws"


async def _refuse(ws: WebSocket, err: APIError) -> None:
    metrics.REQUESTS.labels(_ENDPOINT, str(err.status)).inc()
    try:
        await ws.send_text(json.dumps(err.body()))
        await ws.close(err.ws_close_code, err.message[:120])
    except (OSError, RuntimeError):
        pass  # the client is already gone


async def ws_endpoint(ws: WebSocket) -> None:
    """Serve requests on one WebSocket connection until the client leaves or an error."""
    rt: Runtime = ws.app.state.runtime
    await ws.accept()
    inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    current: list[TokenStream] = []

    async def reader() -> None:
        # Reads ahead so a disconnect mid-stream cancels generation at once.
        while True:
            msg = await ws.receive()
            if msg["type"] == "websocket.disconnect":
                for s in current:
                    s.cancel()
                await inbox.put(msg)
                return
            await inbox.put(msg)

    read_task = asyncio.ensure_future(reader())
    try:
        while True:
            msg = await inbox.get()
            if msg["type"] == "websocket.disconnect":
                return
            text = msg.get("text")
            if text is None:
                await _refuse(ws, APIError(400, "binary frames are not supported; send JSON text"))
                return
            try:
                req = parse_request(text, None, rt.cfg.default_max_tokens, True, rt.rng)
                stream, chunks = rt.open(req)
            except APIError as err:
                await _refuse(ws, err)
                return
            metrics.REQUESTS.labels(_ENDPOINT, "101").inc()
            current[:] = [stream]
            if not await _serve_one(ws, stream, chunks):
                return
    finally:
        read_task.cancel()


async def _serve_one(ws: WebSocket, stream: TokenStream, chunks: Any) -> bool:
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
        if not stream.timed_out:
            raise
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()
        outcome = "write_timeout"
        return False
    except (OSError, RuntimeError):  # client gone mid-stream
        stream.cancel()
        outcome = "cancelled"
        return False
    finally:
        metrics.OUTCOMES.labels(outcome).inc()
        metrics.REQUEST_LATENCY.labels(_ENDPOINT).observe(time.perf_counter() - t0)
