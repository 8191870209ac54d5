"""The ASGI app: routes, error handlers, access control and the lifespan that owns the
:class:`Runtime`.

``create_app(config)`` works in-process; ``create_app()`` reads ``STREAMSLO_SERVER_CONFIG``
(how Gunicorn workers get their settings: ``gunicorn 'streamslo.server.app:create_app()'``).
With ``api_key_env`` set, the key is read from that environment variable here, in each process.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.types import Receive, Scope, Send

from streamslo.server import http_api, metrics
from streamslo.server.access import AccessGuard
from streamslo.server.config import ServerConfig
from streamslo.server.dialects import anthropic_error_body, anthropic_request_id
from streamslo.server.protocol import APIError, error_body
from streamslo.server.runtime import Runtime
from streamslo.server.ws_api import ws_endpoint

__all__ = ["create_app"]

log = logging.getLogger(__name__)


def _route(path: str) -> str:
    # The raw scope path: building request.url parses the Host header, which a client controls.
    return path if path.startswith("/v1/") else "other"


def _count(request: Request, status: int) -> None:
    route = _route(request.scope["path"])
    metrics.REQUESTS.labels(route, str(status)).inc()
    if status >= 500:
        metrics.HTTP_5XX.labels(route).inc()


def _refusal_headers(request: Request, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Headers of a refusal: ``connection: close`` when the request's body was not read to
    its end, since its unread rest would keep the connection (and a client dribbling it)
    alive after the answer."""
    headers = dict(extra or {})
    h = request.headers
    expects_body = "transfer-encoding" in h or h.get("content-length", "0") not in ("", "0")
    if expects_body and not getattr(request.state, "body_read", False):
        headers["connection"] = "close"
    return headers


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, APIError)
    _count(request, exc.status)
    retry = {"retry-after": "1"} if exc.status in (429, 503) else {}
    return _error_response(request, exc.status, exc.message, exc.body(), retry)


def _error_response(
    request: Request,
    status: int,
    message: str,
    body: dict[str, object],
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    """An error answer: OpenAI's ``{"error": {...}}``, or on ``/v1/messages`` Anthropic's
    ``{"type": "error", "error": {"type", "message"}, "request_id"}`` with its ``request-id``
    header (the shape an Anthropic client reads, whatever the error)."""
    extra = dict(headers or {})
    if request.scope["path"] == "/v1/messages":
        rid = anthropic_request_id()
        body = anthropic_error_body(status, message, rid)
        extra["request-id"] = rid
    return JSONResponse(body, status_code=status, headers=_refusal_headers(request, extra))


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    _count(request, exc.status_code)
    path = request.scope["path"]
    msg = {404: f"no route {path}", 405: f"method {request.method} not allowed on {path}"}.get(
        exc.status_code, str(exc.detail)
    )
    return _error_response(
        request, exc.status_code, msg, error_body(exc.status_code, msg), exc.headers
    )


async def _internal_error(request: Request, exc: Exception) -> Response:
    log.error("internal error on %s", request.scope["path"], exc_info=exc)
    _count(request, 500)
    msg = f"internal error: {type(exc).__name__}"
    return _error_response(request, 500, msg, error_body(500, msg))


async def _not_found(scope: Scope, receive: Receive, send: Send) -> None:
    """No route matched. A WebSocket handshake gets the same 404 and error body as HTTP
    (Starlette's default refuses it with an empty 403)."""
    if scope["type"] == "websocket":
        metrics.REQUESTS.labels("other", "404").inc()
        body = json.dumps(error_body(404, f"no WebSocket route {scope['path']}")).encode()
        await send(
            {
                "type": "websocket.http.response.start",
                "status": 404,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "websocket.http.response.body", "body": body})
        return
    raise HTTPException(404)


def create_app(config: ServerConfig | None = None) -> Starlette:
    """Build the app. ``config`` defaults to :meth:`ServerConfig.from_env`.

    Raises:
        ValueError: ``api_key_env`` names an unset variable.
    """
    cfg = config if config is not None else ServerConfig.from_env()
    key = cfg.api_key()

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
        Route("/v1/responses", http_api.responses, methods=post),
        Route("/v1/messages", http_api.messages, methods=post),
        Route("/v1/models", http_api.models, methods=["GET"]),
        Route("/healthz", http_api.healthz, methods=["GET"]),
        Route("/readyz", http_api.readyz, methods=["GET"]),
        Route("/metrics", http_api.metrics_endpoint, methods=["GET"]),
        Route("/openapi.json", http_api.openapi_json, methods=["GET"]),
        Route("/debug/stalls", http_api.debug_stalls, methods=["GET"]),
        Route("/debug/workers", http_api.debug_workers, methods=["GET"]),
        WebSocketRoute("/v1/ws", ws_endpoint),
    ]
    handlers = {APIError: _api_error, HTTPException: _http_error, Exception: _internal_error}
    app = Starlette(
        routes=routes,
        exception_handlers=handlers,
        lifespan=lifespan,
        middleware=[Middleware(AccessGuard, api_key=key)],
    )
    # No 307 to the path without its slash: it builds the redirect from the Host header, and
    # a POST redirected is a POST lost for most clients.
    app.router.redirect_slashes = False
    app.router.default = _not_found
    return app
