"""Connection-level limits: what a client can do before the app sees a request.

Uvicorn's own HTTP/1.1 and WebSocket protocols, subclassed (``uvicorn.Config(http=..., ws=...)``
takes a class, in both launch paths):

- **Head timeout**: a request head (request line and headers) must arrive within
  ``header_timeout_s`` of its first byte, or of the connection opening. A client that dribbles
  it (slowloris) gets 408 and is cut; an idle connection that sent nothing is closed quietly.
  Uvicorn has no such timer: its keep-alive timer stops at the first byte of the next request.
- **Connection cap**: past ``max_connections`` open connections (HTTP and WebSocket), a new
  connection's request gets 503 with ``Retry-After`` and ``connection: close``; a WebSocket
  handshake on it is accepted and closed at once with an error frame and 1013 (try later).
- **Error bodies**: every refusal at this level carries ``{"error": {...}}``: malformed HTTP
  (Uvicorn's is plain text), input h11 accepts but Uvicorn cannot decode (a non-ASCII request
  target used to raise inside Uvicorn and drop the connection without an answer), refused
  WebSocket handshakes; on an open WebSocket, an error frame comes before the close for a
  message over the size limit (1009), a broken frame (1002) and a text frame that is not
  UTF-8 (1007, without the traceback Uvicorn logs for it).
- **Lingering close**: a refusal sent while the client is still sending its body (413 for an
  oversized body, any error before the body was read) closes gracefully: the answer, then a
  half-close (FIN), then the rest of the body read and discarded until the client closes, for
  at most ``LINGER_S`` seconds and ``LINGER_BYTES`` bytes, then the close. Closing at once
  with unread input makes the kernel send a reset, and a client still writing its body then
  gets that reset instead of the answer (Apache's and nginx's lingering close, Go's
  ``closeWriteAndWait``).

The limits come from the process's :class:`~streamslo.server.runtime.Runtime` (the app's
lifespan starts it before Uvicorn accepts connections).
"""

from __future__ import annotations

import asyncio
import email.utils
import http
import json
import logging
from typing import TYPE_CHECKING, Any

import h11
from starlette.types import Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.datastructures import Headers
from websockets.exceptions import PayloadTooBig, ProtocolError
from websockets.frames import Frame, Opcode
from websockets.http11 import Response
from websockets.protocol import State
from websockets.server import ServerProtocol

from streamslo.server import metrics, runtime
from streamslo.server.config import ServerConfig
from streamslo.server.protocol import APIError, error_body

if TYPE_CHECKING:
    from uvicorn._types import ASGISendEvent

__all__ = [
    "LINGER_BYTES",
    "LINGER_S",
    "GuardedH11Protocol",
    "GuardedWSProtocol",
    "over_capacity_app",
]

#: Longest a refused client may go on sending its body after the answer (nginx's lingering_timeout).
LINGER_S = 5.0
#: Most bytes of a refused body read and discarded before the close (a body over the limit
#: is usually a few times the limit; the rest of a larger one gets the reset).
LINGER_BYTES = 64 * 1024 * 1024

log = logging.getLogger(__name__)


def _limits() -> ServerConfig:
    rt = runtime.current()
    return rt.cfg if rt is not None else ServerConfig()


def _json(status: int, message: str) -> bytes:
    return json.dumps(error_body(status, message)).encode()


def _phrase(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return ""


async def over_capacity_app(scope: Scope, receive: Receive, send: Send) -> None:
    """The app every request on a connection past the cap gets: 503 (WebSocket: 1013)."""
    err = APIError(
        503, "the server holds its maximum of open connections (--max-connections); retry later"
    )
    if scope["type"] == "http":
        body = json.dumps(err.body()).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 503,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"retry-after", b"1"),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
    elif scope["type"] == "websocket":
        await receive()  # websocket.connect
        await send({"type": "websocket.accept"})
        await send({"type": "websocket.send", "text": json.dumps(err.body())})
        await send(
            {"type": "websocket.close", "code": err.ws_close_code, "reason": "over capacity"}
        )


