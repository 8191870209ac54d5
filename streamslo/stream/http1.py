"""A small, strict, Sans-I/O HTTP/1.1 response reader: the status line, the headers, then
the body de-framed by one reader per framing (chunked, Content-Length, or until close).

Why our own: a load generator that times tokens needs one timestamp per socket read and must
tell an unfinished chunked body (a cut stream) from a clean end. Generic clients either buffer
(``iter_content``) or hide the difference.

Strict where a lenient parser would hang or lie (RFC 9112): a status code is exactly three
digits; a header name is a token with no space before its colon; no control character but
HTAB in a line (so no NUL, no lone CR); Content-Length is
``1*DIGIT`` (at most 18), once; Transfer-Encoding is exactly ``chunked`` and never comes with
Content-Length; chunk sizes are ``1*HEXDIG`` (at most 16). Lenient where real servers differ
harmlessly: a bare LF ends a line, a missing reason phrase, empty lines before the status line,
and an obsolete line fold (a header line that starts with a space or tab), which RFC 9112 §5.2
asks a user agent to read as one space; a fold with no header line before it is an error.
Interim (1xx) heads are skipped in a loop, at most :data:`~streamslo.stream.caps.MAX_INTERIM_RESPONSES`
of them. Anything else raises :class:`~streamslo.errors.HTTPProtocolError`.

Work is linear in the bytes fed: the head buffer is searched only where it was not searched
before, and a body is handed to its framing reader without copying what came before.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum

from streamslo.errors import HTTPProtocolError
from streamslo.stream._framing import BodyReader, ChunkedReader, CloseReader, LengthReader
from streamslo.stream.caps import MAX_CONTENT_LENGTH_DIGITS, MAX_HEAD_BYTES, MAX_INTERIM_RESPONSES

__all__ = [
    "Framing",
    "HTTPProtocolError",
    "ReaderState",
    "ResponseHead",
    "ResponseReader",
    "build_request",
]

# HTTP-version SP 3DIGIT [ SP reason-phrase ], the reason without control characters but HTAB.
_STATUS_LINE = re.compile(rb"HTTP/1\.[0-9] ([0-9]{3})(?: ([\t\x20-\x7e\x80-\xff]*))?")
# field-name ":" OWS field-value OWS (the value's outer whitespace is stripped afterwards).
_FIELD_LINE = re.compile(rb"([!#$%&'*+\-.^_`|~0-9A-Za-z]+):([\t\x20-\x7e\x80-\xff]*)")
_CONTENT_LENGTH = re.compile(rb"[0-9]{1,%d}" % MAX_CONTENT_LENGTH_DIGITS)


def _unfold(lines: list[bytes]) -> list[bytes]:
    """Header lines with each obsolete fold (a line that starts with SP or HTAB) joined to the
    line before it by one space (RFC 9112 §5.2); a fold right after the status line has no
    field to continue (RFC 9112 §2.2 lets a recipient reject it, and we do)."""
    if not any(line[:1] in (b" ", b"\t") for line in lines):
        return lines
    out: list[bytes] = []
    for line in lines:
        if line[:1] in (b" ", b"\t"):
            if not out:
                raise HTTPProtocolError(f"a folded line with no header before it: {line[:80]!r}")
            out[-1] = out[-1].rstrip(b" \t") + b" " + line.strip(b" \t")
        else:
            out.append(line)
    return out


class ReaderState(Enum):
    """Where a :class:`ResponseReader` is."""

    HEAD = "head"
    """Reading a head (interim heads included)."""
    BODY = "body"
    """The final head arrived; de-framing the body."""
    DONE = "done"
    """The body ended as its framing says, or the response has none."""


class Framing(Enum):
    """How the body of the final response is delimited."""

    NONE = "none"
    """No body: 101, 204, 304."""
    CHUNKED = "chunked"
    LENGTH = "content-length"
    CLOSE = "close"
    """No framing: the body ends when the server closes the connection."""


_BODY = ReaderState.BODY  # (read per event on the hot path)


@dataclass(frozen=True, slots=True)
class ResponseHead:
    """A response's status line and headers (names lower-cased; repeated fields joined)."""

    status: int
    reason: str
    headers: dict[str, str] = field(default_factory=dict)
    raw: bytes = b""
    """The head's bytes as received, its blank line included (at most 64 KiB)."""

    @property
    def content_type(self) -> str | None:
        return self.headers.get("content-type")


