"""A deliberately faulty streaming LLM server: every stream outcome, and hostile bytes, on
purpose (the outcomes are described in docs/outcomes.md).

This is a raw :func:`asyncio.start_server` TCP server (no framework), so every byte on the
wire is under control: HTTP/1.1 chunked bodies that never finish, HTTP chunks cut in half,
resets (``SO_LINGER`` 0), responses that never start, hand-rolled RFC 6455 WebSocket frames
with arbitrary close codes, binary frames, fragmented messages and frames that never end, and
hostile cases meant to freeze, crash or bloat a client (a 5,000-digit status, a negative chunk
size, 30 MiB after [DONE], JSON nested 100,000 deep, a byte dripped every 100 ms...).

The package is split by responsibility:

* :mod:`tests.faulty.wire` — TCP, HTTP/1.1 and WebSocket framing helpers;
* :mod:`tests.faulty.responses` — one request's view (:class:`Request`, chunks) and where it
  writes its response (SSE or WebSocket, one interface);
* :mod:`tests.faulty.catalogue` and ``scenarios_ok``, ``scenarios_broken``,
  ``scenarios_waits``, ``scenarios_hostile`` — the scenarios, by family;
  :mod:`tests.faulty.scenarios` loads them and holds :data:`EXPECTED`;
* this module — routing and the server itself.

Routes (the OpenAI-compatible protocol the suite speaks): ``POST /v1/chat/completions``,
``POST /v1/completions``, ``POST /v1/stream``, ``GET /v1/models``, ``GET /health`` and
WebSocket ``GET /v1/ws`` (one JSON text frame per request; chunk frames, then a ``[DONE]``
text frame; the connection may carry the next request). ``POST /v1/responses`` and
``/v1/messages`` stream the event dialects (:mod:`tests.faulty.dialects`); ``/v1/ws`` plays a
gateway of them too, one event per text frame: a Responses request (``{"type":
"response.create", ...}``, or a body with ``input``), or a Messages body on a connection whose
handshake carried ``anthropic-version``.

Selecting a scenario:

* by the request body's ``model`` field (so any client's ``--model NAME`` selects it; on
  WebSocket, the ``model`` of each request frame). No ``model`` means ``ok``; an unknown one
  gets a 404 (``model_not_found``; on WebSocket an error frame and close 1008).
* by a path prefix, ``/s/<scenario>/v1/...`` (also ``/s/<scenario>/v1/ws``). The prefix
  wins over ``model``. WebSocket scenarios that act on the *handshake* can only do so when
  selected by the path, since the handshake comes before any request frame; see
  :data:`WS_HANDSHAKE_SCENARIOS`. :data:`EXPECTED` assumes the path for those.
* by a mix, ``/s/<mix>/...`` with a name of :data:`MIXES`: each HTTP request (each WebSocket
  connection) gets the next scenario of the mix in turn, e.g. ``/s/mix_hostile`` cycles
  through every hostile case and ``ok``.

The request's ``max_tokens`` (or ``max_completion_tokens``; default 16) is the token count
``n``. Content chunk ``i`` (0-based) carries exactly one token, the text ``" t{i}"``. Usage
(``prompt_tokens`` = words in the prompt) is sent only when ``stream_options.include_usage``
is true, except where a scenario says otherwise. ``ignore_eos`` and ``stream`` are read but
change nothing: the server always streams. Where a scenario says ``k``, ``k = max(1, n // 2)``.

:data:`EXPECTED` gives the outcome a correct client reports, assuming it asks for
``ignore_eos: true`` and ``stream_options.include_usage: true``, expects ``[DONE]``, and runs
with :data:`STALL_TIMEOUT_S` and :data:`REQUEST_TIMEOUT_S`; every delay here is comfortably
on one side of those. ``cancelled`` is the client's own doing: use ``endless`` with a short
drain. Outcomes the protocol does not settle are left out of :data:`EXPECTED` and explained in
:data:`UNSETTLED`.

Run: ``python -m tests.faulty.server --port N`` prints ``READY <port>`` once listening on
127.0.0.1 (``--port 0`` picks a free port). Tests use
:func:`tests.faulty.process.start_faulty_server`.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import hashlib
import itertools
import json
import os
import signal
import socket
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

from tests.faulty.catalogue import Scenario
from tests.faulty.constants import (
    DEFAULT_MAX_TOKENS,
    ENDLESS_INTERVAL_S,
    ENDLESS_LINE_MAX_BYTES,
    ENDLESS_S,
    GIANT_EVENT_BYTES,
    HOLD_MAX_S,
    OUTCOMES,
    REQUEST_TIMEOUT_S,
    SHORT_PAUSE_S,
    STALL_S,
    STALL_TIMEOUT_S,
    TIMED_ITL_S,
    TIMED_TTFT_S,
)
from tests.faulty.dialects import DIALECT_ENDPOINTS, DIALECT_SCENARIOS, run_dialect
from tests.faulty.responses import Request, SseOut, WsOut, token_text
from tests.faulty.scenarios import EXPECTED, MIXES, SCENARIOS, UNSETTLED, WS_HANDSHAKE_SCENARIOS
from tests.faulty.wire import (
    WS_GUID,
    Conn,
    HttpRequest,
    WsConn,
    dumps,
    error_body,
    read_request,
    response_head,
    send_json,
)

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "ENDLESS_INTERVAL_S",
    "ENDLESS_LINE_MAX_BYTES",
    "ENDLESS_S",
    "EXPECTED",
    "GIANT_EVENT_BYTES",
    "HOLD_MAX_S",
    "MIXES",
    "OUTCOMES",
    "REQUEST_TIMEOUT_S",
    "SCENARIOS",
    "SHORT_PAUSE_S",
    "STALL_S",
    "STALL_TIMEOUT_S",
    "TIMED_ITL_S",
    "TIMED_TTFT_S",
    "UNSETTLED",
    "WS_HANDSHAKE_SCENARIOS",
    "Scenario",
    "main",
    "serve",
    "token_text",
]

_ENDPOINTS = {
    "/v1/chat/completions": "chat",
    "/v1/completions": "completions",
    "/v1/stream": "stream",
}


def _models() -> dict[str, Any]:
    created = int(time.time())
    return {
        "object": "list",
        "data": [
            {"id": name, "object": "model", "created": created, "owned_by": "streamslo-faulty"}
            for name in SCENARIOS
        ],
    }


def _split_scenario(path: str) -> tuple[str | None, str]:
    """``/s/<name>/rest`` -> (name, ``/rest``); anything else -> (None, path). A mix's name
    becomes its next scenario."""
    if path.startswith("/s/"):
        name, _, rest = path[3:].partition("/")
        cycle = _MIX_CYCLES.get(name)
        return (next(cycle) if cycle is not None else name), "/" + rest
    return None, path


#: Scenarios (selected by the path) whose answer to a body that is not JSON has no body.
BARE_ERRORS = frozenset({"bare_errors"})

_MIX_CYCLES: dict[str, Iterator[str]] = {
    name: itertools.cycle(names) for name, names in MIXES.items()
}


async def _handle_http(conn: Conn, http: HttpRequest) -> bool:
    """Answer one HTTP request; True when the connection can carry another."""
    keep = http.keep_alive
    forced, path = _split_scenario(http.target.split("?", 1)[0])
    if forced is not None and forced not in SCENARIOS and forced not in DIALECT_SCENARIOS:
        await send_json(conn, 404, error_body(404, f"no scenario {forced!r}"), keep_alive=keep)
        return keep
    if path == "/v1/ws":
        await _handle_ws(conn, http, forced)
        return False
    if http.method == "GET" and path in ("/v1/models", "/health"):
        body = _models() if path == "/v1/models" else {"status": "ok"}
        await send_json(conn, 200, body, keep_alive=keep)
        return keep
    if path in DIALECT_ENDPOINTS and http.method == "POST":
        return await _handle_dialect(conn, http, DIALECT_ENDPOINTS[path], forced, keep)
    endpoint = _ENDPOINTS.get(path)
    if endpoint is None or http.method != "POST":
        status = 404 if endpoint is None else 405
        await send_json(conn, status, error_body(status, f"no route {path}"), keep_alive=keep)
        return keep
    try:
        body = json.loads(http.body or b"{}")
        if not isinstance(body, dict):
            raise ValueError("not an object")
    except ValueError:
        if forced in BARE_ERRORS:
            await conn.send(response_head(400, [("content-length", "0")]))
            return keep
        await send_json(conn, 400, error_body(400, "body is not a JSON object"), keep_alive=keep)
        return keep
    name = forced or body.get("model") or "ok"
    if name not in SCENARIOS:
        await send_json(conn, 404, error_body(404, f"model {name!r} not found"), keep_alive=keep)
        return keep
    out = SseOut(conn, Request(endpoint, body, str(name)), keep_alive=keep)
    await SCENARIOS[name].run(out, out.req)
    if conn.closed:
        return False
    if not out.ended:  # a scenario that forgot to end: end it cleanly
        await out.finish()
    return keep and not conn.closed


async def _handle_dialect(
    conn: Conn, http: HttpRequest, dialect: str, forced: str | None, keep: bool
) -> bool:
    """``POST /v1/responses`` or ``/v1/messages``: the scenario of :mod:`tests.faulty.dialects`."""
    try:
        body = json.loads(http.body or b"{}")
        if not isinstance(body, dict):
            raise ValueError("not an object")
    except ValueError:
        await send_json(conn, 400, error_body(400, "body is not a JSON object"), keep_alive=keep)
        return keep
    name = str(forced or body.get("model") or "ok")
    out = SseOut(conn, Request("chat", body, name), keep_alive=keep)
    if not await run_dialect(out, dialect, body, name):
        await send_json(conn, 404, error_body(404, f"model {name!r} not found"), keep_alive=keep)
        return keep
    if conn.closed:
        return False
    if not out.ended:
        await out.finish()
    return keep and not conn.closed


def _ws_dialect(body: dict[str, Any], headers: dict[str, str]) -> str | None:
    """The event dialect a WebSocket request frame asks for, or None (OpenAI chunks).

    A gateway's frame for the Responses API is OpenAI's WebSocket mode,
    ``{"type": "response.create", ...}`` (the request's fields flat, or under ``response``),
    or a bare Responses body (it has ``input``); an Anthropic Messages one is a Messages body
    on a connection whose handshake carried ``anthropic-version``."""
    if body.get("type") == "response.create" or "input" in body:
        return "openai-responses"
    if "anthropic-version" in headers:
        return "anthropic-messages"
    return None


async def _handle_ws(conn: Conn, http: HttpRequest, forced: str | None) -> None:
    scenario = SCENARIOS.get(forced) if forced is not None else None
    if scenario is not None and scenario.handshake is not None:
        await scenario.handshake(conn)
        return
    key = http.headers.get("sec-websocket-key")
    if (
        http.method != "GET"
        or "websocket" not in http.headers.get("upgrade", "").lower()
        or not key
    ):
        await send_json(conn, 426, error_body(426, "WebSocket upgrade required"), keep_alive=False)
        await conn.fin()
        return
    accept = base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()
    await conn.send(
        response_head(
            101,
            [("upgrade", "websocket"), ("connection", "Upgrade"), ("sec-websocket-accept", accept)],
        )
    )
    ws = WsConn(conn)
    ws.start()
    try:
        while not conn.closed:
            message = await ws.next_message()
            if message is None:
                break
            opcode, payload = message
            if opcode != 0x1:
                await ws.close(1003, "send text frames")
                break
            try:
                body = json.loads(payload)
                if not isinstance(body, dict):
                    raise ValueError("not an object")
            except ValueError:
                await ws.send_frame(
                    0x1, dumps(error_body(400, "frame is not a JSON object")).encode()
                )
                await ws.close(1008, "bad request")
                break
            dialect = _ws_dialect(body, http.headers)
            if dialect is not None:
                inner = body.get("response")
                if body.get("type") == "response.create" and isinstance(inner, dict):
                    body = inner
                name = str(forced or body.get("model") or "ok")
                if name not in DIALECT_SCENARIOS:
                    await ws.send_frame(
                        0x1, dumps(error_body(404, f"no scenario {name!r}")).encode()
                    )
                    await ws.close(1008, "model not found")
                    break
                await run_dialect(WsOut(ws, Request("chat", body, name)), dialect, body, name)
                continue
            name = forced or body.get("model") or "ok"
            if name not in SCENARIOS:
                message_text = f"model {name!r} not found"
                await ws.send_frame(0x1, dumps(error_body(404, message_text)).encode())
                await ws.close(1008, "model not found")
                break
            endpoint = "chat" if "messages" in body else "completions"
            out = WsOut(ws, Request(endpoint, body, str(name)))
            await SCENARIOS[name].run(out, out.req)
    finally:
        await ws.stop()
        await conn.fin()


class _Server:
    def __init__(self) -> None:
        self.conns: set[Conn] = set()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = Conn(reader, writer)
        self.conns.add(conn)
        try:
            while not conn.closed:
                http = await read_request(reader)
                if http is None or not await _handle_http(conn, http):
                    break
            await conn.fin()
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            pass  # the client left, or sent garbage: nothing to report
        except Exception:
            traceback.print_exc(file=sys.stderr)
        finally:
            self.conns.discard(conn)
            if not conn.closed:
                conn.closed = True
                writer.transport.abort()


async def serve(
    port: int = 0, *, exit_with_parent: bool = False, ready: Callable[[int], None] | None = None
) -> None:
    """Serve on 127.0.0.1:``port`` (0: a free one) until SIGTERM/SIGINT."""
    state = _Server()
    server = await asyncio.start_server(state.handle, "127.0.0.1", port, limit=1 << 16)
    bound = server.sockets[0].getsockname()[1]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    if ready is not None:
        ready(bound)
    parent = os.getppid()
    async with server:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)
            if exit_with_parent and os.getppid() != parent:
                break
        server.close()
        for conn in list(state.conns):
            conn.closed = True
            conn.writer.transport.abort()


def main(argv: list[str] | None = None) -> int:
    """``python -m tests.faulty.server --port N``: prints ``READY <port>`` when listening."""
    parser = argparse.ArgumentParser(prog="python -m tests.faulty.server", description=__doc__)
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: any free)")
    parser.add_argument(
        "--exit-with-parent", action="store_true", help="exit when the parent process dies"
    )
    parser.add_argument("--list", action="store_true", help="print the catalogue and exit")
    args = parser.parse_args(argv)
    if args.list:
        for name, sc in SCENARIOS.items():
            ws = EXPECTED.get((name, "ws"), "(unsettled)")
            print(f"{name:24} sse={sc.expected_sse:18} ws={ws:18} {sc.summary}")
        return 0

    def ready(port: int) -> None:
        print(f"READY {port}", flush=True)

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.port, exit_with_parent=args.exit_with_parent, ready=ready))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
