"""A small GET over the client's own transport (for ``/v1/models``): no redirect is followed,
the body is capped, the whole exchange has a deadline.

urllib, used before, follows redirects and sends the request's headers along, so an
``Authorization`` header could reach whatever host a server redirected to; and it reads a body
of any size for as long as the server drips it.
"""

from __future__ import annotations

from dataclasses import replace

from streamslo.errors import HTTPProtocolError
from streamslo.stream.http1 import ResponseReader, build_request
from streamslo.transport.common import ClientLimits, Target, connect, now, recv
from streamslo.transport.watchdog import WATCHDOG

__all__ = ["MAX_FETCH_BYTES", "fetch"]

#: The largest body :func:`fetch` accepts.
MAX_FETCH_BYTES = 1 << 20


def fetch(
    target: Target,
    path: str,
    timeout: float = 5.0,
    max_bytes: int = MAX_FETCH_BYTES,
    limits: ClientLimits | None = None,
    *,
    method: str = "GET",
    body: bytes | None = None,
) -> tuple[int, bytes]:
    """``GET`` ``path`` on ``target`` (its headers included) and read the whole answer
    (``method`` and a JSON ``body``: another request, e.g. ``POST /tokenize``).

    A redirect is returned as it is (status 3xx), never followed.

    Returns:
        The status and the (de-framed) body.

    Raises:
        TimeoutError: the answer did not complete within ``timeout`` seconds.
        HTTPProtocolError: the answer is not valid HTTP/1.1, or its body passed ``max_bytes``.
        OSError: the connection failed.
    """
    base = limits or ClientLimits()
    lim = replace(
        base, connect_timeout=min(base.connect_timeout, timeout), read_pause=0.0, rcvbuf=None
    )
    deadline = now() + timeout
    sock = connect(target, lim)
    watch = WATCHDOG.watch(sock, deadline, timeout)
    try:
        headers = {"Accept": "application/json", **target.headers}
        if body is not None:
            headers["Content-Type"] = "application/json"
        sock.sendall(
            build_request(method, target.host_header, target.prefix + path, body or b"", headers)
        )
        reader = ResponseReader()
        answer = bytearray()
        while not reader.complete:
            data = recv(sock, lim, watch)
            if data is None:
                raise TimeoutError(f"{method} {path}: no complete answer within {timeout:g}s")
            if not data:
                if reader.head is not None and reader.framed_by_close:
                    break
                raise ConnectionError(f"{method} {path}: the connection closed mid-answer")
            answer += reader.feed(data)
            if len(answer) > max_bytes:
                raise HTTPProtocolError(f"{method} {path}: answer larger than {max_bytes} bytes")
        assert reader.head is not None
        return reader.head.status, bytes(answer)
    finally:
        WATCHDOG.unwatch(watch)
        sock.close()
