"""The bundled server's app in this process: starlette's ``TestClient`` runs the app's lifespan
(the real :class:`~streamslo.server.runtime.Runtime`: model, batched engine, watchdog) on a
thread of its own and speaks HTTP and WebSocket to it without a socket.

For what the app decides: request validation, error bodies, routes, framing and content of the
dialects' streams, access control. ``TestClient`` reads a response whole before it hands it
over, so nothing here may time a token (docs/STYLE: in-process clients buffer the body);
Uvicorn's and Gunicorn's own parts (head and body timeouts, the connection cap, the WebSocket
message limit, the linger after a 413, resets, drains) only a real socket shows
(:mod:`tests.server.servers`).

Starting an app here costs the first test of a worker torch's import (~2 s of CPU) and then
~0.1 s; a server subprocess cost ~2 s of CPU and 1.5 s to 20 s of wall time each (a quiet and a
busy 2-core machine), and the suite started dozens.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from tests.server.streams import StreamResult

if TYPE_CHECKING:
    from starlette.testclient import TestClient, WebSocketTestSession

__all__ = ["LOOPBACK", "WSClosed", "app_client", "ws_recv", "ws_refusal", "ws_requests"]

#: The client address a request has (starlette's default, "testclient", is no address at all):
#: loopback, as the socket tests' clients are.
LOOPBACK = ("127.0.0.1", 50000)


@contextlib.contextmanager
def app_client(
    *,
    env: dict[str, str] | None = None,
    client: tuple[str, int] = LOOPBACK,
    **settings: Any,
) -> Iterator[TestClient]:
    """The app built from ``ServerConfig.build(**settings)``, its lifespan started, and a
    client bound to it (``base_url`` http://testserver, from ``client``'s address); ``env`` is
    set while the app is built (``api_key_env`` reads its variable then). The app sits behind
    the proxy-headers middleware Uvicorn puts in front of it (``X-Forwarded-For`` trusted from
    loopback, Uvicorn's default). Server-side exceptions are raised in the test
    (``raise_server_exceptions``), so an internal error cannot pass for an answer."""
    # torch and the app, imported by the tests that start one, not at collection (seconds in
    # every worker of the suite)
    from starlette.testclient import TestClient
    from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

    from streamslo.server.app import create_app
    from streamslo.server.config import ServerConfig

    saved = {k: os.environ.get(k) for k in env or {}}
    os.environ.update(env or {})
    try:
        app = create_app(ServerConfig.build(**settings))
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    proxied = ProxyHeadersMiddleware(app, trusted_hosts="127.0.0.1,::1")
    try:
        with TestClient(proxied, client=client) as tc:  # type: ignore[arg-type]
            yield tc
    finally:
        # A fixed-mode start-up freezes the heap (gc.freeze, for the server's pauses): here it
        # froze this test process's, so give the later tests back their collector.
        gc.unfreeze()


class WSClosed(Exception):
    """The app closed the WebSocket."""

    def __init__(self, code: int) -> None:
        super().__init__(f"closed {code}")
        self.code = code


def ws_recv(ws: WebSocketTestSession) -> str:
    """The next message (text, or binary read as UTF-8).

    Raises:
        WSClosed: the app closed the WebSocket instead (with its close code).
    """
    msg = ws.receive()
    if msg["type"] == "websocket.close":
        raise WSClosed(int(msg.get("code", 1000)))
    text = msg.get("text")
    return str(text) if text is not None else bytes(msg["bytes"]).decode()


def ws_requests(
    tc: TestClient, bodies: list[dict[str, Any]], headers: dict[str, str] | None = None
) -> list[StreamResult]:
    """Send each body in turn on one WebSocket, reading each to its [DONE] (as
    :func:`tests.server.streams.ws_requests` does over a socket)."""
    results = []
    with tc.websocket_connect("/v1/ws", headers=dict(headers or {})) as ws:
        for body in bodies:
            res = StreamResult(101)
            ws.send_text(json.dumps(body))
            try:
                while (msg := ws_recv(ws)) != "[DONE]":
                    res.chunks.append(json.loads(msg))
                res.done = True
            except WSClosed as closed:
                res.error = str(closed)
            results.append(res)
            if not res.done:
                break
    return results


def ws_refusal(tc: TestClient, frame: str | bytes) -> tuple[dict[str, Any] | None, int]:
    """Send one message; (the last JSON message read, the close code) once the app closes."""
    with tc.websocket_connect("/v1/ws") as ws:
        if isinstance(frame, bytes):
            ws.send_bytes(frame)
        else:
            ws.send_text(frame)
        err = None
        try:
            while True:
                err = json.loads(ws_recv(ws))
        except WSClosed as closed:
            return err, closed.code
