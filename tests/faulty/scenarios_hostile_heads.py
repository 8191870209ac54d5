"""Hostile servers, in the HTTP head: bytes meant to freeze, crash or bloat a client
(docs/outcomes.md, "Hostile input"). Each must end in one outcome, in bounded time and memory.

Faults in an HTTP head (a giant status, a negative Content-Length, 1,000 interim heads...) act
on the SSE response and, selected by path on WebSocket, on the answer to the opening handshake
(which is an HTTP response too); selected by ``model`` on WebSocket they send an ok stream (or,
for error bodies, an error frame). The body-level faults are in :mod:`tests.faulty.scenarios_hostile`.
"""

from __future__ import annotations

import asyncio

from tests.faulty.catalogue import (
    HandshakeFn,
    RunFn,
    full_stream,
    register,
)
from tests.faulty.constants import (
    DRIP_INTERVAL_S,
    FLOOD_BLOCK,
    FLOOD_BYTES,
    GIANT_STATUS_DIGITS,
    HOLD_MAX_S,
    INTERIM_HEADS,
)
from tests.faulty.responses import Out, Request, SseOut
from tests.faulty.wire import Conn, dumps, error_body

__all__ = ["HEAD_FAULTS", "HOSTILE_HEADS", "drip", "head_bytes"]

_SSE_HEADERS = b"content-type: text/event-stream\r\ncache-control: no-cache\r\n"
_WS_HEADERS = b"upgrade: websocket\r\nconnection: Upgrade\r\nsec-websocket-accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"

#: Each head-level fault: the head bytes for an SSE response (``sse``) and for a handshake
#: answer (``ws``). A head is sent, then the connection is held until the client leaves.
HEAD_FAULTS: dict[str, tuple[bytes, bytes]] = {
    "giant_status": (
        b"HTTP/1.1 " + b"2" * GIANT_STATUS_DIGITS + b" OK\r\n" + _SSE_HEADERS + b"\r\n",
        b"HTTP/1.1 "
        + b"1" * GIANT_STATUS_DIGITS
        + b" Switching Protocols\r\n"
        + _WS_HEADERS
        + b"\r\n",
    ),
    "garbage_head": (
        b"\x16\x03\x01\x00\x02\x02\x28\xff\xfegarbage\x00\r\n\r\n",
        b"\x16\x03\x01\x00\x02\x02\x28\xff\xfegarbage\x00\r\n\r\n",
    ),
    "content_length_negative": (
        b"HTTP/1.1 200 OK\r\n" + _SSE_HEADERS + b"content-length: -5\r\n\r\n",
        b"HTTP/1.1 101 Switching Protocols\r\n" + _WS_HEADERS + b"content-length: -5\r\n\r\n",
    ),
    "content_length_conflict": (
        b"HTTP/1.1 200 OK\r\n" + _SSE_HEADERS + b"content-length: 50\r\ncontent-length: 70\r\n\r\n",
        b"HTTP/1.1 101 Switching Protocols\r\n"
        + _WS_HEADERS
        + b"content-length: 0\r\ncontent-length: 9\r\n\r\n",
    ),
    "te_and_cl": (
        b"HTTP/1.1 200 OK\r\n"
        + _SSE_HEADERS
        + b"transfer-encoding: chunked\r\ncontent-length: 10\r\n\r\n",
        b"HTTP/1.1 101 Switching Protocols\r\n"
        + _WS_HEADERS
        + b"transfer-encoding: chunked\r\ncontent-length: 0\r\n\r\n",
    ),
    "header_obs_fold": (
        b"HTTP/1.1 200 OK\r\n  x-folded: a\r\n" + _SSE_HEADERS + b"\r\n",
        b"HTTP/1.1 101 Switching Protocols\r\n\tx-folded: a\r\n" + _WS_HEADERS + b"\r\n",
    ),
    "header_nul": (
        b"HTTP/1.1 200 OK\r\n" + _SSE_HEADERS + b"x-nul: a\x00b\r\n\r\n",
        b"HTTP/1.1 101 Switching Protocols\r\n" + _WS_HEADERS + b"x-nul: a\x00b\r\n\r\n",
    ),
    "interim_flood": (
        b"HTTP/1.1 100 Continue\r\n\r\n" * INTERIM_HEADS
        + b"HTTP/1.1 200 OK\r\n"
        + _SSE_HEADERS
        + b"\r\n",
        b"HTTP/1.1 100 Continue\r\n\r\n" * INTERIM_HEADS
        + b"HTTP/1.1 101 Switching Protocols\r\n"
        + _WS_HEADERS
        + b"\r\n",
    ),
    "ws_bad_accept": (
        b"HTTP/1.1 101 Switching Protocols\r\n" + _WS_HEADERS + b"\r\n",
        b"HTTP/1.1 101 Switching Protocols\r\n" + _WS_HEADERS + b"\r\n",
    ),
}


