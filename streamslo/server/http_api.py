"""HTTP endpoint handlers: generation (SSE or JSON), health, models, metrics, debug.

Every refusal is an :class:`~streamslo.server.protocol.APIError` turned into the SPEC's error JSON
by the app's exception handler; nothing a client sends can produce a 5xx.
"""

from __future__ import annotations

import os
import time
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from streamslo.server import metrics, workerstate
from streamslo.server.config import MAX_BODY_BYTES, MODEL_ID
from streamslo.server.protocol import APIError, parse_request
from streamslo.server.runtime import Runtime
from streamslo.server.streaming import SSEStreamResponse, complete_response

__all__ = [
    "chat_completions",
    "completions",
    "debug_stalls",
    "debug_workers",
    "healthz",
    "legacy_stream",
    "metrics_endpoint",
    "models",
    "read_body",
    "readyz",
]


def _rt(request: Request) -> Runtime:
    rt: Runtime = request.app.state.runtime
    return rt


async def read_body(request: Request) -> bytes:
    """The request body, refusing a wrong content type (415) or more than 1 MiB (413)."""
    ctype = request.headers.get("content-type")
    if ctype is not None:
        base = ctype.split(";", 1)[0].strip().lower()
        if base != "application/json" and not base.endswith("+json"):
            raise APIError(415, f"content-type must be application/json, got {base!r}")
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > MAX_BODY_BYTES:
        raise APIError(413, f"body of {length} bytes exceeds the {MAX_BODY_BYTES}-byte limit")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise APIError(413, f"body exceeds the {MAX_BODY_BYTES}-byte limit")
        chunks.append(chunk)
    return b"".join(chunks)


async def _generate(request: Request, kind: str, endpoint: str, default_stream: bool) -> Response:
    rt = _rt(request)
    raw = await read_body(request)
    req = parse_request(raw, kind, rt.cfg.default_max_tokens, default_stream, rt.rng)
    stream, chunks = rt.open(req)
    metrics.REQUESTS.labels(endpoint, "200").inc()
    if not req.stream:
        return await complete_response(stream, chunks)
    return SSEStreamResponse(stream, chunks, endpoint)


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
    full = rt.gen is None or rt.gen.inflight >= rt.cfg.max_streams
    if rt.draining or full:
        reason = "draining" if rt.draining else "at capacity"
        return JSONResponse({"status": reason}, status_code=503)
    return JSONResponse({"status": "ready"})


async def models(request: Request) -> Response:
    """The OpenAI model list: the one model."""
    rt = _rt(request)
    return JSONResponse({"object": "list", "data": [
        {"id": MODEL_ID, "object": "model", "created": int(rt.started_at), "owned_by": "streamslo",
         "max_model_len": rt.model.cfg.block_size}]})


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
    return JSONResponse({
        "pid": os.getpid(), "ppid": os.getppid(), "server": rt.cfg.server,
        "uptime_s": round(time.time() - rt.started_at, 3),
        "worker_restarts_total": int(state.get("restarts", 0)),
        "worker_clean_exits_total": int(state.get("exits", 0)),
        "worker_aborts_total": int(state.get("aborts", 0)),
        "events": state.get("events", []),
    })
