"""One reader per HTTP/1.1 body framing (RFC 9112 §6-7): chunked, Content-Length, close.

Each reader takes the body's bytes as read and returns the payload they carry; ``done`` turns
True when the framing says the body ended, and ``trailing`` then holds the bytes read past
that end. The chunked reader parses strictly (``1*HEXDIG`` sizes, chunk extensions allowed,
CRLF after the data), keeps at most one line of its own framing pending (capped), and
searches only the bytes it has not searched before, so its work is linear in bytes read.
"""

from __future__ import annotations

import re
from enum import Enum

from streamslo.errors import HTTPProtocolError
from streamslo.stream.caps import MAX_CHUNK_LINE_BYTES, MAX_TRAILER_BYTES

__all__ = [
    "SIZE_LINES",
    "BodyReader",
    "ChunkState",
    "ChunkedReader",
    "CloseReader",
    "LengthReader",
]

# chunk-size [ BWS ";" chunk-ext ] with no control characters but HTAB (RFC 9112 §7.1).
_CHUNK_LINE = re.compile(rb"([0-9A-Fa-f]{1,16})[ \t]*(?:;[\t\x20-\x7e\x80-\xff]*)?")
_HEXDIGITS = b"0123456789abcdefABCDEF"
# A trailer field: a token, a colon, a value without control characters but HTAB.
_TRAILER_LINE = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+:[\t\x20-\x7e\x80-\xff]*")


class ChunkState(Enum):
    """Where a chunked body is."""

    SIZE = "size"
    """Reading a chunk-size line."""
    DATA = "data"
    """Inside a chunk's data."""
    DATA_END = "data_end"
    """Expecting the CRLF that ends a chunk's data."""
    TRAILER = "trailer"
    """After the last (0-size) chunk: trailer fields until an empty line."""
    DONE = "done"
    """The body ended cleanly."""


_SIZE = ChunkState.SIZE
SIZE_LINES = {form % n: n for n in range(1, 1 << 12) for form in (b"%x", b"%X")}
"""The size lines of a token's chunk (under 4 KiB) as servers write them (plain hex, no leading
zero, either case) and their sizes: a dict lookup in place of parsing the line."""


class BodyReader:
    """The interface of a framing reader."""

    __slots__ = ("done", "trailing")

    def __init__(self) -> None:
        self.done = False
        """The framing says the body ended."""
        self.trailing = b""
        """Bytes read past the end of the body (from the read that ended it)."""

    def feed(self, data: bytes) -> bytes:
        """Consume body bytes as read; return the payload they carry.

        Raises:
            HTTPProtocolError: the bytes break the framing or pass a cap.
        """
        raise NotImplementedError


class CloseReader(BodyReader):
    """A body with no framing: everything until the server closes (``done`` never turns)."""

    __slots__ = ()

    def feed(self, data: bytes) -> bytes:
        return data


class LengthReader(BodyReader):
    """A body of exactly ``Content-Length`` bytes."""

    __slots__ = ("_left",)

    def __init__(self, length: int) -> None:
        super().__init__()
        self._left = length
        self.done = length == 0

    def feed(self, data: bytes) -> bytes:
        if self.done:
            self.trailing += data[: max(0, MAX_TRAILER_BYTES - len(self.trailing))]
            return b""
        left = self._left
        if len(data) < left:
            self._left = left - len(data)
            return data
        self._left = 0
        self.done = True
        self.trailing = data[left:]
        return data[:left]