def head_bytes(name: str, proto: str) -> bytes:
    """The head a head-level fault sends on ``proto`` (``sse`` or ``ws``)."""
    sse, ws = HEAD_FAULTS[name]
    return sse if proto == "sse" else ws


def _send_head(name: str) -> RunFn:
    async def run(out: Out, req: Request) -> None:
        if isinstance(out, SseOut):
            out.ended = True
            await out.conn.send(head_bytes(name, "sse"))
            await out.conn.hold(HOLD_MAX_S)
        else:
            await full_stream(out, req)

    return run


def _answer_handshake(name: str) -> HandshakeFn:
    async def handshake(conn: Conn) -> None:
        await conn.send(head_bytes(name, "ws"))
        await conn.hold(HOLD_MAX_S)

    return handshake


_HEAD_SUMMARIES = {
    "giant_status": ("malformed", f"A status code of {GIANT_STATUS_DIGITS} digits."),
    "garbage_head": (
        "malformed",
        "Binary garbage (a TLS record, NUL, 0xFF) instead of a response.",
    ),
    "content_length_negative": ("malformed", "Content-Length: -5."),
    "content_length_conflict": ("malformed", "Two different Content-Length headers."),
    "te_and_cl": ("malformed", "Transfer-Encoding: chunked and Content-Length together."),
    "header_obs_fold": (
        "malformed",
        "A folded line right after the status line: obsolete folding with no header to continue.",
    ),
    "header_nul": ("malformed", "A NUL byte in a header value."),
    "interim_flood": ("malformed", f"{INTERIM_HEADS} interim '100 Continue' heads in one write."),
    "ws_bad_accept": ("malformed", "101 with a Sec-WebSocket-Accept that does not match the key."),
}

for _name, (_outcome, _summary) in _HEAD_SUMMARIES.items():
    register(
        _name,
        (_outcome, _outcome),
        summary=_summary,
        sse=f"This head ({_summary}), then nothing until the client leaves (at most {HOLD_MAX_S} s).",
        ws=(
            "By path: the same fault in the answer to the opening handshake (a 101 head where one "
            "applies), then nothing. By model: an ok stream."
        ),
        handshake=_answer_handshake(_name),
    )(_send_head(_name))


async def drip(conn: Conn, data: bytes) -> None:
    """One byte every DRIP_INTERVAL_S until done, the client leaves, or HOLD_MAX_S."""
    loop = asyncio.get_running_loop()
    end = loop.time() + HOLD_MAX_S
    for i in range(len(data)):
        if loop.time() > end:
            break
        await conn.send(data[i : i + 1])
        await asyncio.sleep(DRIP_INTERVAL_S)
    await conn.fin()


async def _drip_head_handshake(conn: Conn) -> None:
    await drip(
        conn,
        b"HTTP/1.1 101 Switching Protocols\r\n"
        + _WS_HEADERS
        + b"x-pad: "
        + b"p" * 400
        + b"\r\n\r\n",
    )


