"""Hostile servers, in the body: bytes meant to freeze, crash or bloat a client
(docs/outcomes.md, "Hostile input"). Each must end in one outcome, in bounded time and memory.

Each SSE fault has a WebSocket twin in the frames (a negative chunk size and a frame length
with its top bit set; an endless multi-line event and an endless fragmented message; a flood
of comment lines and a flood of pings...). The head-level faults are in
:mod:`tests.faulty.scenarios_hostile_heads`.
"""

from __future__ import annotations

import asyncio
import struct

from tests.faulty.catalogue import (
    AS_OK_SSE,
    full_stream,
    full_until_done,
    half,
    register,
    send_tokens,
)
from tests.faulty.constants import (
    DEEP_JSON_LEVELS,
    DRIP_INTERVAL_S,
    FLOOD_BLOCK,
    FLOOD_BYTES,
    GIANT_STATUS_DIGITS,
    HOLD_MAX_S,
)
from tests.faulty.responses import Out, Request, SseOut, WsOut, token_text
from tests.faulty.scenarios_hostile_heads import HOSTILE_HEADS
from tests.faulty.wire import WsConn, dumps

__all__ = ["HOSTILE"]


def _ws_raw_header(first: int, length_bytes: bytes) -> bytes:
    return bytes([first]) + length_bytes


@register(
    "negative_chunk",
    ("malformed", "malformed"),
    summary="A negative chunk size (SSE) / a frame length with its top bit set (WS).",
    sse="200 chunked, k content chunks, then the chunk-size line '-6' and 6 bytes, then nothing until the client leaves.",
    ws="k chunk frames, then a text frame header with a 64-bit length of 2^63 + 6 and 6 bytes, then nothing.",
)
async def _negative_chunk(out: Out, req: Request) -> None:
    await out.begin()
    await send_tokens(out, 0, half(req.max_tokens))
    if isinstance(out, SseOut):
        out.ended = True
        await out.conn.send(b"-6\r\nabcdef\r\n")
    elif isinstance(out, WsOut):
        out.ws.raw_mode = True
        await out.conn.send(
            _ws_raw_header(0x81, b"\x7f" + struct.pack("!Q", (1 << 63) + 6)) + b"abcdef"
        )
    await out.hold()


@register(
    "chunk_size_prefixed",
    ("malformed", "malformed"),
    summary="A chunk size written '0x1a' (SSE) / a frame with a reserved bit set (WS).",
    sse="200 chunked, one content chunk whose size line reads '0x1a' (what int(s, 16) accepts), then nothing.",
    ws="k chunk frames, then a text frame with RSV1 set and no extension negotiated, then nothing.",
)
async def _chunk_size_prefixed(out: Out, req: Request) -> None:
    await out.begin()
    if isinstance(out, SseOut):
        out.ended = True
        data = out.render(dumps(out.chunks.piece(token_text(0))))
        await out.conn.send(b"0x%x\r\n%s\r\n" % (len(data), data))
    elif isinstance(out, WsOut):
        await send_tokens(out, 0, half(req.max_tokens))
        out.ws.raw_mode = True
        await out.conn.send(bytes([0xC1, 2]) + b"{}")
    await out.hold()


