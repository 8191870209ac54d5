"""Who may call what: the optional API key on ``/v1/*`` and loopback-only ``/debug/*``.

An ASGI middleware in front of the routes (HTTP and the WebSocket handshake alike):

- With a key (``streamslo serve --api-key-env VAR``: the key is read from the environment, never
  from a command line), every ``/v1/*`` request must carry ``Authorization: Bearer <key>``;
  a missing or wrong key gets 401 with the error body (a WebSocket handshake is refused with
  the same 401). ``/v1/messages`` takes Anthropic's ``x-api-key: <key>`` too, and refuses in
  Anthropic's error shape. Keys are compared in constant time.
- ``/debug/*`` (stack samples, worker pids) answers loopback clients, and others only with the
  key: 403 without a key configured, 401 with a wrong one.
- ``/healthz``, ``/readyz``, ``/metrics`` and ``/openapi.json`` stay open, as health checks and
  scrapers expect.

"Loopback" is the client address Uvicorn reports, which honours ``X-Forwarded-For`` only from
trusted proxies (``FORWARDED_ALLOW_IPS``, by default 127.0.0.1): a reverse proxy on the same host
that forwards other clients must set it, or they all look local.
"""

from __future__ import annotations

import hmac
import ipaddress
import json

from starlette.types import ASGIApp, Receive, Scope, Send

from streamslo.server import metrics
from streamslo.server.dialects import anthropic_error_body, anthropic_request_id
from streamslo.server.protocol import APIError

__all__ = ["AccessGuard", "is_loopback"]


def is_loopback(client: tuple[str, int] | None) -> bool:
    """Whether an ASGI ``client`` (``(host, port)`` or None) is this machine."""
    if not client:
        return False
    try:
        addr = ipaddress.ip_address(str(client[0]))
    except ValueError:
        return False
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return addr.is_loopback


def _bearer(scope: Scope) -> bytes | None:
    """The key a request carries: ``Authorization: Bearer <key>``, or Anthropic's
    ``x-api-key: <key>`` (the Messages dialect's header)."""
    for name, value in scope.get("headers", ()):
        if name.lower() == b"authorization":
            scheme, _, token = bytes(value).strip().partition(b" ")
            return token.strip() if scheme.lower() == b"bearer" else None
    for name, value in scope.get("headers", ()):
        if name.lower() == b"x-api-key":
            return bytes(value).strip()
    return None


class AccessGuard:
    """The middleware; ``api_key`` None means no key is configured."""

    def __init__(self, app: ASGIApp, api_key: str | None = None) -> None:
        self.app = app
        self._key = api_key.encode() if api_key else None

    def _key_ok(self, scope: Scope) -> bool:
        token = _bearer(scope)
        # compare_digest: the time taken does not depend on how much of the key matched.
        return self._key is not None and token is not None and hmac.compare_digest(token, self._key)

    def refusal(self, scope: Scope) -> APIError | None:
        """Why this request may not pass, or None."""
        path = str(scope.get("path", ""))
        if path.startswith("/debug/"):
            if is_loopback(scope.get("client")) or self._key_ok(scope):
                return None
            if self._key is None:
                return APIError(403, "/debug/ answers loopback clients only")
            return APIError(401, "/debug/ needs loopback or 'Authorization: Bearer <key>'")
        if path.startswith("/v1/") and self._key is not None and not self._key_ok(scope):
            if path == "/v1/messages":
                return APIError(401, "missing or wrong API key: send 'x-api-key: <key>'")
            return APIError(401, "missing or wrong API key: send 'Authorization: Bearer <key>'")
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        err = self.refusal(scope) if scope["type"] in ("http", "websocket") else None
        if err is None:
            await self.app(scope, receive, send)
            return
        route = scope["path"] if str(scope["path"]).startswith("/v1/") else "other"
        metrics.REQUESTS.labels(route, str(err.status)).inc()
        extra: list[tuple[bytes, bytes]] = []
        if scope["path"] == "/v1/messages":  # Anthropic's error shape and request-id header
            rid = anthropic_request_id()
            body = json.dumps(anthropic_error_body(err.status, err.message, rid)).encode()
            extra.append((b"request-id", rid.encode()))
        else:
            body = json.dumps(err.body()).encode()
        # connection: close: the request's body, if any, is never read.
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
            *extra,
        ]
        if err.status == 401:
            headers.append((b"www-authenticate", b"Bearer"))
        if scope["type"] == "http":
            await send({"type": "http.response.start", "status": err.status, "headers": headers})
            await send({"type": "http.response.body", "body": body})
        elif "websocket.http.response" in scope.get("extensions", {}):
            await send(
                {"type": "websocket.http.response.start", "status": err.status, "headers": headers}
            )
            await send({"type": "websocket.http.response.body", "body": body})
        else:  # a server without the denial-response extension: refuse the handshake plainly
            await send({"type": "websocket.close", "code": 1008})
