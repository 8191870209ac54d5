"""The preflight names only what the bytes show: a server that spoke HTTP and broke an answer
gets up to three tries and the run goes on; TLS on a plain port, or bytes that are not HTTP,
stop it with that cause. Real loopback sockets, a scripted raw server."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress

import pytest

from streamslo.run.preflight import PREFLIGHT_TRIES, PreflightFailed, preflight
from streamslo.workload.requests import RequestOptions

BROKEN = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: -5\r\n\r\n"
TLS_ALERT = b"\x15\x03\x01\x00\x02\x02\x46"  # what a TLS server answers to plain bytes
NOT_HTTP = b"SSH-2.0-OpenSSH_9.2\r\n"


def _good_stream() -> bytes:
    chunks = [
        {"choices": [{"index": 0, "delta": {"content": f" t{i}"}, "finish_reason": None}]}
        for i in range(4)
    ]
    chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
    body = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks)
    body += b"data: [DONE]\n\n"
    head = (
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


@contextmanager
def scripted(answers: list[bytes], then: bytes) -> Iterator[tuple[str, list[bytes]]]:
    """A server whose n-th POST gets ``answers[n]`` (then ``then``); GETs (the model list, the
    first-bytes look) get ``then`` if it is not HTTP, else an empty model list."""
    seen: list[bytes] = []
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    srv.settimeout(0.1)  # (accept wakes to see the stop)
    stop = threading.Event()

    def serve() -> None:
        posts = 0
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn:
                conn.settimeout(2)
                try:
                    data = conn.recv(65536)
                except OSError:
                    continue
                seen.append(data[:4])
                if data.startswith(b"POST"):
                    reply = answers[posts] if posts < len(answers) else then
                    posts += 1
                elif then.startswith(b"HTTP/"):
                    body = b'{"object": "list", "data": []}'
                    reply = (
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                        + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                        + body
                    )
                else:
                    reply = then
                with suppress(OSError):
                    conn.sendall(reply)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{srv.getsockname()[1]}", seen
    finally:
        stop.set()
        srv.close()
        thread.join(timeout=5)


REQ = RequestOptions(model="m", max_tokens=4)


def test_one_broken_answer_then_good_ones_goes_on_with_a_warning():
    with scripted([BROKEN], _good_stream()) as (url, _):
        results = preflight(url, ["sse"], REQ)
    (result,) = results
    assert result.record.outcome == "ok"
    assert result.diagnosis is not None and not result.diagnosis.fatal
    assert "1 of 2 preflight answers were broken HTTP" in result.diagnosis.cause
    assert "Content-Length" in result.diagnosis.cause


def test_every_answer_broken_is_still_a_server_to_measure():
    with scripted([], BROKEN) as (url, seen):
        (result,) = preflight(url, ["sse"], REQ)
    assert result.diagnosis is not None and not result.diagnosis.fatal
    assert f"{PREFLIGHT_TRIES} of {PREFLIGHT_TRIES} preflight answers" in result.diagnosis.cause
    assert sum(1 for s in seen if s == b"POST") == PREFLIGHT_TRIES


@pytest.mark.parametrize(
    ("answer", "cause", "fix"),
    [
        (TLS_ALERT, "answered with TLS", "use https://"),
        (NOT_HTTP, "not HTTP", "something other than an HTTP server"),
    ],
)
def test_an_answer_that_is_not_http_stops_the_run_naming_what_the_bytes_show(answer, cause, fix):
    with scripted([], answer) as (url, seen), pytest.raises(PreflightFailed) as err:
        preflight(url, ["sse"], REQ)
    message = str(err.value)
    assert cause in message and fix in message
    if answer is NOT_HTTP:
        assert "https" not in message  # the bytes are not TLS: no https advice
    assert sum(1 for s in seen if s == b"POST") == 1  # a wrong target gets no second try