class _LingeringTransport(asyncio.Transport):
    """The connection's transport as Uvicorn's request cycles see it: the same, except that
    ``close()`` while the client is still sending its request body lingers (the module
    docstring) instead of closing at once."""

    def __init__(self, transport: asyncio.Transport, protocol: GuardedH11Protocol) -> None:
        super().__init__()
        self.real = transport
        self._protocol = protocol

    def close(self) -> None:
        proto = self._protocol
        if (
            proto.lingering
            or self.real.is_closing()
            or not self.real.can_write_eof()
            or proto.conn.their_state is not h11.SEND_BODY
        ):
            self.real.close()
            return
        proto.lingering = True
        self.real.write_eof()  # the answer, then FIN: the client reads it and sees the end
        self.real.resume_reading()  # Uvicorn pauses reading while a body waits to be read
        proto.loop.call_later(LINGER_S, self.real.close)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.real.write(data)

    def writelines(self, list_of_data: Any) -> None:
        self.real.writelines(list_of_data)

    def write_eof(self) -> None:
        self.real.write_eof()

    def can_write_eof(self) -> bool:
        return self.real.can_write_eof()

    def abort(self) -> None:
        self.real.abort()

    def is_closing(self) -> bool:
        return self.real.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.real.get_extra_info(name, default)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self.real.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self.real.get_protocol()

    def is_reading(self) -> bool:
        return self.real.is_reading()

    def pause_reading(self) -> None:
        self.real.pause_reading()

    def resume_reading(self) -> None:
        self.real.resume_reading()

    def get_write_buffer_size(self) -> int:
        return self.real.get_write_buffer_size()

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self.real.get_write_buffer_limits()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self.real.set_write_buffer_limits(high, low)


class GuardedH11Protocol(H11Protocol):
    """Uvicorn's h11 protocol with a head timeout, a connection cap, JSON refusals and a
    lingering close."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limits = _limits()
        self.over_capacity = False
        self.lingering = False
        self._discarded = 0
        self._head_timer: asyncio.TimerHandle | None = None

    # -- the connection cap ------------------------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.transport = _LingeringTransport(transport, self)
        if len(self.connections) > self.limits.max_connections:
            self.over_capacity = True
            self.app = over_capacity_app
            metrics.CONNECTIONS_REFUSED.labels("over_capacity").inc()
        self._arm_head_timer()

    def handle_websocket_upgrade(self, event: h11.Request) -> None:
        self._disarm_head_timer()
        if isinstance(self.transport, _LingeringTransport):
            self.transport = self.transport.real  # the WebSocket protocol takes the real one over
        super().handle_websocket_upgrade(event)
        if self.over_capacity:
            # The WebSocket protocol took the transport over; its ASGI task has not run yet.
            proto = self.transport.get_protocol()
            if isinstance(proto, WebSocketsSansIOProtocol):
                proto.app = self.app

    # -- the head timeout --------------------------------------------------------------------
    def _arm_head_timer(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(
                self.limits.header_timeout_s, self._head_timeout
            )

    def _disarm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timeout(self) -> None:
        self._head_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        if self.conn.trailing_data[0]:  # part of a head arrived, and no more in time
            metrics.CONNECTIONS_REFUSED.labels("head_timeout").inc()
            self._refuse(
                408, f"the request head did not arrive within {self.limits.header_timeout_s:g} s"
            )
        else:  # nothing was sent: close quietly, as the keep-alive timer does
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        if self.lingering:  # the rest of a refused body: read and dropped, up to a bound
            self._discarded += len(data)
            if self._discarded > LINGER_BYTES:
                self.transport.abort()
            return
        try:
            super().data_received(data)
        except Exception as exc:
            # Input h11 accepts but Uvicorn cannot decode (a request target with bytes
            # over 0x7f): refuse it instead of letting asyncio drop the connection.
            log.info("refused a request Uvicorn could not decode: %s: %s", type(exc).__name__, exc)
            self._refuse(400, "invalid HTTP request: the request target is not ASCII")
            return
        if self.transport.is_closing():
            self._disarm_head_timer()
        elif self.conn.their_state is h11.IDLE:
            self._arm_head_timer()  # waiting for (the rest of) a request head
        else:
            self._disarm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_timer()
        super().connection_lost(exc)

    # -- refusals with the error body --------------------------------------------------------
    def send_400_response(self, msg: str) -> None:
        metrics.CONNECTIONS_REFUSED.labels("bad_http").inc()
        self._refuse(400, f"invalid HTTP request: {msg}")

    def _refuse(self, status: int, message: str) -> None:
        """Answer ``status`` with the error body outside h11 (its state may be broken) and close."""
        self._disarm_head_timer()
        body = _json(status, message)
        head = (
            f"HTTP/1.1 {status} {_phrase(status)}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
        )
        metrics.REQUESTS.labels("other", str(status)).inc()
        if not self.transport.is_closing():
            self.transport.write(head.encode() + body)
            self.transport.close()


class _JSONRejections(ServerProtocol):
    """websockets' server protocol whose handshake refusals carry the error body."""

    def reject(self, status: http.HTTPStatus | int, text: str) -> Response:
        code = int(status)
        body = _json(code, text.strip() or _phrase(code))
        headers = Headers(
            [
                ("Date", email.utils.formatdate(usegmt=True)),
                ("Connection", "close"),
                ("Content-Length", str(len(body))),
                ("Content-Type", "application/json"),
            ]
        )
        return Response(code, _phrase(code), headers, body)