@register(
    "head_drip",
    ("stalled", "stalled"),
    summary=f"The response head dripped one byte every {DRIP_INTERVAL_S} s.",
    sse=f"A 200 event-stream head (with a 400-byte pad header), one byte every {DRIP_INTERVAL_S} s: it never completes within the stall timeout.",
    ws="By path: the 101 answer dripped the same way. By model: an ok stream.",
    handshake=_drip_head_handshake,
)
async def _head_drip(out: Out, req: Request) -> None:
    if isinstance(out, SseOut):
        out.ended = True
        await drip(
            out.conn, b"HTTP/1.1 200 OK\r\n" + _SSE_HEADERS + b"x-pad: " + b"p" * 400 + b"\r\n\r\n"
        )
    else:
        await full_stream(out, req)


async def _head_flood_conn(conn: Conn, first: bytes) -> None:
    await conn.send(first)
    line = b"x-flood: " + b"f" * 100 + b"\r\n"
    for _ in range(FLOOD_BYTES // len(line) // 64):
        await conn.send(line * 64)
    await conn.fin()


async def _head_flood_handshake(conn: Conn) -> None:
    await _head_flood_conn(conn, b"HTTP/1.1 101 Switching Protocols\r\n")


@register(
    "head_flood",
    ("malformed", "malformed"),
    summary="Header lines at full speed, never the blank line that ends the head.",
    sse=f"'HTTP/1.1 200 OK' then 110-byte header lines as fast as the client reads, up to {FLOOD_BYTES >> 20} MiB, then FIN.",
    ws="By path: the same after '101 Switching Protocols'. By model: an ok stream.",
    handshake=_head_flood_handshake,
)
async def _head_flood(out: Out, req: Request) -> None:
    if isinstance(out, SseOut):
        out.ended = True
        await _head_flood_conn(out.conn, b"HTTP/1.1 200 OK\r\n")
    else:
        await full_stream(out, req)


def _error_flood_bytes(status: int) -> tuple[bytes, bytes]:
    body_head = b'{"error": {"message": "faulty: a flood", "code": %d, "pad": "' % status
    head = b"HTTP/1.1 %d Error\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % (
        status,
        FLOOD_BYTES,
    )
    return head, body_head


async def _error_flood_conn(conn: Conn) -> None:
    head, body_head = _error_flood_bytes(500)
    await conn.send(head + body_head)
    sent = len(body_head)
    block = b"x" * FLOOD_BLOCK
    while sent + len(block) <= FLOOD_BYTES:
        await conn.send(block)
        sent += len(block)
    await conn.fin()


@register(
    "error_body_flood",
    ("http_5xx", "http_5xx"),
    summary=f"A 500 whose body is {FLOOD_BYTES >> 20} MiB, sent at full speed.",
    sse=f"500 application/json with Content-Length {FLOOD_BYTES}: an error object whose pad never ends, as fast as the client reads.",
    ws="By path: the handshake refused the same way. By model: an error frame (code 500), then close 1011.",
    handshake=_error_flood_conn,
)
async def _error_body_flood(out: Out, req: Request) -> None:
    if isinstance(out, SseOut):
        out.ended = True
        await _error_flood_conn(out.conn)
    else:
        await out.error_before(500, "faulty: a flood")


async def _error_drip_conn(conn: Conn) -> None:
    body = dumps(error_body(503, "faulty: overloaded, dripping")).encode()
    head = (
        b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
        % len(body)
    )
    await conn.send(head)
    await drip(conn, body)


@register(
    "error_body_drip",
    ("http_5xx", "http_5xx"),
    summary=f"A 503 whose JSON body comes one byte every {DRIP_INTERVAL_S} s.",
    sse="503 application/json head at once, then the body dripped; the client records the status without waiting for it.",
    ws="By path: the handshake refused the same way. By model: an error frame (code 503), then close 1011.",
    handshake=_error_drip_conn,
)
async def _error_body_drip(out: Out, req: Request) -> None:
    if isinstance(out, SseOut):
        out.ended = True
        await _error_drip_conn(out.conn)
    else:
        await out.error_before(503, "faulty: overloaded")


#: The head-level hostile scenarios, in catalogue order.
HOSTILE_HEADS = (*HEAD_FAULTS, "head_drip", "head_flood", "error_body_flood", "error_body_drip")