class ChunkedReader(BodyReader):
    """A ``Transfer-Encoding: chunked`` body."""

    __slots__ = ("_left", "_line", "_trailer_bytes", "state")

    def __init__(self) -> None:
        super().__init__()
        self.state = ChunkState.SIZE
        self._left = 0  # bytes of the current chunk's data still to come
        self._line = bytearray()  # an unfinished framing line (size, CRLF, trailer)
        self._trailer_bytes = 0

    @property
    def between_chunks(self) -> bool:
        """Between two chunks with nothing of a size line pending: a read that is one whole
        chunk may be taken without :meth:`feed` (:mod:`streamslo.stream.lane`)."""
        return self.state is _SIZE and not self._line

    def feed(self, data: bytes) -> bytes:
        if self.state is ChunkState.SIZE and not self._line:
            # Fast path, by far the most common: whole chunks ("size CRLF data CRLF"), a
            # token event each. A plain hex size is checked with two C calls, not a regex.
            nl = data.find(b"\n")
            if nl > 0:
                line = data[: nl - 1] if data[nl - 1] == 13 else data[:nl]  # 13: CR
                if 0 < len(line) <= 16 and not line.strip(_HEXDIGITS):
                    size = int(line, 16)
                    end = nl + 1 + size
                    if size and data[end : end + 2] == b"\r\n":
                        if end + 2 == len(data):
                            return data[nl + 1 : end]
                        return self._general(data, end + 2, [data[nl + 1 : end]])
        return self._general(data, 0, [])

    def _general(self, data: bytes, pos: int, out: list[bytes]) -> bytes:
        try:
            self._feed(data, pos, out)
        except HTTPProtocolError as exc:
            exc.payload = b"".join(out)  # what came before the error is processed first
            raise
        if len(out) == 1:
            return out[0]
        return b"".join(out)

    def _feed(self, data: bytes, pos: int, out: list[bytes]) -> None:
        n = len(data)
        line_buf = self._line
        while pos < n:
            st = self.state
            if st is ChunkState.DATA:
                end = pos + self._left
                if end >= n:  # the rest of this read is chunk data
                    out.append(data[pos:] if pos else data)
                    self._left -= n - pos
                    if not self._left:
                        self.state = ChunkState.DATA_END
                    break
                out.append(data[pos:end])
                pos = end
                self._left = 0
                self.state = ChunkState.DATA_END
                continue
            if st is ChunkState.DONE:
                self.trailing = data[pos:]
                break
            cap = (
                MAX_TRAILER_BYTES - self._trailer_bytes
                if st is ChunkState.TRAILER
                else MAX_CHUNK_LINE_BYTES
            )
            nl = data.find(b"\n", pos)
            if nl < 0:
                if len(line_buf) + n - pos > cap:
                    raise HTTPProtocolError(_too_long(st, cap))
                line_buf += data[pos:]
                break
            if len(line_buf) + nl - pos > cap:
                raise HTTPProtocolError(_too_long(st, cap))
            if line_buf:
                line_buf += data[pos:nl]
                line = bytes(line_buf)
                line_buf.clear()
            else:
                line = data[pos:nl]
            pos = nl + 1
            if line[-1:] == b"\r":
                line = line[:-1]
            if st is ChunkState.SIZE:
                if 0 < len(line) <= 16 and not line.strip(_HEXDIGITS):
                    size = int(line, 16)  # a plain hex size: two C calls, not the regex
                else:
                    m = _CHUNK_LINE.fullmatch(line)
                    if m is None:
                        raise HTTPProtocolError(f"bad chunk-size line {line[:40]!r}")
                    size = int(m.group(1), 16)
                if size:
                    end = pos + size
                    if data[end : end + 2] == b"\r\n":
                        # The whole chunk and its CRLF are in this read (a flood, a burst):
                        # taken at once, size line to size line.
                        out.append(data[pos:end])
                        pos = end + 2
                        continue
                    self._left = size
                    self.state = ChunkState.DATA
                else:
                    self.state = ChunkState.TRAILER
            elif st is ChunkState.DATA_END:
                if line:
                    raise HTTPProtocolError(f"chunk data longer than its size: {line[:40]!r}")
                self.state = ChunkState.SIZE
            elif not line:  # the empty line that ends the trailer section
                self.state = ChunkState.DONE
                self.done = True
                self.trailing = data[pos:]
                break
            else:
                if _TRAILER_LINE.fullmatch(line) is None:
                    raise HTTPProtocolError(f"bad trailer field {line[:40]!r}")
                self._trailer_bytes += len(line) + 2


def _too_long(state: ChunkState, cap: int) -> str:
    if state is ChunkState.TRAILER:
        return f"trailer section longer than {MAX_TRAILER_BYTES} bytes"
    if state is ChunkState.DATA_END:
        return "chunk data longer than its size"
    return f"chunk-size line longer than {cap} bytes"
