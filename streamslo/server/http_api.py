"""HTTP endpoint handlers: generation (SSE or JSON), health, models, metrics, debug.

Every refusal is an :class:`~streamslo.server.protocol.APIError` turned into the error JSON
by the app's exception handler; nothing a client sends can produce a 5xx.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response

from streamslo.server import metrics, workerstate
from streamslo.server.config import MODEL_ID
from streamslo.server.dialects import parse_dialect_request
from streamslo.server.openapi import build_schema
from streamslo.server.protocol import APIError, error_body, parse_request
from streamslo.server.runtime import Runtime
from streamslo.server.streaming import SSEStreamResponse, complete_response

__all__ = [
    "chat_completions",
    "completions",
    "debug_stalls",
    "debug_workers",
    "healthz",
    "legacy_stream",
    "messages",
    "metrics_endpoint",
    "models",
    "openapi_json",
    "read_body",
    "readyz",
    "responses",
]


def _rt(request: Request) -> Runtime:
    rt: Runtime = request.app.state.runtime
    return rt


async def read_body(request: Request) -> bytes:
    """The request body.

    Raises:
        APIError: 415 for a content type other than JSON, 413 past ``max_body_bytes``, 408
            when the body takes longer than ``body_timeout_s`` to arrive (a client dribbling
            it), 499 when the client leaves before it arrived.
    """
    cfg = _rt(request).cfg
    limit = cfg.max_body_bytes
    ctype = request.headers.get("content-type")
    if ctype is not None:
        base = ctype.split(";", 1)[0].strip().lower()
        if base != "application/json" and not base.endswith("+json"):
            raise APIError(415, f"content-type must be application/json, got {base!r}")
    length = request.headers.get("content-length")
    if length is not None and length.isascii() and length.isdigit() and int(length) > limit:
        raise APIError(413, f"body of {length} bytes exceeds the {limit}-byte limit")
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(cfg.body_timeout_s):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise APIError(413, f"body exceeds the {limit}-byte limit")
                chunks.append(chunk)
    except TimeoutError:
        raise APIError(
            408, f"the request body did not arrive within {cfg.body_timeout_s:g} s"
        ) from None
    except ClientDisconnect:
        # Routine: the client left. 499 (nginx's "client closed request") is only counted;
        # nobody is there to read it.
        raise APIError(499, "the client closed the connection before its body arrived") from None
    request.state.body_read = True  # a refusal from here on may keep the connection
    return b"".join(chunks)


async def _generate(request: Request, kind: str, endpoint: str, default_stream: bool) -> Response:
    rt = _rt(request)
    raw = await read_body(request)
    req = parse_request(
        raw, kind, rt.cfg.default_max_tokens, default_stream, rt.rng, rt.cfg.max_tokens_limit
    )
    stream, chunks = rt.open(req)
    metrics.REQUESTS.labels(endpoint, "200").inc()
    if not req.stream:
        return await complete_response(stream, chunks)
    return SSEStreamResponse(stream, chunks, endpoint)


async def _generate_dialect(request: Request, kind: str, endpoint: str) -> Response:
    rt = _rt(request)
    raw = await read_body(request)
    req = parse_dialect_request(
        raw, kind, rt.cfg.default_max_tokens, rt.rng, rt.cfg.max_tokens_limit
    )
    stream, chunks = rt.open(req)
    metrics.REQUESTS.labels(endpoint, "200").inc()
    if not req.stream:
        return await complete_response(stream, chunks)
    return SSEStreamResponse(stream, chunks, endpoint)


async def responses(request: Request) -> Response:
    """``POST /v1/responses`` (OpenAI Responses API events)."""
    return await _generate_dialect(request, "responses", "/v1/responses")


async def messages(request: Request) -> Response:
    """``POST /v1/messages`` (Anthropic Messages events)."""
    return await _generate_dialect(request, "messages", "/v1/messages")


async def chat_completions(request: Request) -> Response:
    """``POST /v1/chat/completions``."""
    return await _generate(request, "chat", "/v1/chat/completions", default_stream=False)


async def completions(request: Request) -> Response:
    """``POST /v1/completions``."""
    return await _generate(request, "completion", "/v1/completions", default_stream=False)


async def legacy_stream(request: Request) -> Response:
    """``POST /v1/stream`` (incident A's endpoint): completion chunks, streaming by default."""
    return await _generate(request, "completion", "/v1/stream", default_stream=True)


async def healthz(request: Request) -> Response:
    """Liveness plus what is running (mode, faults, pid, version)."""
    return JSONResponse(_rt(request).health())


async def readyz(request: Request) -> Response:
    """200 when accepting streams; 503 while draining or full."""
    rt = _rt(request)
    full = rt.gen is None or rt.gen.full
    if rt.draining or full:
        reason = "draining" if rt.draining else "at capacity"
        return JSONResponse(
            {"status": reason, **error_body(503, f"not ready: {reason}")},
            status_code=503,
            headers={"retry-after": "1"},
        )
    return JSONResponse({"status": "ready"})


async def models(request: Request) -> Response:
    """The OpenAI model list: the one model."""
    rt = _rt(request)
    return JSONResponse(
        {
            "object": "list",
            "data": [
                {
                    "id": MODEL_ID,
                    "object": "model",
                    "created": int(rt.started_at),
                    "owned_by": "streamslo",
                    "max_model_len": rt.model.cfg.block_size,
                }
            ],
        }
    )


async def openapi_json(request: Request) -> Response:
    """The OpenAPI description of these routes, for this server's limits."""
    return JSONResponse(build_schema(_rt(request).cfg))


async def metrics_endpoint(request: Request) -> Response:
    """Prometheus text exposition."""
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)


async def debug_stalls(request: Request) -> Response:
    """Watchdog stall counts by cause and the recent stalls with their top frames."""
    return JSONResponse(_rt(request).watchdog.snapshot())


async def debug_workers(request: Request) -> Response:
    """This worker and the Gunicorn master's count of worker exits/aborts."""
    rt = _rt(request)
    state: dict[str, Any] = workerstate.read(rt.cfg.state_file)
    return JSONResponse(
        {
            "pid": os.getpid(),
            "ppid": os.getppid(),
            "server": rt.cfg.server,
            "uptime_s": round(time.time() - rt.started_at, 3),
            "worker_restarts_total": int(state.get("restarts", 0)),
            "worker_clean_exits_total": int(state.get("exits", 0)),
            "worker_aborts_total": int(state.get("aborts", 0)),
            "events": state.get("events", []),
        }
    )
