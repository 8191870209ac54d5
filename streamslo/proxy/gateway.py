"""The proxy's HTTP-level fault: a gateway that cuts a stream short and says it ended
(``streamslo proxy --silent-stop``; docs/proxy.md).

The third incident's failure, on purpose: for a selected request (``--probability``,
``--every``) whose answer is an OpenAI chunk stream, the gateway forwards the first ``k``
content chunks, then ends the stream as if the answer were whole: a finish chunk with
``finish_reason: "stop"``, a usage chunk that counts the ``k`` chunks it sent (when the request
asked for usage), ``data: [DONE]``, and a clean end of the body. ``k`` is
``--silent-stop-after``, or drawn (seeded) between 1 and one less than the request's
``max_tokens``. A stream that ends before ``k`` passes as it came. Every other request
passes through byte for byte.

Each client connection carries one request (the answer says ``Connection: close``); the
request goes to the upstream on a connection of its own. Only the OpenAI chunk dialects are cut
(``/v1/chat/completions``, ``/v1/completions``, ``/v1/stream``); anything else passes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from dataclasses import dataclass
from typing import cast

from streamslo.errors import HTTPProtocolError
from streamslo.proxy.config import Endpoint, ProxyLimits
from streamslo.stream.http1 import ResponseReader
from streamslo.stream.sse import SSEDecoder, SSEEvent, SSEProtocolError

__all__ = ["MAX_REQUEST_BYTES", "SilentStop", "cut_point", "relay_request"]

#: The largest request (head and body) the gateway reads.
MAX_REQUEST_BYTES = 16 * 1024 * 1024
#: The largest request head.
MAX_HEAD_BYTES = 64 * 1024
#: Headers that belong to one connection, not to the message (RFC 9110, 7.6.1).
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "content-length",
    }
)
_CUT_PATHS = ("/chat/completions", "/completions", "/stream")


@dataclass(frozen=True)
class SilentStop:
    """What the gateway does to a selected request."""

    after: int | None = None
    """Content chunks forwarded before the cut; None: drawn in [1, max_tokens - 1]."""


@dataclass(frozen=True)
class _Request:
    method: str
    target: str
    headers: list[tuple[str, str]]
    body: bytes

    def json(self) -> dict[str, object]:
        try:
            value = json.loads(self.body or b"{}")
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}


async def _read_request(reader: asyncio.StreamReader) -> _Request | None:
    """One request from the client (None: it closed first).

    Raises:
        HTTPProtocolError: a request the gateway cannot read (no Content-Length for a body, too
            large, a broken head).
    """
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    except asyncio.LimitOverrunError:
        raise HTTPProtocolError(f"request head larger than {MAX_HEAD_BYTES} bytes") from None
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise HTTPProtocolError(f"not an HTTP/1.1 request line: {lines[0][:80]!r}")
    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise HTTPProtocolError(f"a header line without a colon: {line[:80]!r}")
        headers.append((name.strip(), value.strip()))
    fields = {k.lower(): v for k, v in headers}
    if "chunked" in fields.get("transfer-encoding", "").lower():
        raise HTTPProtocolError("a chunked request body (the gateway reads Content-Length bodies)")
    try:
        length = int(fields.get("content-length", "0"))
    except ValueError:
        raise HTTPProtocolError("a Content-Length that is not a number") from None
    if not 0 <= length <= MAX_REQUEST_BYTES:
        raise HTTPProtocolError(f"a request body of {length} bytes")
    body = await reader.readexactly(length) if length else b""
    return _Request(parts[0], parts[1], headers, body)


def cut_point(body: dict[str, object], rng: random.Random, after: int | None) -> int:
    """How many content chunks to forward before the cut."""
    if after is not None:
        return after
    n = next(
        (
            v
            for k in ("max_tokens", "max_completion_tokens", "max_output_tokens")
            if isinstance(v := body.get(k), int) and not isinstance(v, bool)
        ),
        16,
    )
    return rng.randint(1, max(1, n - 1))


def _content(chunk: object) -> bool:
    """A chunk whose first choice carries text (a content chunk)."""
    if not isinstance(chunk, dict):
        return False
    choices = chunk.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return False
    choice = choices[0]
    delta = choice.get("delta")
    text = delta.get("content") if isinstance(delta, dict) else choice.get("text")
    return isinstance(text, str) and bool(text)


def _ending(last: dict[str, object], chat: bool, sent: int, usage: bool) -> bytes:
    """The finish chunk, the usage chunk (if asked) and ``[DONE]``, as SSE events."""
    keep: dict[str, object] = {
        k: last[k] for k in ("id", "object", "created", "model") if k in last
    }
    choice: dict[str, object] = {"index": 0, "finish_reason": "stop"}
    if chat:
        choice["delta"] = {}
    else:
        choice["text"] = ""
    events: list[dict[str, object]] = [{**keep, "choices": [choice]}]
    if usage:
        counts = {"prompt_tokens": 0, "completion_tokens": sent, "total_tokens": sent}
        events.append({**keep, "choices": [], "usage": counts})
    out = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
    return out + b"data: [DONE]\n\n"


def _chunked(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data) if data else b""


async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    while data := await src.read(65536):
        dst.write(data)
        await dst.drain()


async def relay_request(
    client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    upstream: Endpoint,
    limits: ProxyLimits,
    cut: SilentStop | None,
    rng: random.Random,
) -> bool:
    """One request through the gateway: passed through, or (``cut``) cut short silently.

    Returns:
        Whether a stream was cut.

    Raises:
        HTTPProtocolError: a request or an answer the gateway cannot read.
        OSError: the upstream cannot be reached.
    """
    reader, writer = client
    req = await _read_request(reader)
    if req is None:
        return False
    up_reader, up_writer = await asyncio.wait_for(
        asyncio.open_connection(upstream.host, upstream.port), limits.connect_timeout_s
    )
    try:
        head = [f"{req.method} {req.target} HTTP/1.1"]
        head += [f"{k}: {v}" for k, v in req.headers if k.lower() not in _HOP_BY_HOP]
        head += [f"Content-Length: {len(req.body)}", "Connection: close", "", ""]
        up_writer.write("\r\n".join(head).encode("latin-1") + req.body)
        await up_writer.drain()
        path = req.target.split("?", 1)[0]
        if cut is None or not path.endswith(_CUT_PATHS):
            await _pipe(up_reader, writer)
            return False
        return await _cut(up_reader, writer, req, cut, rng)
    finally:
        up_writer.close()
        with contextlib.suppress(OSError):
            await up_writer.wait_closed()


async def _cut(
    up: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    req: _Request,
    cut: SilentStop,
    rng: random.Random,
) -> bool:
    """Forward an event stream until its cut point, then end it as if it were whole."""
    body = req.json()
    k = cut_point(body, rng, cut.after)
    options = body.get("stream_options")
    usage = isinstance(options, dict) and options.get("include_usage") is True
    chat = "messages" in body
    response = ResponseReader()
    decoder = SSEDecoder()
    sent = 0
    last: dict[str, object] = {}
    streaming = False
    while True:
        data = await up.read(65536)
        if not data:
            if streaming:
                writer.write(b"0\r\n\r\n")
            return False
        payload = response.feed(data)
        if response.head is None:
            continue
        if not streaming:
            h = response.head
            ctype = (h.content_type or "").split(";", 1)[0].strip().lower()
            if not (200 <= h.status < 300 and ctype == "text/event-stream"):
                writer.write(h.raw + payload)  # not a stream to cut: pass the rest through
                await _pipe(up, writer)
                return False
            lines = [f"HTTP/1.1 {h.status} {h.reason}"]
            lines += [f"{k2}: {v}" for k2, v in h.headers.items() if k2 not in _HOP_BY_HOP]
            lines += ["Transfer-Encoding: chunked", "Connection: close", "", ""]
            writer.write("\r\n".join(lines).encode("latin-1"))
            streaming = True
        try:
            events = decoder.feed(payload)
        except SSEProtocolError as exc:
            events = cast("list[SSEEvent]", list(exc.events))
        out = bytearray()
        for ev in events:
            try:
                chunk = json.loads(ev.data)
            except ValueError:
                chunk = None
            if isinstance(chunk, dict):
                last = chunk
            out += b"data: " + ev.data.encode() + b"\n\n"
            if _content(chunk):
                sent += 1
                if sent >= k:
                    out += _ending(last, chat, sent, usage)
                    writer.write(_chunked(bytes(out)) + b"0\r\n\r\n")
                    await writer.drain()
                    return True
        writer.write(_chunked(bytes(out)))
        await writer.drain()
        if response.complete:
            writer.write(b"0\r\n\r\n")
            return False
