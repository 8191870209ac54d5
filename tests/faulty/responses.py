"""One request as a scenario sees it (:class:`Request`, :class:`Chunks`), and where it writes
its response: :class:`Out`, with :class:`SseOut` and :class:`WsOut` behind one interface."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from dataclasses import dataclass
from typing import Any

from tests.faulty.constants import (
    DEFAULT_MAX_TOKENS,
    DRIBBLE_PAUSE_S,
    DRIBBLE_SIZES,
    ENDLESS_LINE_BLOCK,
    ENDLESS_LINE_INTERVAL_S,
    ENDLESS_LINE_MAX_BYTES,
    HOLD_MAX_S,
    WS_FRAGMENT,
)
from tests.faulty.wire import (
    Conn,
    PeerGone,
    WsConn,
    dumps,
    error_body,
    response_head,
    send_json,
    ws_close_code,
)

__all__ = ["Chunks", "Out", "Request", "SseOut", "WsOut", "token_text"]

_IDS = itertools.count(1)


def token_text(i: int) -> str:
    """The text of content chunk ``i`` (0-based): exactly one token."""
    return f" t{i}"


# --- requests and chunks -----------------------------------------------------------------


@dataclass
class Request:
    """One streaming request, as the scenario sees it."""

    endpoint: str  # "chat" | "completions" | "stream"
    body: dict[str, Any]
    scenario: str

    @property
    def chat(self) -> bool:
        """True when the chunks are ``chat.completion.chunk`` (else ``text_completion``)."""
        return self.endpoint == "chat"

    @property
    def max_tokens(self) -> int:
        """The token count ``n``."""
        value = self.body.get("max_tokens", self.body.get("max_completion_tokens"))
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            return DEFAULT_MAX_TOKENS
        return value

    @property
    def include_usage(self) -> bool:
        """Whether ``stream_options.include_usage`` was asked for."""
        options = self.body.get("stream_options")
        return isinstance(options, dict) and options.get("include_usage") is True

    @property
    def prompt_tokens(self) -> int:
        """Words in the prompt (or in the messages' text)."""
        if self.chat:
            messages = self.body.get("messages")
            text = " ".join(
                str(m.get("content", "")) for m in messages or () if isinstance(m, dict)
            )
        else:
            text = str(self.body.get("prompt", ""))
        return len(text.split())

    def usage_if_asked(self, completion_tokens: int) -> int | None:
        """``completion_tokens`` when usage was asked for, else ``None``."""
        return completion_tokens if self.include_usage else None


class Chunks:
    """Builds the chunk objects of one response (the OpenAI-compatible shapes)."""

    def __init__(self, req: Request) -> None:
        self.req = req
        prefix = "chatcmpl" if req.chat else "cmpl"
        self.id = f"{prefix}-faulty-{next(_IDS)}"
        self.created = int(time.time())

    def _base(self, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "chat.completion.chunk" if self.req.chat else "text_completion",
            "created": self.created,
            "model": self.req.scenario,
            "choices": choices,
        }

    def usage(self, completion_tokens: int) -> dict[str, int]:
        prompt = self.req.prompt_tokens
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt + completion_tokens,
        }

    def piece(
        self,
        text: str,
        finish: str | None = None,
        usage: int | None = None,
        *,
        delta: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """One chunk with ``text`` (chat: ``delta.content``, or ``delta`` as given)."""
        if self.req.chat:
            choice: dict[str, Any] = {
                "index": 0,
                "delta": {"content": text} if delta is None else delta,
                "logprobs": None,
                "finish_reason": finish,
            }
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
        obj = self._base([choice])
        if usage is not None:
            obj["usage"] = self.usage(usage)
        return obj

    def usage_only(self, completion_tokens: int) -> dict[str, Any]:
        """A vLLM/OpenAI-style final chunk: ``choices: []`` and ``usage``."""
        obj = self._base([])
        obj["usage"] = self.usage(completion_tokens)
        return obj

    def completion(self, n: int) -> dict[str, Any]:
        """A whole non-streaming completion object (for ``json_body``)."""
        text = "".join(token_text(i) for i in range(n))
        if self.req.chat:
            choice: dict[str, Any] = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "length",
            }
            obj_type = "chat.completion"
        else:
            choice = {"index": 0, "text": text, "finish_reason": "length"}
            obj_type = "text_completion"
        return {
            "id": self.id,
            "object": obj_type,
            "created": self.created,
            "model": self.req.scenario,
            "choices": [choice],
            "usage": self.usage(n),
        }


# --- the output of one request: SSE and WebSocket share one interface ----------------------


