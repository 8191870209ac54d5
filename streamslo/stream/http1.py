"""A small Sans-I/O HTTP/1.1 response reader: the status line, the headers, then the body
de-framed (chunked, Content-Length, or until close).

Why our own: a load generator that times tokens needs one timestamp per socket read and must
tell an unfinished chunked body (a cut stream) from a clean end. Generic clients either buffer
(``iter_content``) or hide the difference.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["HTTPProtocolError", "ResponseHead", "ResponseReader", "build_request"]

_MAX_HEAD = 64 * 1024
_MAX_CHUNK_LINE = 1024


class HTTPProtocolError(ValueError):
    """The server's bytes are not valid HTTP/1.1."""


@dataclass(frozen=True, slots=True)
class ResponseHead:
    """A response's status line and headers (names lower-cased)."""

    status: int
    reason: str
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def content_type(self) -> str | None:
        return self.headers.get("content-type")


def build_request(
    method: str, host: str, path: str, body: bytes, headers: dict[str, str], keep_alive: bool = False
) -> bytes:
    """Serialise an HTTP/1.1 request (``Connection: close`` unless ``keep_alive``)."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    lines += [f"Content-Length: {len(body)}", *([] if keep_alive else ["Connection: close"]), "", ""]
    return "\r\n".join(lines).encode("latin-1") + body


class ResponseReader:
    """Feed bytes as read; get the head once, then de-framed body bytes.

    After :meth:`feed`, check :attr:`head` (set once the headers are complete),
    :attr:`complete` (the body's framing ended) and use the returned body bytes.
    """

    __slots__ = ("_buf", "_chunk_left", "_mode", "_remaining", "_state", "complete", "head")

    def __init__(self) -> None:
        self._buf = b""
        self._state = "head"  # head | size | data | data_crlf | trailer | body | done
        self.head: ResponseHead | None = None
        self.complete = False
        self._mode = "close"  # chunked | length | close
        self._remaining = 0
        self._chunk_left = 0

    @property
    def framed_by_close(self) -> bool:
        """The body has no framing: it ends when the connection closes."""
        return self._mode == "close"

    def feed(self, data: bytes) -> bytes:
        """Consume bytes just read; return the body bytes they carry (possibly empty).

        Raises:
            HTTPProtocolError: the bytes break HTTP/1.1.
        """
        if self._state == "head":
            self._buf += data
            end = self._buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buf) > _MAX_HEAD:
                    raise HTTPProtocolError("response headers larger than 64 KiB")
                return b""
            head, rest = self._buf[:end], self._buf[end + 4 :]
            self._buf = b""
            self._parse_head(head)
            if self.head is not None and 100 <= self.head.status < 200 and self.head.status != 101:
                # An interim response (100 Continue, 103 Early Hints): the real one follows.
                self.head, self.complete, self._state = None, False, "head"
                return self.feed(rest)
            data = rest
        if self._state == "body":
            if self._mode == "length":
                data = data[: self._remaining]
                self._remaining -= len(data)
                if self._remaining <= 0:
                    self._state = "done"
                    self.complete = True
            return data
        if self._state == "done":
            return b""
        return self._dechunk(data)

    def _parse_head(self, raw: bytes) -> None:
        lines = raw.split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            raise HTTPProtocolError(f"bad status line: {lines[0][:80]!r}")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if not sep:
                raise HTTPProtocolError(f"bad header line: {line[:80]!r}")
            key = name.strip().lower().decode("latin-1")
            val = value.strip().decode("latin-1")
            headers[key] = f"{headers[key]}, {val}" if key in headers else val
        status = int(parts[1])
        self.head = ResponseHead(status, parts[2].decode("latin-1") if len(parts) > 2 else "", headers)
        te = headers.get("transfer-encoding", "").lower()
        if status in (204, 304) or 100 <= status < 200:
            self._state, self.complete = "done", True
        elif "chunked" in te:
            self._mode, self._state = "chunked", "size"
        elif "content-length" in headers:
            try:
                self._remaining = int(headers["content-length"])
            except ValueError:
                raise HTTPProtocolError("bad Content-Length") from None
            self._mode, self._state = "length", "body"
            if self._remaining == 0:
                self._state, self.complete = "done", True
        else:
            self._mode, self._state = "close", "body"

    def _dechunk(self, data: bytes) -> bytes:
        buf = self._buf + data if self._buf else data
        self._buf = b""
        out: list[bytes] = []
        pos, n = 0, len(buf)
        while pos < n:
            st = self._state
            if st == "data":
                take = min(self._chunk_left, n - pos)
                out.append(buf[pos : pos + take])
                pos += take
                self._chunk_left -= take
                if self._chunk_left == 0:
                    self._state = "data_crlf"
            elif st in ("size", "data_crlf", "trailer"):
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    if n - pos > _MAX_CHUNK_LINE:
                        raise HTTPProtocolError("chunk-size line too long")
                    self._buf = buf[pos:]
                    break
                line = buf[pos:eol]
                pos = eol + 2
                if st == "data_crlf":
                    if line:
                        raise HTTPProtocolError("chunk data not followed by CRLF")
                    self._state = "size"
                elif st == "size":
                    size_txt = line.split(b";", 1)[0].strip()
                    try:
                        size = int(size_txt, 16)
                    except ValueError:
                        raise HTTPProtocolError(f"bad chunk size {size_txt[:20]!r}") from None
                    if size == 0:
                        self._state = "trailer"
                    else:
                        self._chunk_left, self._state = size, "data"
                elif not line:  # end of trailers
                    self._state, self.complete = "done", True
                    break
            else:  # done
                break
        return b"".join(out)
