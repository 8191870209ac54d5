"""An incremental, Sans-I/O Server-Sent Events decoder.

It follows the HTML standard's event-stream interpretation rules: lines end with CRLF, a lone
LF or a lone CR (a CR at the end of one read and an LF at the start of the next are one line
end); a line starting with ``:`` is a comment; ``field: value`` drops one leading space from the
value; ``data`` lines of one event join with ``\\n``; a blank line dispatches the event; an event
without any ``data`` is not dispatched; an unfinished event at the end of the stream is dropped.
A UTF-8 byte order mark at the very start is ignored.

Unlike ``str.splitlines`` it does not treat ``\\x0b``, ``\\x0c``, ``\\x1c``-``\\x1e``, ``\\x85`` or
``\\u2028`` as line ends: SSE does not.

Bytes go in with :meth:`SSEDecoder.feed`; complete events come out. No I/O happens here, so the
same class serves the gevent Locust users and the asyncio pytest probes.

Limits protect the client from hostile servers: a line longer than ``max_line_bytes`` or an event
whose data grows past ``max_event_bytes`` raises :class:`SSEProtocolError`, and the decoder never
buffers more than that.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["DEFAULT_MAX_EVENT_BYTES", "SSEDecoder", "SSEEvent", "SSEProtocolError"]

#: 1 MiB: far above any real token chunk, far below what could hurt the load generator.
DEFAULT_MAX_EVENT_BYTES = 1 << 20

_BOM = b"\xef\xbb\xbf"


class SSEProtocolError(ValueError):
    """The byte stream broke a limit of the decoder (an endless line, a giant event)."""


class SSEEvent(NamedTuple):
    """One dispatched event (a named tuple: cheap to make, thousands per second)."""

    data: str
    """The event's data: its ``data`` lines joined by ``\\n``."""
    event: str = "message"
    """The ``event`` field, ``"message"`` when absent."""
    id: str | None = None
    """The last event id seen so far on this stream, if any."""
    retry: int | None = None
    """A ``retry`` value that came with this event, in milliseconds."""


class SSEDecoder:
    """Turns a byte stream into :class:`SSEEvent` objects, one read at a time.

    Args:
        max_line_bytes: the longest line accepted (default: ``max_event_bytes``).
        max_event_bytes: the most data one event may carry.
    """

    __slots__ = (
        "_buf",
        "_data",
        "_data_len",
        "_event",
        "_last_id",
        "_max_event",
        "_max_line",
        "_retry",
        "_skip_lf",
        "_started",
    )

    def __init__(
        self,
        max_line_bytes: int | None = None,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    ) -> None:
        self._max_event = max_event_bytes
        self._max_line = max_line_bytes if max_line_bytes is not None else max_event_bytes
        self._buf = b""
        self._skip_lf = False  # the previous read ended with CR: an LF now is the same line end
        self._started = False  # the BOM check is done
        self._data: list[bytes] = []
        self._data_len = 0
        self._event: bytes | None = None
        self._retry: int | None = None
        self._last_id: str | None = None

    @property
    def pending_bytes(self) -> int:
        """Bytes buffered that do not yet form a complete line."""
        return len(self._buf)

    @property
    def in_event(self) -> bool:
        """True while an event has fields but no blank line has dispatched it yet."""
        return bool(self._data) or self._event is not None

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Decode one read's worth of bytes.

        Args:
            chunk: the bytes just read (any size, split anywhere).

        Returns:
            The events completed by these bytes, in order (often empty).

        Raises:
            SSEProtocolError: a line or an event passed its limit.
        """
        if not chunk:
            return []
        if self._skip_lf:
            self._skip_lf = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        buf = self._buf + chunk if self._buf else chunk
        if not self._started:
            if len(buf) < 3 and _BOM.startswith(buf):
                self._buf = buf
                return []
            self._started = True
            if buf.startswith(_BOM):
                buf = buf[3:]
        events: list[SSEEvent] = []
        if b"\r" not in buf:
            # Fast path, by far the most common: LF-only line ends.
            if not self._data and self._event is None and b"\n\n" in buf:
                # Whole events: a block that is one "data:" line is dispatched directly
                # (no per-line work); any other block goes through the general rules.
                blocks = buf.split(b"\n\n")
                buf = blocks.pop()
                for block in blocks:
                    if block[:5] == b"data:" and b"\n" not in block:
                        value = block[6:] if block[5:6] == b" " else block[5:]
                        if len(value) >= self._max_event:
                            raise SSEProtocolError(f"an SSE event grew past {self._max_event} bytes")
                        events.append(SSEEvent(value.decode("utf-8", "replace"), "message", self._last_id, None))
                    else:
                        for line in block.split(b"\n"):
                            self._line(line, events)
                        self._line(b"", events)
            lines = buf.split(b"\n")
            self._buf = lines.pop()
            for line in lines:
                self._line(line, events)
        else:
            self._buf = b""
            pos, n = 0, len(buf)
            while pos < n:
                lf = buf.find(b"\n", pos)
                cr = buf.find(b"\r", pos, lf if lf >= 0 else n)
                if cr >= 0:
                    self._line(buf[pos:cr], events)
                    if cr + 1 < n:
                        pos = cr + 2 if buf[cr + 1 : cr + 2] == b"\n" else cr + 1
                    else:
                        self._skip_lf = True
                        pos = n
                elif lf >= 0:
                    self._line(buf[pos:lf], events)
                    pos = lf + 1
                else:
                    self._buf = buf[pos:]
                    break
        if len(self._buf) > self._max_line:
            raise SSEProtocolError(
                f"an SSE line grew past {self._max_line} bytes without ending"
            )
        return events

    def _line(self, line: bytes, events: list[SSEEvent]) -> None:
        if not line:
            if self._data:
                data = b"\n".join(self._data).decode("utf-8", "replace")
                name = self._event.decode("utf-8", "replace") if self._event else "message"
                events.append(SSEEvent(data, name or "message", self._last_id, self._retry))
            self._data = []
            self._data_len = 0
            self._event = None
            self._retry = None
            return
        if line[0] == 0x3A:  # ":" comment
            return
        colon = line.find(b":")
        if colon < 0:
            field, value = line, b""
        else:
            field = line[:colon]
            value = line[colon + 1 :]
            if value[:1] == b" ":
                value = value[1:]
        if field == b"data":
            self._data.append(value)
            self._data_len += len(value) + 1
            if self._data_len > self._max_event:
                raise SSEProtocolError(f"an SSE event grew past {self._max_event} bytes")
        elif field == b"event":
            self._event = value
        elif field == b"id":
            if b"\x00" not in value:
                self._last_id = value.decode("utf-8", "replace")
        elif field == b"retry" and value.isdigit():
            self._retry = int(value)
        # Any other field is ignored, as the standard says.