class GuardedWSProtocol(WebSocketsSansIOProtocol):
    """Uvicorn's WebSocket protocol with JSON handshake refusals, app-sent refusals (401, 404)
    that are not logged as errors, and a quiet, answered refusal of text frames that are not
    UTF-8 (an error frame, then close 1007)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        plain = self.conn
        self.conn = _JSONRejections(
            extensions=plain.available_extensions,
            max_size=(plain.max_message_size, plain.max_fragment_size),
            logger=plain.logger,
        )

    def handle_parser_exception(self) -> None:
        """A message over the size limit (close 1009) or a broken frame (1002) fails the
        connection in the protocol layer; the client gets an error frame before that close,
        as for every other refusal."""
        exc = self.conn.parser_exc
        refusal = None
        if isinstance(exc, PayloadTooBig):
            refusal = _json(413, f"a message over the {self.config.ws_max_size}-byte limit")
        elif isinstance(exc, ProtocolError):
            refusal = _json(400, f"WebSocket protocol error: {exc}")
        if refusal is not None and self.handshake_complete and not self.transport.is_closing():
            # The protocol is closing, so it sends no more data frames: write this one ahead
            # of its close frame (unmasked and uncompressed, valid with any extension).
            self.transport.write(Frame(Opcode.TEXT, refusal).serialize(mask=False))
            metrics.REQUESTS.labels("/v1/ws", str(json.loads(refusal)["error"]["code"])).inc()
        super().handle_parser_exception()

    async def send(self, message: ASGISendEvent) -> None:
        await super().send(message)
        if message["type"] == "websocket.http.response.body" and not message.get("more_body"):
            # A refused handshake (401, 404) is a finished one: without this, Uvicorn logs
            # "ASGI callable returned without completing handshake" as an error.
            self.handshake_complete = True

    def send_receive_event_to_app(self) -> None:
        if self.curr_msg_data_type == "text" and not self.close_sent:
            try:
                b"".join(self.frames).decode()
            except UnicodeDecodeError:
                self.frames = []
                if self.conn.state is not State.OPEN:
                    return  # closing already (the client's close came in the same read)
                metrics.REQUESTS.labels("/v1/ws", "400").inc()
                self.conn.send_text(_json(400, "a text frame that is not valid UTF-8"))
                self.conn.send_close(1007, "invalid UTF-8")
                self.handle_parser_exception()
                return
        super().send_receive_event_to_app()
