"""The transports against hostile servers: what ends a stream, what is never followed, and
what is bounded (real sockets; tiny raw servers where the faulty server has no such case)."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from streamslo.errors import HTTPProtocolError
from streamslo.stream.caps import ERROR_BODY_WAIT_S
from streamslo.stream.timing import StreamExpectations, StreamRecord
from streamslo.stream.tracker import StreamTracker
from streamslo.transport.common import guard
from streamslo.transport.fetch import fetch
from streamslo.transport.sync import Target
from tests.stream.feed import Feed
from tests.stream.test_faulty_matrix import run_case


class RawServer:
    """Accepts connections on 127.0.0.1 and answers each with ``respond(conn, request)``;
    records every request head it read."""

    def __init__(self, respond: Callable[[socket.socket, bytes], None]) -> None:
        self.respond = respond
        self.requests: list[bytes] = []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self._stop = False
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self) -> None:
        self.sock.settimeout(0.1)
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(5)
            head = b""
            while b"\r\n\r\n" not in head:
                piece = conn.recv(4096)
                if not piece:
                    return
                head += piece
            self.requests.append(head)
            with contextlib.suppress(OSError):  # the client left first
                self.respond(conn, head)

    def close(self) -> None:
        self._stop = True
        self.sock.close()


@pytest.fixture
def servers() -> Iterator[Callable[[Callable[[socket.socket, bytes], None]], RawServer]]:
    made: list[RawServer] = []

    def make(respond: Callable[[socket.socket, bytes], None]) -> RawServer:
        made.append(RawServer(respond))
        return made[-1]

    yield make
    for s in made:
        s.close()


def _json(conn: socket.socket, status: int, obj: object) -> None:
    body = json.dumps(obj).encode()
    conn.sendall(
        b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
        % (status, len(body))
        + body
    )


# --- /v1/models: no redirect, bounded ----------------------------------------------------------


def test_models_redirect_is_not_followed_and_the_key_stays_home(servers):
    """urllib followed the redirect and sent Authorization to the other host."""
    elsewhere = servers(lambda conn, req: _json(conn, 200, {"data": [{"id": "stolen"}]}))

    def redirect(conn: socket.socket, req: bytes) -> None:
        location = f"http://127.0.0.1:{elsewhere.port}/v1/models".encode()
        conn.sendall(
            b"HTTP/1.1 302 Found\r\nLocation: " + location + b"\r\nContent-Length: 0\r\n\r\n"
        )

    home = servers(redirect)
    code = (
        "from streamslo.loadgen.streams import _first_model\n"
        "from streamslo.transport.sync import Target\n"
        f"t = Target.from_url('http://127.0.0.1:{home.port}', headers={{'Authorization': 'Bearer s3cret'}})\n"
        "print(repr(_first_model(t)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "(None, None)"
    assert "302" in out.stderr  # the warning says why no model name is sent
    assert len(home.requests) == 1 and b"Bearer s3cret" in home.requests[0]
    assert elsewhere.requests == []


def test_fetch_reads_the_first_model(servers):
    srv = servers(lambda conn, req: _json(conn, 200, {"data": [{"id": "m1"}, {"id": "m2"}]}))
    status, body = fetch(
        Target.from_url(f"http://127.0.0.1:{srv.port}/api", headers={"X-K": "v"}), "/v1/models"
    )
    assert status == 200 and json.loads(body)["data"][0]["id"] == "m1"
    assert (
        srv.requests[0].startswith(b"GET /api/v1/models HTTP/1.1\r\n")
        and b"X-K: v" in srv.requests[0]
    )


def test_fetch_is_bounded_in_size_and_time(servers):
    def huge(conn: socket.socket, req: bytes) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 50000000\r\n\r\n")
        block = b"x" * 65536
        for _ in range(800):
            conn.sendall(block)

    def drip(conn: socket.socket, req: bytes) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
        for _ in range(1000):
            conn.sendall(b"x")
            time.sleep(0.05)

    with pytest.raises(HTTPProtocolError, match="larger than"):
        fetch(Target.from_url(f"http://127.0.0.1:{servers(huge).port}"), "/v1/models")
    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        fetch(Target.from_url(f"http://127.0.0.1:{servers(drip).port}"), "/v1/models", timeout=0.5)
    assert time.monotonic() - t0 < 2.0


# --- guard: only the load test's own stop is "cancelled" -----------------------------------------


def _tracker() -> StreamTracker:
    rec = StreamRecord("g", "sse", "T", 0.0, time.perf_counter())
    tracker = Feed(StreamTracker(rec, StreamExpectations(max_tokens=3)))
    tracker.on_response(time.perf_counter(), 200, "text/event-stream")
    return tracker


@pytest.mark.parametrize(
    "exc",
    [
        ValueError("x" * 9000),
        RecursionError(),
        OverflowError(),
        UnicodeDecodeError("utf-8", b"\xff", 0, 1, "bad"),
        MemoryError(),
    ],
)
def test_any_exception_from_reading_is_malformed_not_cancelled(exc):
    """Before, anything but four exception types became ``cancelled`` and killed the user."""
    tracker = _tracker()

    def run() -> None:
        raise exc

    guard(tracker, run)  # does not raise
    assert tracker.rec.outcome == "malformed"
    assert tracker.rec.error.startswith(type(exc).__name__)
    assert len(tracker.rec.error) <= 300


@pytest.mark.parametrize("exc_type", [KeyboardInterrupt, SystemExit])
def test_the_load_test_stopping_is_cancelled_and_propagates(exc_type):
    from greenlet import GreenletExit

    for kind in (exc_type, GreenletExit):
        tracker = _tracker()

        def run(kind: type[BaseException] = kind) -> None:
            raise kind()

        with pytest.raises(kind):
            guard(tracker, run)
        assert tracker.rec.outcome == "cancelled"


def test_transport_errors_keep_their_meaning():
    tracker = _tracker()

    def reset() -> None:
        raise ConnectionResetError("peer reset")

    guard(tracker, reset)
    assert tracker.rec.outcome == "truncated"


# --- error bodies are bounded in time ----------------------------------------------------------------


@pytest.mark.parametrize("proto", ["sse", "ws"])
def test_a_dripped_error_body_does_not_hold_the_stream(faulty_server, proto):
    t0 = time.monotonic()
    rec = run_case(faulty_server.base_url, "error_body_drip", proto)
    assert rec.outcome == "http_5xx"
    assert time.monotonic() - t0 < ERROR_BODY_WAIT_S + 1.0


# --- a kept-alive connection with stray bytes is not reused ----------------------------------------


@pytest.mark.parametrize("proto", ["sse", "ws"])
def test_stray_bytes_on_an_idle_connection_do_not_become_the_next_answer(faulty_server, proto):
    """A server that sends data after a complete answer: that request is ok; the next one must
    not read the stray bytes as its answer (the connection is replaced, not reused)."""
    from streamslo.transport.sync import ClientLimits, SSEConnection, WSConnection
    from streamslo.workload.requests import RequestOptions, build_body

    limits = ClientLimits(stall_timeout=2.0, request_timeout=5.0)
    target = Target.from_url(faulty_server.base_url)
    conn = (
        WSConnection(target, "/v1/ws", limits) if proto == "ws" else SSEConnection(target, limits)
    )
    outcomes = []
    try:
        for model in ("stray_after_done", "ok", "ok"):
            opts = RequestOptions(model=model, max_tokens=4)
            rec = StreamRecord(model, proto, "T", time.time(), time.perf_counter())
            tracker = StreamTracker(rec, opts.expectations())
            if isinstance(conn, WSConnection):
                conn.request(build_body(opts, "hi"), tracker)
            else:
                conn.request(opts.path, build_body(opts, "hi"), tracker)
            outcomes.append((rec.outcome, rec.connect_s is not None))
            time.sleep(0.3)  # the stray bytes arrive meanwhile
    finally:
        conn.close()
    assert [o for o, _ in outcomes] == ["ok", "ok", "ok"]
    assert outcomes[1][1]  # a fresh connection after the stray bytes
    assert not outcomes[2][1]  # and that one is reused


# --- TLS to a port that never answers it -------------------------------------------------------

_GEVENT_TLS = """
from gevent import monkey

