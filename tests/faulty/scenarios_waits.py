"""Streams that wait or are refused: stalled, timeout, HTTP errors, connect errors."""

from __future__ import annotations

import asyncio

from tests.faulty.catalogue import (
    HandshakeFn,
    RunFn,
    half,
    register,
    send_tokens,
)
from tests.faulty.constants import (
    ENDLESS_INTERVAL_S,
    ENDLESS_S,
    HOLD_MAX_S,
    STALL_S,
)
from tests.faulty.responses import Out, Request, WsOut, token_text
from tests.faulty.wire import ERROR_TYPES, Conn, error_body, send_json, ws_close_code

__all__: list[str] = []

# stalled and timeout ---------------------------------------------------------------------------


async def _hold_handshake(conn: Conn) -> None:
    await conn.hold(HOLD_MAX_S)


@register(
    "no_headers",
    ("stalled", "stalled"),
    summary="The request is read; nothing is ever sent.",
    sse=f"Reads the request, sends nothing; FIN when the client leaves or after {HOLD_MAX_S} s.",
    ws=(
        "By path: reads the handshake request and never answers it. By model: after the "
        f"request frame, sends nothing. Either way until the client leaves (or {HOLD_MAX_S} s)."
    ),
    handshake=_hold_handshake,
)
async def _no_headers(out: Out, req: Request) -> None:
    await out.hold()


@register(
    "stall_after_headers",
    ("stalled", "stalled"),
    summary=f"200 headers, then {STALL_S} s of silence, then FIN.",
    sse=f"200 headers, no event for {STALL_S} s, then FIN (chunked body unfinished).",
    ws=f"After the request frame, nothing for {STALL_S} s, then FIN (no close frame).",
)
async def _stall_after_headers(out: Out, req: Request) -> None:
    await out.begin()
    await out.sleep(STALL_S)
    await out.drop()


@register(
    "stall_midway",
    ("stalled", "stalled"),
    summary=f"Some tokens, then {STALL_S} s of silence, then FIN.",
    sse=f"200 headers, k content chunks, nothing for {STALL_S} s, then FIN mid-body.",
    ws=f"k chunk frames, nothing for {STALL_S} s, then FIN (no close frame).",
)
async def _stall_midway(out: Out, req: Request) -> None:
    await out.begin()
    await send_tokens(out, 0, half(req.max_tokens))
    await out.sleep(STALL_S)
    await out.drop()


@register(
    "endless",
    ("timeout", "timeout"),
    summary=f"A stream that never ends: a chunk every {ENDLESS_INTERVAL_S} s for {ENDLESS_S} s.",
    sse=(
        f"200 headers; one chunk every {ENDLESS_INTERVAL_S} s (the first at once): content chunks 0..n-2 (never more than n - 1 tokens, so "
        "no chunk-count rule can fire; for n >= 8 they outlast the request timeout, each gap "
        "under the stall timeout), then chunks with no token (chat: delta {}; completions: "
        f"choices []) forever; after {ENDLESS_S} s, FIN mid-body."
    ),
    ws="The same frames on the same schedule, then FIN with no close frame.",
    note="Also the scenario for cancelled: stop the run with a drain shorter than the stream.",
)
async def _endless(out: Out, req: Request) -> None:
    n = req.max_tokens
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    await out.begin()
    tick = 1
    while (tick - 1) * ENDLESS_INTERVAL_S <= ENDLESS_S:
        await out.sleep_until(t0 + (tick - 1) * ENDLESS_INTERVAL_S)
        i = tick - 1
        text = token_text(i) if i < n - 1 else ""
        if text:
            await out.chunk(out.chunks.piece(text))
        elif req.chat:
            await out.chunk(out.chunks.piece("", delta={}))
        else:
            await out.chunk({**out.chunks.piece(""), "choices": []})
        tick += 1
    await out.drop()


# HTTP / handshake errors -------------------------------------------------------------------------


def http_error_run(status: int, message: str) -> RunFn:
    async def run(out: Out, req: Request) -> None:
        await out.error_before(status, message)

    return run


def refuse_handshake(status: int, message: str) -> HandshakeFn:
    async def handshake(conn: Conn) -> None:
        await send_json(conn, status, error_body(status, message), keep_alive=False)
        await conn.fin()

    return handshake