class Out:
    """Where a scenario writes one request's response. Subclassed per transport."""

    proto = ""

    def __init__(self, conn: Conn, req: Request) -> None:
        self.conn = conn
        self.req = req
        self.chunks = Chunks(req)

    @property
    def closed(self) -> bool:
        return self.conn.closed

    async def begin(self) -> None:
        """Start the stream (SSE: the 200 headers; WS: nothing)."""

    async def chunk(self, obj: dict[str, Any]) -> None:
        """Send one chunk object."""
        await self.data(dumps(obj))

    async def data(self, text: str) -> None:
        """Send one SSE data event / WS text frame with arbitrary text."""
        raise NotImplementedError

    async def done(self) -> None:
        """Send the terminal marker ``[DONE]``."""
        await self.data("[DONE]")

    async def finish(self) -> None:
        """End the response cleanly (SSE: end of the chunked body; WS: nothing)."""

    async def close_normal(self) -> None:
        """SSE: a clean end of body; WS: close 1000."""
        raise NotImplementedError

    async def error_before(self, status: int, message: str) -> None:
        """An error before the stream (SSE: HTTP status + JSON; WS: error frame + close)."""
        raise NotImplementedError

    async def error_event(self, code: int, message: str) -> None:
        """An error object inside the stream."""
        await self.chunk(error_body(code, message))

    async def after_error(self, code: int) -> None:
        """What follows an in-stream error (SSE: [DONE] + end; WS: close by the code)."""
        raise NotImplementedError

    async def sleep(self, seconds: float) -> None:
        """Pause (WS: answers a client's close meanwhile and stops the scenario)."""
        await asyncio.sleep(seconds)

    async def sleep_until(self, when: float) -> None:
        """Pause until the loop time ``when``."""
        left = when - asyncio.get_running_loop().time()
        if left > 0:
            await self.sleep(left)

    async def drop(self) -> None:
        """Hang up with a FIN, mid-whatever (SSE: the chunked body left unfinished)."""
        await self.conn.flushed()
        await self.conn.fin()

    async def reset(self) -> None:
        """Hang up with a TCP reset, after letting the client read what was sent."""
        await self.conn.flushed()
        await asyncio.sleep(0.1)
        await self.conn.rst()

    async def hold(self) -> None:
        """Send nothing until the client leaves (at most HOLD_MAX_S), then FIN."""
        await self.conn.hold(HOLD_MAX_S)

    async def partial(self, obj: dict[str, Any]) -> None:
        """Send half of one chunk's framing unit, then FIN."""
        raise NotImplementedError

    async def endless_line(self) -> None:
        """One line (WS: one frame) that never ends, then FIN."""
        raise NotImplementedError