monkey.patch_all()

import sys, time

from streamslo.transport.common import ClientLimits, connect
from streamslo.transport.sync import Target
from tests.stream.feed import Feed

t = time.perf_counter()
try:
    connect(Target.from_url(sys.argv[1]), ClientLimits(connect_timeout=5.0, tls_timeout=0.5))
except OSError as exc:
    print(f"{type(exc).__name__}|{exc}|{time.perf_counter() - t:.2f}")
"""


def test_a_tls_handshake_that_gets_no_answer_fails_in_its_own_time_saying_so(servers):
    """``https://`` to a plain-HTTP port: the server waits for a request head that a TLS hello
    never completes. The handshake gives up after ``tls_timeout`` (not the connect timeout),
    and says what happened, under the plain sockets and under gevent's (Locust's)."""
    from streamslo.transport.common import ClientLimits
    from streamslo.transport.sse import stream_sse

    plain = servers(lambda conn, head: conn.sendall(b"HTTP/1.1 404 X\r\nContent-Length: 0\r\n\r\n"))
    url = f"https://127.0.0.1:{plain.port}"
    rec = StreamRecord(stream_id="s", protocol="sse", user_class="U", started_at=0.0, t0=0.0)
    tracker = Feed(StreamTracker(rec, StreamExpectations(max_tokens=4)))
    limits = ClientLimits(connect_timeout=5.0, tls_timeout=0.5)
    t = time.perf_counter()
    guard(
        tracker,
        lambda: stream_sse(Target.from_url(url), "/v1/chat/completions", b"{}", tracker, limits),
    )
    took = time.perf_counter() - t
    assert rec.outcome == "connect_error", rec
    assert rec.error.startswith("SSLError: the server did not answer TLS within 0.5 s"), rec.error
    assert 0.4 < took < 3.0, took  # its own bound: not the 5 s connect timeout
    child = subprocess.run(
        [sys.executable, "-c", _GEVENT_TLS, url], capture_output=True, text=True, timeout=60
    )
    kind, message, seconds = child.stdout.strip().split("|")
    assert kind == "SSLError" and message.startswith("the server did not answer TLS within 0.5 s")
    assert 0.4 < float(seconds) < 3.0, child.stdout + child.stderr


def test_a_tls_server_that_answers_is_read_and_its_certificate_checked(tmp_path):
    """The handshake, now bounded on its own, still completes against a TLS server, and still
    refuses a certificate nobody vouches for unless ``insecure``."""
    import shutil
    import ssl

    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("no openssl to make a test certificate")
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        [
            openssl,
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    body = b'{"data":[{"id":"tls-ok"}]}'

    def answer(conn: socket.socket) -> None:
        with contextlib.suppress(OSError), ctx.wrap_socket(conn, server_side=True) as tls:
            head = b""
            while b"\r\n\r\n" not in head:
                head += tls.recv(4096)
            tls.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)

    listener = socket.create_server(("127.0.0.1", 0))

    def loop() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = listener.accept()
                threading.Thread(target=answer, args=(conn,), daemon=True).start()

    threading.Thread(target=loop, daemon=True).start()
    url = f"https://127.0.0.1:{listener.getsockname()[1]}"
    try:
        assert fetch(Target.from_url(url, insecure=True), "/v1/models", timeout=5) == (200, body)
        with pytest.raises(ssl.SSLCertVerificationError):
            fetch(Target.from_url(url), "/v1/models", timeout=5)
    finally:
        listener.close()
