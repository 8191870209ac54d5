"""An incremental, Sans-I/O Server-Sent Events decoder.

It follows the HTML standard's event-stream interpretation rules: lines end with CRLF, a lone
LF or a lone CR (a CR at the end of one read and an LF at the start of the next are one line
end); a line starting with ``:`` is a comment; ``field: value`` drops one leading space from the
value; ``data`` lines of one event join with ``\\n``; a blank line dispatches the event; an event
without any ``data`` is not dispatched; an unfinished event at the end of the stream is dropped.
A UTF-8 byte order mark at the very start is ignored; invalid UTF-8 decodes to U+FFFD, as the
standard says. A ``retry`` value of more than ten digits is ignored like any invalid one.

Unlike ``str.splitlines`` it does not treat ``\\x0b``, ``\\x0c``, ``\\x1c``-``\\x1e``, ``\\x85`` or
``\\u2028`` as line ends: SSE does not.

Bytes go in with :meth:`SSEDecoder.feed`; complete events come out. No I/O happens here, so the
same class serves the gevent Locust users and the asyncio pytest probes.

Caps protect the client from hostile servers: a line longer than ``max_line_bytes``, or more
than ``max_event_bytes`` of lines since the last dispatched event (its data, or comments and
blank lines that dispatch nothing), raises :class:`SSEProtocolError`; the decoder never buffers
more than that. Work is linear in the bytes fed: an unfinished line is appended to, not copied,
and only the new bytes are searched for a line end.
"""

from __future__ import annotations

from typing import NamedTuple

from streamslo.errors import SSEProtocolError
from streamslo.stream.caps import DEFAULT_MAX_EVENT_BYTES, MAX_RETRY_DIGITS
from streamslo.stream.lane import MAX_LANE_CHUNK

__all__ = ["DEFAULT_MAX_EVENT_BYTES", "SSEDecoder", "SSEEvent", "SSEProtocolError"]

