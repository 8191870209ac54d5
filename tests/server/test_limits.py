"""The server's limits, on a real socket: head and body timeouts (slowloris), the body cap,
the connection cap."""

from __future__ import annotations

import json
import socket
import time

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from tests.server.conftest import Server
from tests.server.streams import closed_by_peer, raw_request, read_response, sse

BODY = json.dumps({"prompt": "hi", "max_tokens": 2}).encode()
HEAD = (
    b"POST /v1/stream HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
    b"content-length: %d\r\n\r\n"
)


@pytest.fixture(scope="module")
def tight(tmp_path_factory: pytest.TempPathFactory) -> Server:
    """A server with small limits, shared by this module's tests."""
    from tests.server.conftest import start_server

    s = start_server(
        [
            "--header-timeout",
            "1",
            "--body-timeout",
            "1",
            "--max-body-bytes",
            "4096",
            "--max-connections",
            "6",
            "--keep-alive",
            "30",
        ],
        tmp_path_factory.mktemp("tight"),
    )
    yield s
    s.stop()


def _dribble(sock: socket.socket, data: bytes, every: float, until: float) -> None:
    """Send ``data`` a byte at a time, one every ``every`` seconds, until cut or ``until``."""
    for b in data:
        if time.monotonic() > until:
            return
        try:
            sock.sendall(bytes([b]))
        except OSError:
            return  # cut: what we wanted
        time.sleep(every)


def test_a_dribbled_head_is_cut_with_408(tight: Server) -> None:
    with socket.create_connection(("127.0.0.1", tight.port)) as sock:
        t0 = time.monotonic()
        sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n")
        _dribble(sock, b"x-slow: " + b"a" * 100, every=0.1, until=t0 + 2.5)
        res = read_response(sock, t0)
    assert res.status == 408 and res.error()["code"] == 408
    assert "connection: close" in res.head
    assert 0.9 < res.elapsed < 4, res.elapsed


def test_an_idle_connection_is_closed_quietly(tight: Server) -> None:
    with socket.create_connection(("127.0.0.1", tight.port)) as sock:
        t0 = time.monotonic()
        assert closed_by_peer(sock, timeout=6)
    assert time.monotonic() - t0 < 4


def test_the_head_timer_rearms_for_the_next_request_on_a_connection(tight: Server) -> None:
    with socket.create_connection(("127.0.0.1", tight.port)) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        assert read_response(sock, time.monotonic()).status == 200
        t0 = time.monotonic()
        sock.sendall(b"GET /healthz HTTP/1.1\r\n")  # the next head, never finished
        res = read_response(sock, t0)
    assert res.status == 408 and res.elapsed < 4, res


def test_a_dribbled_body_is_cut_with_408(tight: Server) -> None:
    with socket.create_connection(("127.0.0.1", tight.port)) as sock:
        t0 = time.monotonic()
        sock.sendall(HEAD % 100 + b'{"prompt"')
        res = read_response(sock, t0)
        assert closed_by_peer(sock, timeout=5)  # the rest of the body can never follow
    assert res.status == 408 and res.error()["code"] == 408
    assert 0.9 < res.elapsed < 4, res.elapsed


def test_body_cap_is_413_and_ws_message_cap_1009(tight: Server) -> None:
    big = json.dumps({"prompt": "a" * 5000}).encode()
    res = raw_request(tight.port, HEAD % len(big) + big)
    assert res.status == 413 and res.error()["code"] == 413
    with connect(f"ws://127.0.0.1:{tight.port}/v1/ws", max_size=None) as ws:
        ws.send(big.decode())
        err = json.loads(ws.recv(timeout=10))["error"]
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
    assert err["code"] == 413 and "4096-byte limit" in err["message"]
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009
    assert sse(
        tight.url, "/v1/stream", {"prompt": "a" * 3000, "max_tokens": 2}
    ).done  # under the cap


def test_connection_cap_refuses_with_503_and_1013_then_recovers(tight: Server) -> None:
    held = [socket.create_connection(("127.0.0.1", tight.port)) for _ in range(6)]
    try:
        time.sleep(0.2)
        res = raw_request(tight.port, b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        assert res.status == 503 and res.error()["code"] == 503
        assert "retry-after: 1" in res.head and "connection: close" in res.head
        with connect(f"ws://127.0.0.1:{tight.port}/v1/ws") as ws:
            err = json.loads(ws.recv(timeout=10))
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv(timeout=10)
        assert err["error"]["code"] == 503
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1013
    finally:
        for sock in held:
            sock.close()
    time.sleep(0.3)
    assert httpx.get(tight.url + "/healthz", timeout=10).status_code == 200
    metrics = httpx.get(tight.url + "/metrics", timeout=10).text
    assert 'streamslo_connections_refused_total{reason="over_capacity"} 2.0' in metrics
    assert "streamslo_http_5xx_total{" not in metrics  # refusals for load are not server faults