def _register_http_error(name: str, status: int, message: str, ws: str) -> None:
    outcome = "http_4xx" if status < 500 else "http_5xx"
    retry = " and Retry-After: 1" if status in (429, 503) else ""
    register(
        name,
        (outcome, outcome),
        summary=f"HTTP {status} before the stream.",
        sse=(
            f"{status} application/json{retry}: "
            f"{{'error': {{'message', 'type': '{ERROR_TYPES[status]}', 'code': {status}}}}}; "
            "keep-alive."
        ),
        ws=ws,
    )(http_error_run(status, message))


for _status, _message in (
    (400, "faulty: bad request"),
    (404, "faulty: no such thing"),
    (429, "faulty: too many requests"),
    (500, "faulty: internal server error"),
    (503, "faulty: overloaded, try again later"),
):
    _register_http_error(
        f"http_{_status}",
        _status,
        _message,
        f"An error frame (code {_status}) before any content, then close {ws_close_code(_status)}.",
    )

register(
    "ws_refuse_403",
    ("http_4xx", "http_4xx"),
    summary="The WebSocket handshake is refused with 403.",
    sse="403 application/json error (code 403); keep-alive.",
    ws=(
        "By path: the handshake is answered 403 with a JSON error body, then FIN. By model: "
        "an error frame (code 403), then close 1008."
    ),
    handshake=refuse_handshake(403, "faulty: forbidden"),
)(http_error_run(403, "faulty: forbidden"))

register(
    "ws_refuse_500",
    ("http_5xx", "http_5xx"),
    summary="The WebSocket handshake is refused with 500.",
    sse="500 application/json error (code 500); keep-alive.",
    ws=(
        "By path: the handshake is answered 500 with a JSON error body, then FIN. By model: "
        "an error frame (code 500), then close 1011."
    ),
    handshake=refuse_handshake(500, "faulty: handshake failed"),
)(http_error_run(500, "faulty: handshake failed"))


def _ws_close_only(code: int, status: int, message: str) -> RunFn:
    async def run(out: Out, req: Request) -> None:
        if isinstance(out, WsOut):
            await out.close(code, message)
        else:
            await out.error_before(status, message)

    return run


register(
    "ws_close_1013",
    ("http_4xx", "http_4xx"),
    summary="WS close 1013 (try again later) before any content, no error frame.",
    sse="429 application/json error (code 429) with Retry-After: 1; keep-alive.",
    ws="After the request frame, close 1013 at once (no error frame, no content).",
)(_ws_close_only(1013, 429, "faulty: try again later"))

register(
    "ws_close_1009",
    ("http_4xx", "http_4xx"),
    summary="WS close 1009 (message too big) before any content, no error frame.",
    sse="413 application/json error (code 413); keep-alive.",
    ws="After the request frame, close 1009 at once (no error frame, no content).",
)(_ws_close_only(1009, 413, "faulty: message too big"))


# connect errors ------------------------------------------------------------------------------------


async def _fin_handshake(conn: Conn) -> None:
    await conn.fin()


async def _rst_handshake(conn: Conn) -> None:
    await conn.rst()


@register(
    "close_immediately",
    ("connect_error", "connect_error"),
    summary="The server hangs up (FIN) without sending a byte.",
    sse="Reads the request, then FIN without a single byte of response.",
    ws=(
        "By path: reads the handshake request, then FIN without a byte. By model: after the "
        "request frame, FIN with no close frame (unsettled: see UNSETTLED)."
    ),
    handshake=_fin_handshake,
)
async def _close_immediately(out: Out, req: Request) -> None:
    await out.conn.fin()


@register(
    "reset_immediately",
    ("connect_error", "connect_error"),
    summary="The server resets (RST) without sending a byte.",
    sse="Reads the request, then RST (SO_LINGER 0) without a byte of response.",
    ws=(
        "By path: reads the handshake request, then RST. By model: after the request frame, "
        "RST (unsettled: see UNSETTLED)."
    ),
    handshake=_rst_handshake,
)
async def _reset_immediately(out: Out, req: Request) -> None:
    await out.conn.rst()


#: Scenarios that, on WebSocket, act on the handshake when selected by the path prefix.
#: :data:`EXPECTED` assumes the path prefix for these on ``ws``.