_BOM = b"\xef\xbb\xbf"


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
        max_event_bytes: the most bytes of lines one event (or a run of lines that dispatch
            nothing) may take.
    """

    __slots__ = (
        "_clean",
        "_data",
        "_event",
        "_event_bytes",
        "_fast_cap",
        "_last_id",
        "_max_event",
        "_max_line",
        "_pend",
        "_retry",
        "_skip_lf",
        "_started",
        "comments",
    )

    def __init__(
        self,
        max_line_bytes: int | None = None,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    ) -> None:
        self._max_event = max_event_bytes
        self._max_line = max_line_bytes if max_line_bytes is not None else max_event_bytes
        self._fast_cap = min(self._max_line + 1, self._max_event)  # below it, both caps hold
        self._pend = bytearray()  # an unfinished line (appended to, never copied whole)
        self._skip_lf = False  # the previous read ended with CR: an LF now is the same line end
        self._started = False  # the BOM check is done
        self._data: list[bytes] = []
        self._event_bytes = 0  # bytes of lines since the last dispatched event
        self._event: bytes | None = None
        self._retry: int | None = None
        self._last_id: str | None = None
        self._clean = False  # between events, nothing pending or counted: one_event may take a read
        self.comments = 0
        """Comment lines (``:...``) seen: keep-alives, no progress for the stall rule."""

    @property
    def pending_bytes(self) -> int:
        """Bytes buffered that do not yet form a complete line."""
        return len(self._pend)

    @property
    def bytes_since_event(self) -> int:
        """Bytes of lines (and of an unfinished line) since the last dispatched event."""
        return self._event_bytes + len(self._pend)

    @property
    def lane_ready(self) -> bool:
        """Between events with nothing pending, and any event the lane takes within the caps:
        a read the lane takes (:func:`streamslo.stream.lane.chunk_event`) may skip :meth:`feed`,
        as :meth:`one_event` does."""
        return self._clean and self._fast_cap > MAX_LANE_CHUNK

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
            SSEProtocolError: a line or an event passed its cap.
        """
        events: list[SSEEvent] = []
        if not chunk:
            return events
        value = self.one_event(chunk)
        if value is not None:
            events.append(SSEEvent(value.decode("utf-8", "replace"), "message", self._last_id))
            return events
        self._clean = False
        try:
            if self._skip_lf:
                self._skip_lf = False
                if chunk[:1] == b"\n":
                    chunk = chunk[1:]
            pend = self._pend
            if pend:
                if b"\n" not in chunk and b"\r" not in chunk:
                    # Still no line end: append (amortised O(len(chunk))), no rescan.
                    if len(pend) + len(chunk) > self._max_line:
                        raise SSEProtocolError(
                            f"an SSE line grew past {self._max_line} bytes without ending"
                        )
                    pend += chunk
                    return events
                pend += chunk
                buf = bytes(pend)
                pend.clear()
            else:
                buf = chunk
            if not self._started:
                if len(buf) < 3 and _BOM.startswith(buf):
                    pend += buf
                    return events
                self._started = True
                if buf.startswith(_BOM):
                    buf = buf[3:]
            if b"\r" not in buf:
                # Fast path, by far the most common: LF-only line ends.
                if not self._data and self._event is None and b"\n\n" in buf:
                    # Whole events: a block that is one "data:" line is dispatched directly
                    # (no per-line work); any other block goes through the general rules.
                    blocks = buf.split(b"\n\n")
                    buf = blocks.pop()
                    for block in blocks:
                        if block[:5] == b"data:" and b"\n" not in block:
                            # The same accounting as _line(): the line and its line end
                            # (one comparison in the common case, nothing since the last event).
                            if len(block) >= self._fast_cap or self._event_bytes:
                                if len(block) > self._max_line:
                                    raise SSEProtocolError(
                                        f"an SSE line grew past {self._max_line} bytes"
                                    )
                                if self._event_bytes + len(block) + 1 > self._max_event:
                                    raise SSEProtocolError(
                                        f"an SSE event grew past {self._max_event} bytes"
                                    )
                            value = block[6:] if block[5:6] == b" " else block[5:]
                            self._event_bytes = 0
                            events.append(
                                SSEEvent(
                                    value.decode("utf-8", "replace"), "message", self._last_id, None
                                )
                            )
                        else:
                            for line in block.split(b"\n"):
                                self._line(line, events)
                            self._line(b"", events)
                lines = buf.split(b"\n")
                rest = lines.pop()
                for line in lines:
                    self._line(line, events)
            else:
                rest = b""
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
                        rest = buf[pos:]
                        break
            if rest:
                if len(rest) > self._max_line:
                    raise SSEProtocolError(
                        f"an SSE line grew past {self._max_line} bytes without ending"
                    )
                pend += rest
        except SSEProtocolError as exc:
            exc.events = events  # completed before the error: the caller handles them first
            raise
        self._clean = (
            not self._pend
            and self._started
            and not self._skip_lf
            and not self._data
            and self._event is None
            and not self._event_bytes
        )
        return events

    def one_event(self, chunk: bytes) -> bytes | None:
        """The data of ``chunk`` when it is one whole one-line ``data:`` event and the decoder
        is between events with no cap near (the most common read of a token stream), as
        undecoded bytes, dispatched; None (nothing consumed) for anything else, which
        :meth:`feed` then decodes by the general rules. The value and the accounting are
        what :meth:`feed` gives the same bytes (``tests/stream/test_lane.py``). Where the lane
        does not take a read it pays 26,900 instructions a token on the emitter's chunk,
        30,900 on vLLM's (43-44 %; it is also the door to the dialect's reading from bytes:
        bench/RESULTS.md, "What each shortcut of the read path pays")."""
        # (Slices and `int in bytes`, a memchr: CPython 3.11's bytes.find and endswith parse
        # their arguments as a tuple, which costs more than the search.)
        if (
            self._clean
            and chunk[:5] == b"data:"
            and chunk[-2:] == b"\n\n"
            and len(chunk) - 2 < self._fast_cap
        ):
            value = chunk[6:-2] if chunk[5:6] == b" " else chunk[5:-2]
            if 10 not in value and 13 not in value:  # LF, CR: one line, the blank line after
                return value
        return None

    def _line(self, line: bytes, events: list[SSEEvent]) -> None:
        if len(line) > self._max_line:
            raise SSEProtocolError(f"an SSE line grew past {self._max_line} bytes")
        if not line and self._data:
            data = b"\n".join(self._data).decode("utf-8", "replace")
            name = self._event.decode("utf-8", "replace") if self._event else "message"
            events.append(SSEEvent(data, name or "message", self._last_id, self._retry))
            self._event_bytes = 0
        else:
            size = self._event_bytes + len(line) + 1
            if size > self._max_event:
                if self._data:
                    raise SSEProtocolError(f"an SSE event grew past {self._max_event} bytes")
                raise SSEProtocolError(f"{self._max_event} bytes of SSE lines without an event")
            self._event_bytes = size
        if not line:
            self._data = []
            self._event = None
            self._retry = None
            return
        if line[0] == 0x3A:  # ":" comment
            self.comments += 1
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
        elif field == b"event":
            self._event = value
        elif field == b"id":
            if b"\x00" not in value:
                self._last_id = value.decode("utf-8", "replace")
        elif field == b"retry" and value.isdigit() and len(value) <= MAX_RETRY_DIGITS:
            self._retry = int(value)
        # Any other field is ignored, as the standard says.
