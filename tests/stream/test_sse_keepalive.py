"""SSE requests share one HTTP/1.1 connection (keep-alive); a server that closes an idle
connection between requests costs a transparent retry, never a failed stream."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from streamslo.stream.timing import StreamRecord
from streamslo.stream.tracker import StreamTracker
from streamslo.transport.sync import ClientLimits, SSEConnection, Target
from streamslo.workload.requests import RequestOptions, build_body


def _response(n: int) -> bytes:
    events = b""
    for i in range(n):
        choice = {
            "index": 0,
            "delta": {"content": f" t{i}"},
            "finish_reason": "length" if i == n - 1 else None,
        }
        obj: dict = {"choices": [choice]}
        if i == n - 1:
            obj["usage"] = {"completion_tokens": n}
        events += b"data: " + json.dumps(obj).encode() + b"\n\n"
    events += b"data: [DONE]\n\n"
    chunk = b"%x\r\n%s\r\n0\r\n\r\n" % (len(events), events)
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        + chunk
    )


@pytest.fixture
def server():
    """Answers requests; with ``state['close_after'] = True`` it closes after each response."""
    state = {"connections": 0, "close_after": False}
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(16)
    state["port"] = lsock.getsockname()[1]

    def handle(conn: socket.socket) -> None:
        with conn:
            buf = b""
            while True:
                while b"\r\n\r\n" not in buf:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buf += data
                head, _, rest = buf.partition(b"\r\n\r\n")
                length = int(
                    next(
                        h.split(b":")[1]
                        for h in head.split(b"\r\n")
                        if h.lower().startswith(b"content-length")
                    )
                )
                while len(rest) < length:
                    rest += conn.recv(65536)
                buf = rest[length:]
                conn.sendall(_response(3))
                if state["close_after"]:
                    return

    def accept() -> None:
        while True:
            try:
                conn, _ = lsock.accept()
            except OSError:
                return
            state["connections"] += 1
            threading.Thread(target=handle, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield state
    lsock.close()


def _run(state, n: int) -> list[StreamRecord]:
    opts = RequestOptions(max_tokens=3)
    conn = SSEConnection(
        Target.from_url(f"http://127.0.0.1:{state['port']}"),
        ClientLimits(stall_timeout=2, request_timeout=5),
    )
    out = []
    try:
        for i in range(n):
            rec = StreamRecord(f"r{i}", "sse", "T", time.time(), time.perf_counter())
            conn.request(opts.path, build_body(opts, "hi"), StreamTracker(rec, opts.expectations()))
            out.append(rec)
            time.sleep(0.05 if i % 2 else 0.0)
    finally:
        conn.close()
    return out


def test_one_connection_carries_every_stream(server):
    recs = _run(server, 5)
    assert [r.outcome for r in recs] == ["ok"] * 5
    assert server["connections"] == 1
    assert recs[0].connect_s is not None and all(r.connect_s is None for r in recs[1:])


def test_server_closing_idle_connections_is_not_a_failure(server):
    server["close_after"] = True
    recs = _run(server, 5)
    assert [r.outcome for r in recs] == ["ok"] * 5, [r.error for r in recs]
    assert server["connections"] == 5
