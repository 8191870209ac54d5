"""Writing one stream: the shared token pump, the SSE response, the non-streaming response.

The pump is transport-neutral: it takes an ``emit(str)`` coroutine (an SSE event or a WS text
frame). It marks each write's start so the runtime's sweeper can abort a write blocked past the
write timeout (a slow reader), and it counts tokens written, so the buffer bound holds.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from streamslo.server import metrics
from streamslo.server import sse_encode as sse
from streamslo.server.engine import TokenStream
from streamslo.server.protocol import ChunkFactory, error_body

__all__ = ["SSEStreamResponse", "complete_response", "pump", "write_timed_out"]


def write_timed_out(stream: TokenStream) -> bool:
    """Call on ``CancelledError`` in a stream's writer. True when the runtime's sweeper
    cancelled the writer for a write timeout (a slow reader): the task is uncancelled, so the
    handler can end the stream and return normally. False for any other cancellation, which
    the caller re-raises."""
    if not stream.timed_out:
        return False
    task = asyncio.current_task()
    if task is not None:
        task.uncancel()
    return True


async def pump(
    stream: TokenStream,
    chunks: ChunkFactory,
    emit: Callable[[str], Awaitable[None]],
    transport: str,
) -> str:
    """Write a stream's chunks until it ends; returns the server-side outcome.

    Outcomes: ``length``/``stop`` (finished), ``error`` (error chunk sent), ``cancelled`` (the
    client left, or shutdown). A write timeout surfaces as ``CancelledError`` with
    ``stream.timed_out`` set; the caller handles it.
    """
    stream.writer_task = asyncio.current_task()
    active = metrics.ACTIVE_STREAMS.labels(transport)
    active.inc()
    n = 0
    try:
        role = chunks.role()
        if role is not None:
            await emit(role)
        async for kind, value in stream:
            if kind == "token":
                data = chunks.token(value)
                stream.chunk_bytes = len(data) + 8
                stream.write_started = time.perf_counter()
                await emit(data)
                stream.write_started = 0.0
                stream.mark_consumed()
                metrics.TOKENS.inc()
                n += 1
            elif kind == "end":
                await emit(chunks.finish(value, n))
                return value
            else:
                await emit(chunks.error(value))
                return "error"
        return "cancelled"
    finally:
        active.dec()
        stream.write_started = 0.0
        stream.cancel()


class SSEStreamResponse(Response):
    """``200 text/event-stream`` driven by a :class:`TokenStream`; stops generation when the
    client disconnects (a concurrent ``receive()`` for ``http.disconnect``)."""

    def __init__(self, stream: TokenStream, chunks: ChunkFactory, endpoint: str) -> None:
        super().__init__(status_code=200)
        self.stream = stream
        self.chunks = chunks
        self.endpoint = endpoint

    async def _listen(self, receive: Receive) -> None:
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                self.stream.client_gone()
                return

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        t0 = time.perf_counter()
        await send({"type": "http.response.start", "status": 200, "headers": sse.HEADERS})

        encode = (lambda data: data.encode()) if self.chunks.framed else sse.encode

        async def emit(data: str) -> None:
            await send({"type": "http.response.body", "body": encode(data), "more_body": True})

        listener = asyncio.ensure_future(self._listen(receive))
        outcome = "error"
        try:
            outcome = await pump(self.stream, self.chunks, emit, "sse")
            if outcome != "cancelled":
                await send(
                    {"type": "http.response.body", "body": self.chunks.done, "more_body": False}
                )
        except asyncio.CancelledError:
            if not write_timed_out(self.stream):
                raise
            # Returning mid-body makes the server close the connection: the slow reader is cut.
            outcome = "write_timeout"
        finally:
            listener.cancel()
            metrics.OUTCOMES.labels(outcome).inc()
            metrics.REQUEST_LATENCY.labels(self.endpoint).observe(time.perf_counter() - t0)


async def complete_response(stream: TokenStream, chunks: ChunkFactory) -> Response:
    """``stream: false``: gather the whole completion into one JSON response."""
    parts: list[str] = []
    reason = "stop"
    try:
        async for kind, value in stream:
            if kind == "token":
                parts.append(value)
                stream.mark_consumed()
            elif kind == "end":
                reason = value
                break
            else:
                body: dict[str, Any] = error_body(500, value, "server_error")
                metrics.OUTCOMES.labels("error").inc()
                return JSONResponse(body, status_code=500)
    finally:
        stream.cancel()
    metrics.OUTCOMES.labels(reason).inc()
    metrics.TOKENS.inc(len(parts))
    return JSONResponse(chunks.complete("".join(parts), reason, len(parts)))
