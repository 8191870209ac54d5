"""The ASGI app: routes, error handlers and the lifespan that owns the :class:`Runtime`.

``create_app(config)`` works in-process; ``create_app()`` reads ``STREAMSLO_SERVER_CONFIG``
(how Gunicorn workers get their settings: ``gunicorn 'streamslo.server.app:create_app()'``).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute

from streamslo.server import http_api, metrics
from streamslo.server.config import ServerConfig
from streamslo.server.protocol import APIError, error_body
from streamslo.server.runtime import Runtime
from streamslo.server.ws_api import ws_endpoint

__all__ = ["create_app"]

log = logging.getLogger("streamslo.server.app")


def _count(request: Request, status: int) -> None:
    route = request.url.path if request.url.path.startswith("/v1/") else "other"
    metrics.REQUESTS.labels(route, str(status)).inc()
    if status >= 500:
        metrics.HTTP_5XX.labels(route).inc()


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, APIError)
    _count(request, exc.status)
    headers = {"retry-after": "1"} if exc.status in (429, 503) else None
    return JSONResponse(exc.body(), status_code=exc.status, headers=headers)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    _count(request, exc.status_code)
    msg = {404: f"no route {request.url.path}",
           405: f"method {request.method} not allowed on {request.url.path}"}.get(
        exc.status_code, str(exc.detail))
    return JSONResponse(error_body(exc.status_code, msg), status_code=exc.status_code,
                        headers=exc.headers)


async def _internal_error(request: Request, exc: Exception) -> Response:
    log.error("internal error on %s", request.url.path, exc_info=exc)
    _count(request, 500)
    return JSONResponse(error_body(500, f"internal error: {type(exc).__name__}"), status_code=500)


def create_app(config: ServerConfig | None = None) -> Starlette:
    """Build the app. ``config`` defaults to :meth:`ServerConfig.from_env`."""
    cfg = config if config is not None else ServerConfig.from_env()

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        runtime = Runtime(cfg)
        app.state.runtime = runtime
        await runtime.startup()
        try:
            yield
        finally:
            await runtime.shutdown()

    post = ["POST"]
    routes = [
        Route("/v1/chat/completions", http_api.chat_completions, methods=post),
        Route("/v1/completions", http_api.completions, methods=post),
        Route("/v1/stream", http_api.legacy_stream, methods=post),
        Route("/v1/models", http_api.models, methods=["GET"]),
        Route("/healthz", http_api.healthz, methods=["GET"]),
        Route("/readyz", http_api.readyz, methods=["GET"]),
        Route("/metrics", http_api.metrics_endpoint, methods=["GET"]),
        Route("/debug/stalls", http_api.debug_stalls, methods=["GET"]),
        Route("/debug/workers", http_api.debug_workers, methods=["GET"]),
        WebSocketRoute("/v1/ws", ws_endpoint),
    ]
    handlers = {APIError: _api_error, HTTPException: _http_error, Exception: _internal_error}
    return Starlette(routes=routes, exception_handlers=handlers, lifespan=lifespan)  # type: ignore[arg-type]