def build_request(
    method: str,
    host: str,
    path: str,
    body: bytes,
    headers: dict[str, str],
    keep_alive: bool = False,
) -> bytes:
    """Serialise an HTTP/1.1 request (``Connection: close`` unless ``keep_alive``).

    ``Content-Length`` is sent for a body or a method that carries one (not for ``GET``).
    """
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    if body or method not in ("GET", "HEAD"):
        lines.append(f"Content-Length: {len(body)}")
    lines += [*([] if keep_alive else ["Connection: close"]), "", ""]
    return "\r\n".join(lines).encode("latin-1") + body


class ResponseReader:
    """Feed bytes as read; get the head once, then de-framed body bytes.

    After :meth:`feed`, check :attr:`head` (set once the final head is complete),
    :attr:`complete` (the body's framing ended) and use the returned body bytes. Bytes after
    the end of the response (the frames after a ``101``, or a server's garbage after a body)
    are in :attr:`trailing_data`.
    """

    __slots__ = (
        "_body",
        "_buf",
        "_head_start",
        "_line_start",
        "_lines",
        "_scan",
        "framing",
        "head",
        "interim",
        "state",
        "trailing_data",
    )

    def __init__(self) -> None:
        self.state = ReaderState.HEAD
        self.head: ResponseHead | None = None
        self.framing = Framing.NONE
        self.interim = 0
        """Interim (1xx) heads skipped so far."""
        self.trailing_data = b""
        self._buf = bytearray()
        self._scan = 0  # _buf is searched for line ends up to here
        self._line_start = 0  # where the current head line starts in _buf
        self._head_start = 0  # where the current head starts in _buf
        self._lines: list[bytes] = []
        self._body: BodyReader | None = None

    @property
    def chunks(self) -> ChunkedReader | None:
        """The chunked body's reader while the body is being read (None otherwise): while it is
        :attr:`~ChunkedReader.between_chunks`, a caller that takes a read that is one whole
        chunk itself (:mod:`streamslo.stream.lane`) may skip :meth:`feed`."""
        body = self._body
        return body if self.state is _BODY and type(body) is ChunkedReader else None

    @property
    def complete(self) -> bool:
        """The response ended as its framing says (the chunked terminator, the whole
        Content-Length, or a response without a body)."""
        return self.state is ReaderState.DONE

    @property
    def framed_by_close(self) -> bool:
        """The body has no framing: it ends when the connection closes."""
        return self.framing is Framing.CLOSE

    def feed(self, data: bytes) -> bytes:
        """Consume bytes just read; return the body bytes they carry (possibly empty).

        Raises:
            HTTPProtocolError: the bytes break HTTP/1.1 or pass a cap.
        """
        state = self.state
        if state is _BODY:  # the hot path: inlined
            body = self._body
            assert body is not None
            out = body.feed(data)
            if body.done:
                self.state = ReaderState.DONE
                self._keep_trailing(body.trailing)
            return out
        if state is ReaderState.DONE:
            self._keep_trailing(data)
            return b""
        rest = self._feed_head(data)
        if not rest:
            return b""
        if self.state is ReaderState.BODY:
            assert self._body is not None
            return self._body_feed(self._body, rest)
        self.trailing_data = rest  # e.g. the first frames after a 101 (at most one read)
        return b""

    # ------------------------------------------------------------------ body
    def _body_feed(self, body: BodyReader, data: bytes) -> bytes:
        out = body.feed(data)
        if body.done:
            self.state = ReaderState.DONE
            self._keep_trailing(body.trailing)
        return out

    def _keep_trailing(self, data: bytes) -> None:
        if data and len(self.trailing_data) < MAX_HEAD_BYTES:
            self.trailing_data += data[: MAX_HEAD_BYTES - len(self.trailing_data)]

    # ------------------------------------------------------------------ head
    def _feed_head(self, data: bytes) -> bytes | None:
        """Add head bytes; return what follows the final head once it is complete."""
        buf = self._buf
        buf += data
        while True:
            nl = buf.find(b"\n", self._scan)
            if nl < 0:
                self._scan = len(buf)
                if len(buf) - self._head_start > MAX_HEAD_BYTES:
                    raise HTTPProtocolError(f"response head larger than {MAX_HEAD_BYTES} bytes")
                return None
            if nl + 1 - self._head_start > MAX_HEAD_BYTES:
                raise HTTPProtocolError(f"response head larger than {MAX_HEAD_BYTES} bytes")
            line = bytes(buf[self._line_start : nl])
            self._scan = self._line_start = nl + 1
            if line[-1:] == b"\r":
                line = line[:-1]
            if line:
                self._lines.append(line)
                continue
            if not self._lines:
                continue  # an empty line before the status line: tolerated
            head = self._parse_head(self._lines, bytes(buf[self._head_start : nl + 1]))
            self._lines = []
            self._head_start = nl + 1
            if 100 <= head.status < 200 and head.status != 101:
                self.interim += 1
                if self.interim > MAX_INTERIM_RESPONSES:
                    raise HTTPProtocolError(
                        f"more than {MAX_INTERIM_RESPONSES} interim (1xx) responses"
                    )
                continue
            self.head = head
            rest = bytes(buf[nl + 1 :])
            buf.clear()
            self._begin_body(head)
            return rest

    def _parse_head(self, lines: list[bytes], raw: bytes) -> ResponseHead:
        m = _STATUS_LINE.fullmatch(lines[0])
        if m is None:
            raise HTTPProtocolError(f"bad status line {lines[0][:80]!r}")
        headers: dict[str, str] = {}
        lengths: list[bytes] = []
        for line in _unfold(lines[1:]):
            f = _FIELD_LINE.fullmatch(line)
            if f is None:
                raise HTTPProtocolError(f"bad header line {line[:80]!r}")
            key = f.group(1).lower().decode("ascii")
            raw_value = f.group(2).strip(b" \t")
            if key == "content-length":
                lengths.append(raw_value)
            value = raw_value.decode("latin-1")
            headers[key] = f"{headers[key]}, {value}" if key in headers else value
        reason = (m.group(2) or b"").decode("latin-1")
        if len(lengths) > 1:
            raise HTTPProtocolError(f"duplicate Content-Length: {headers['content-length'][:80]!r}")
        if lengths and _CONTENT_LENGTH.fullmatch(lengths[0]) is None:
            raise HTTPProtocolError(f"bad Content-Length {lengths[0][:40]!r}")
        return ResponseHead(int(m.group(1)), reason, headers, raw)

    def _begin_body(self, head: ResponseHead) -> None:
        status, headers = head.status, head.headers
        te = headers.get("transfer-encoding")
        length = headers.get("content-length")
        if te is not None and length is not None:
            raise HTTPProtocolError("both Transfer-Encoding and Content-Length")
        if status < 200 or status in (204, 304):
            self.framing = Framing.NONE
            self.state = ReaderState.DONE
            return
        if te is not None:
            if [c.strip().lower() for c in te.split(",")] != ["chunked"]:
                raise HTTPProtocolError(f"unsupported Transfer-Encoding {te[:40]!r}")
            self.framing = Framing.CHUNKED
            self._body = ChunkedReader()
        elif length is not None:
            self.framing = Framing.LENGTH
            self._body = LengthReader(int(length))
        else:
            self.framing = Framing.CLOSE
            self._body = CloseReader()
        self.state = ReaderState.DONE if self._body.done else ReaderState.BODY