class SseOut(Out):
    """SSE over HTTP/1.1, normally one HTTP chunk per event."""

    proto = "sse"

    def __init__(self, conn: Conn, req: Request, *, keep_alive: bool) -> None:
        super().__init__(conn, req)
        self.keep_alive = keep_alive
        self.started = False
        self.ended = False
        self.eol = "\n"
        self.fields = False  # comments, event:/id:/retry:, unknown fields, "data:" w/o space
        self.multiline = False  # JSON split over two data: lines
        self.dribble = False  # 1-3 byte HTTP chunks, every CR ends a piece
        self.chunked = True  # False: no Transfer-Encoding, body ends at the close
        self.events = 0

    async def begin(self) -> None:
        if self.started:
            return
        self.started = True
        headers = [
            ("content-type", "text/event-stream; charset=utf-8"),
            ("cache-control", "no-cache"),
            ("x-faulty-scenario", self.req.scenario),
        ]
        if self.chunked:
            headers.append(("transfer-encoding", "chunked"))
        if not self.chunked or not self.keep_alive:
            headers.append(("connection", "close"))
        await self.conn.send(response_head(200, headers))

    async def body(self, data: bytes) -> None:
        """Body bytes, framed as HTTP chunk(s) when chunked."""
        await self.begin()
        if not self.chunked:
            await self.conn.send(data)
            return
        if not self.dribble:
            await self.conn.send(b"%x\r\n%s\r\n" % (len(data), data))
            return
        sizes = itertools.cycle(DRIBBLE_SIZES)
        pos = 0
        count = 0
        while pos < len(data):
            end = min(pos + next(sizes), len(data))
            cr = data.find(b"\r", pos, end)
            if cr != -1:
                end = cr + 1  # every CRLF is split between two pieces
            piece = data[pos:end]
            await self.conn.send(b"%x\r\n%s\r\n" % (len(piece), piece))
            pos = end
            count += 1
            if count % 2 == 0:
                await asyncio.sleep(DRIBBLE_PAUSE_S)

    def render(self, text: str) -> bytes:
        """One SSE event holding ``text`` as its data, in this response's style."""
        eol = self.eol
        lines: list[str] = []
        n = self.events
        self.events += 1
        if self.fields:
            lines.append(": faulty comment line")
            if n == 0:
                lines.append("retry: 3000")
            lines += ["event: message", f"id: {n}", "x-unknown-field: ignored per HTML rules"]
        payloads = [text]
        if self.multiline and text.startswith("{"):
            cut = text.find(",") + 1
            if cut > 0:
                payloads = [text[:cut], text[cut:]]
        sep = ":" if self.fields and n % 2 else ": "
        lines += [f"data{sep}{p}" for p in payloads]
        event = eol.join(lines) + eol + eol
        if self.fields:
            event += f": keep-alive, an event with no data{eol}{eol}"
        return event.encode()

    async def data(self, text: str) -> None:
        await self.body(self.render(text))

    async def finish(self) -> None:
        await self.begin()
        if self.ended:
            return
        self.ended = True
        if self.chunked:
            await self.conn.send(b"0\r\n\r\n")
        else:
            await self.drop()

    async def close_normal(self) -> None:
        await self.finish()

    async def error_before(self, status: int, message: str) -> None:
        extra = (("retry-after", "1"),) if status in (429, 503) else ()
        self.ended = True
        await send_json(
            self.conn,
            status,
            error_body(status, message),
            keep_alive=self.keep_alive,
            extra=extra,
        )

    async def after_error(self, code: int) -> None:
        await self.done()
        await self.finish()

    async def partial(self, obj: dict[str, Any]) -> None:
        data = self.render(dumps(obj))
        await self.conn.send(b"%x\r\n%s" % (len(data), data[: len(data) // 2]))
        await self.drop()

    async def endless_line(self) -> None:
        await self.body(b'data: {"id":"')
        block = b"x" * ENDLESS_LINE_BLOCK
        sent = 0
        while sent < ENDLESS_LINE_MAX_BYTES:
            await self.body(block)
            sent += len(block)
            await asyncio.sleep(ENDLESS_LINE_INTERVAL_S)
        await self.drop()

    async def json_response(self, obj: Any) -> None:
        """A 200 ``application/json`` body instead of an event stream."""
        self.ended = True
        await send_json(self.conn, 200, obj, keep_alive=self.keep_alive)


class WsOut(Out):
    """One request's frames on a WebSocket connection."""

    proto = "ws"

    def __init__(self, ws: WsConn, req: Request) -> None:
        super().__init__(ws.conn, req)
        self.ws = ws
        self.fragmented = False  # each message as 16-byte fragments, header/payload split

    async def data(self, text: str) -> None:
        payload = text.encode()
        if not self.fragmented:
            await self.ws.send_frame(0x1, payload)
            return
        pieces = [payload[i : i + WS_FRAGMENT] for i in range(0, len(payload), WS_FRAGMENT)]
        for index, piece in enumerate(pieces):
            opcode = 0x1 if index == 0 else 0x0
            header = self.ws.frame_header(opcode, len(piece), fin=index == len(pieces) - 1)
            self.conn.write_nowait(header[:1])
            self.conn.write_nowait(header[1:] + piece[:1])
            self.conn.write_nowait(piece[1:])
            await self.conn.writer.drain()
            await self.sleep(DRIBBLE_PAUSE_S)

    async def binary(self, payload: bytes) -> None:
        """One binary frame."""
        await self.ws.send_frame(0x2, payload)

    async def close(self, code: int, reason: str = "") -> None:
        """Close the connection with ``code``."""
        await self.ws.close(code, reason)

    async def close_normal(self) -> None:
        await self.close(1000)

    async def error_before(self, status: int, message: str) -> None:
        await self.chunk(error_body(status, message))
        await self.close(ws_close_code(status), message)

    async def after_error(self, code: int) -> None:
        await self.close(ws_close_code(code))

    async def sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.ws.peer_closed.wait(), seconds)
        if self.ws.peer_closed.is_set():
            raise PeerGone("client closed the WebSocket")

    async def hold(self) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.ws.peer_closed.wait(), HOLD_MAX_S)
        await self.conn.fin()

    async def partial(self, obj: dict[str, Any]) -> None:
        payload = dumps(obj).encode()
        self.ws.raw_mode = True
        await self.conn.send(self.ws.frame_header(0x1, len(payload)) + payload[: len(payload) // 2])
        await self.drop()

    async def endless_line(self) -> None:
        self.ws.raw_mode = True
        await self.conn.send(self.ws.frame_header(0x1, ENDLESS_LINE_MAX_BYTES) + b'{"id":"')
        block = b"x" * ENDLESS_LINE_BLOCK
        sent = 0
        while sent < ENDLESS_LINE_MAX_BYTES - len(block):
            await self.conn.send(block)
            sent += len(block)
            await self.sleep(ENDLESS_LINE_INTERVAL_S)
        await self.drop()