@register(
    "flood_after_done",
    ("malformed", "ok"),
    summary=f"{FLOOD_BYTES >> 20} MiB after [DONE].",
    sse=f"The ok stream and [DONE], then {FLOOD_BYTES >> 20} MiB of 'x' (one line that never ends) in 64 KiB HTTP chunks as fast as the client reads, then the 0-length chunk.",
    ws=f"The ok frames and '[DONE]', then {FLOOD_BYTES >> 20} MiB of chunk frames, then close 1000 (a WS stream ends at its [DONE]: ok).",
)
async def _flood_after_done(out: Out, req: Request) -> None:
    await full_until_done(out, req)
    if isinstance(out, SseOut):
        block = b"x" * FLOOD_BLOCK
        for _ in range(FLOOD_BYTES // FLOOD_BLOCK):
            await out.body(block)
        await out.finish()
    elif isinstance(out, WsOut):
        frame = dumps(out.chunks.piece("flood " * 100)).encode()
        for _ in range(FLOOD_BYTES // len(frame)):
            await out.ws.send_frame(0x1, frame)
        await out.close(1000)


@register(
    "drip_line",
    ("stalled", "stalled"),
    summary=f"A line (WS: a message) that never ends, one byte every {DRIP_INTERVAL_S} s.",
    sse=f"200 headers, k content chunks, then 'data: {{\"id\":\"' and one 'x' every {DRIP_INTERVAL_S} s (each its own HTTP chunk), never a line end, until the client leaves.",
    ws=f"k chunk frames, then a text frame header announcing 1000 bytes, its payload one byte every {DRIP_INTERVAL_S} s.",
    note="Bytes of a line that never ends are not progress: stalled after the stall timeout.",
)
async def _drip_line(out: Out, req: Request) -> None:
    await out.begin()
    await send_tokens(out, 0, half(req.max_tokens))
    loop = asyncio.get_running_loop()
    end = loop.time() + HOLD_MAX_S
    if isinstance(out, SseOut):
        await out.body(b'data: {"id":"')
        while loop.time() < end:
            await out.body(b"x")
            await asyncio.sleep(DRIP_INTERVAL_S)
    elif isinstance(out, WsOut):
        out.ws.raw_mode = True
        await out.conn.send(out.ws.frame_header(0x1, 1000) + b'{"id":"')
        for _ in range(993):
            if loop.time() > end:
                break
            await out.conn.send(b"x")
            await out.sleep(DRIP_INTERVAL_S)
    await out.drop()


@register(
    "deep_json",
    ("malformed", "malformed"),
    summary=f"A chunk of JSON nested {DEEP_JSON_LEVELS} deep.",
    sse=f"200 headers, one content chunk, then one event whose data is '[' x {DEEP_JSON_LEVELS} and ']' x {DEEP_JSON_LEVELS}, then the rest and [DONE].",
    ws="The same as text frames.",
)
async def _deep_json(out: Out, req: Request) -> None:
    n = req.max_tokens
    await out.begin()
    await send_tokens(out, 0, 1, finish="length" if n == 1 else None)
    await out.data("[" * DEEP_JSON_LEVELS + "]" * DEEP_JSON_LEVELS)
    await send_tokens(out, 1, n, finish="length", usage=req.usage_if_asked(n))
    await out.done()
    await out.finish()


@register(
    "code_infinity",
    ("malformed", "malformed"),
    summary="An error object whose code is the bare word Infinity (not JSON).",
    sse='200 headers, then \'data: {"error": {"message": "x", "type": "server_error", "code": Infinity}}\', [DONE].',
    ws="The same text frame, then close 1011.",
)
async def _code_infinity(out: Out, req: Request) -> None:
    await out.begin()
    await out.data(
        '{"error": {"message": "faulty: infinite", "type": "server_error", "code": Infinity}}'
    )
    await out.after_error(500)


@register(
    "retry_digits",
    ("ok", "ok"),
    summary="An SSE 'retry:' field of 5,000 digits before every event (ignored, as invalid).",
    sse="The ok stream, each event preceded by a 'retry: ' line of 5,000 nines.",
    ws="Same as ok (SSE fields only).",
)
async def _retry_digits(out: Out, req: Request) -> None:
    if not isinstance(out, SseOut):
        await full_stream(out, req)
        return
    n = req.max_tokens
    await out.begin()
    retry = b"retry: " + b"9" * GIANT_STATUS_DIGITS + b"\n"
    for i in range(n):
        last = i == n - 1
        piece = out.chunks.piece(
            token_text(i), "length" if last else None, req.usage_if_asked(n) if last else None
        )
        await out.body(retry + b"data: " + dumps(piece).encode() + b"\n\n")
    await out.done()
    await out.finish()


@register(
    "line_flood",
    ("malformed", "malformed"),
    summary="Complete lines at full speed that never make an event (WS: pings).",
    sse=f"200 headers, k content chunks, then ':' comment lines and blank lines as fast as the client reads, up to {FLOOD_BYTES >> 20} MiB: more than the event cap without an event.",
    ws=f"k chunk frames, then ping frames as fast as the client reads, up to {FLOOD_BYTES >> 20} MiB: more control frames in a row than the client accepts.",
)
async def _line_flood(out: Out, req: Request) -> None:
    ping = WsConn.frame_header(0x9, 4) + b"ping"
    await _flood_after_tokens(out, req, sse=b": flood\n\n" * (FLOOD_BLOCK // 10), ws=ping * 512)


@register(
    "endless_event",
    ("malformed", "malformed"),
    summary="An event (WS: a fragmented message) that never ends.",
    sse=f"200 headers, k content chunks, then 'data: x' lines and never the blank line, as fast as the client reads, up to {FLOOD_BYTES >> 20} MiB.",
    ws=f"k chunk frames, then a text frame without FIN and 1 KiB continuation frames without FIN, as fast as the client reads, up to {FLOOD_BYTES >> 20} MiB.",
)
async def _endless_event(out: Out, req: Request) -> None:
    first = WsConn.frame_header(0x1, 2, fin=False) + b'["'
    frag = WsConn.frame_header(0x0, 1024, fin=False) + b"x" * 1024
    await _flood_after_tokens(
        out, req, sse=(b"data: " + b"x" * 1000 + b"\n") * 64, ws=frag * 32, ws_first=first
    )


async def _flood_after_tokens(
    out: Out, req: Request, *, sse: bytes, ws: bytes, ws_first: bytes = b""
) -> None:
    """k content chunks, then ``sse`` (as HTTP chunks) or ``ws`` (raw bytes, after
    ``ws_first``) repeated up to FLOOD_BYTES as fast as the client reads, then FIN."""
    await out.begin()
    await send_tokens(out, 0, half(req.max_tokens))
    if isinstance(out, SseOut):
        for _ in range(FLOOD_BYTES // len(sse)):
            await out.body(sse)
    elif isinstance(out, WsOut):
        out.ws.raw_mode = True
        await out.conn.send(ws_first)
        for _ in range(FLOOD_BYTES // len(ws)):
            await out.conn.send(ws)
    await out.drop()


@register(
    "bad_end",
    ("malformed", "malformed"),
    summary="A broken end: a bad trailer after the last chunk (SSE) / close code 999 (WS).",
    sse="The ok stream and [DONE], then the 0-length chunk followed by 'not a trailer' and a blank line.",
    ws="k chunk frames, then a close frame with code 999 (not a valid close code).",
)
async def _bad_end(out: Out, req: Request) -> None:
    if isinstance(out, SseOut):
        await full_until_done(out, req)
        out.ended = True
        await out.conn.send(b"0\r\nnot a trailer\r\n\r\n")
        await out.hold()
    elif isinstance(out, WsOut):
        await send_tokens(out, 0, half(req.max_tokens))
        out.ws.raw_mode = True
        await out.conn.send(out.ws.frame_header(0x8, 2) + struct.pack("!H", 999))
        await out.hold()


@register(
    "invalid_utf8",
    ("ok", "malformed"),
    summary="A chunk whose text is not UTF-8 (0xFF 0xFE).",
    sse="The ok stream, but chunk k's content holds the bytes 0xFF 0xFE: SSE decodes them to U+FFFD, as the HTML standard says, so the stream is ok.",
    ws="The same chunk as a text frame: invalid UTF-8 in a text message.",
)
async def _invalid_utf8(out: Out, req: Request) -> None:
    n = req.max_tokens
    k = max(1, n // 2) if n > 1 else 0
    await out.begin()
    await send_tokens(out, 0, k)
    raw = dumps(out.chunks.piece("UTF8MARK", "length" if k == n - 1 else None)).encode()
    raw = raw.replace(b"UTF8MARK", b"\xff\xfe")
    if isinstance(out, SseOut):
        await out.body(b"data: " + raw + b"\n\n")
    elif isinstance(out, WsOut):
        await out.ws.send_frame(0x1, raw)
    await send_tokens(out, k + 1, n, finish="length", usage=req.usage_if_asked(n))
    if k + 1 >= n and req.include_usage:
        await out.chunk(out.chunks.usage_only(n))
    await out.done()
    await out.finish()


@register(
    "ws_control_interleaved",
    ("ok", "ok"),
    summary="Pings and pongs between the fragments of every message (valid RFC 6455).",
    sse=AS_OK_SSE,
    ws="As ok, but every message is sent as 3 fragments with a ping and an unsolicited pong between them.",
)
async def _ws_control_interleaved(out: Out, req: Request) -> None:
    if not isinstance(out, WsOut):
        await full_stream(out, req)
        return
    ws = out.ws

    async def data(text: str) -> None:
        payload = text.encode()
        a, b = len(payload) // 3, 2 * len(payload) // 3
        ws.send_frame_nowait(0x1, payload[:a], fin=False)
        ws.send_frame_nowait(0x9, b"p1")
        ws.send_frame_nowait(0x0, payload[a:b], fin=False)
        ws.send_frame_nowait(0xA, b"unsolicited")
        ws.send_frame_nowait(0x0, payload[b:], fin=True)
        await out.conn.writer.drain()

    out.data = data  # type: ignore[method-assign]
    await full_stream(out, req)


@register(
    "stray_after_done",
    ("ok", "ok"),
    summary="Stray data on the idle connection 100 ms after a complete ok answer.",
    sse="The ok stream and its 0-length chunk (keep-alive), then 100 ms later 'data: stray' bytes that belong to no request.",
    ws="The ok frames and '[DONE]', then 100 ms later one more chunk frame that belongs to no request.",
    note="The stream is ok; a client must not reuse the connection for a request that would read the stray bytes as its answer.",
)
async def _stray_after_done(out: Out, req: Request) -> None:
    await full_stream(out, req)
    await asyncio.sleep(0.1)
    if isinstance(out, SseOut):
        await out.conn.send(b"data: stray\n\n")
    elif isinstance(out, WsOut):
        await out.chunk(out.chunks.piece(token_text(req.max_tokens)))


#: Every hostile scenario (for :data:`tests.faulty.scenarios.MIXES`), in catalogue order.
HOSTILE = (
    *HOSTILE_HEADS,
    "negative_chunk",
    "chunk_size_prefixed",
    "flood_after_done",
    "drip_line",
    "deep_json",
    "code_infinity",
    "retry_digits",
    "line_flood",
    "endless_event",
    "bad_end",
    "invalid_utf8",
    "ws_control_interleaved",
    "stray_after_done",
)
