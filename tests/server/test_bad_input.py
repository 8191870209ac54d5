"""Every bad input is a 4xx with the documented error JSON (WS: error frame + close 1008/1009),
never a 5xx and never a dead server."""

from __future__ import annotations

import json
import socket
import time
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from tests.server.conftest import Server

JSON = {"content-type": "application/json"}
OK_CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}

CASES: list[tuple[str, str, str, dict[str, str], bytes, int]] = [
    ("invalid json", "POST", "/v1/chat/completions", JSON, b"{not json", 400),
    ("not an object", "POST", "/v1/completions", JSON, b"[1, 2]", 400),
    ("binary garbage", "POST", "/v1/completions", JSON, bytes(range(256)), 400),
    ("deep json array", "POST", "/v1/completions", JSON, b"[" * 100_000, 400),
    (
        "deep json in a field",
        "POST",
        "/v1/chat/completions",
        JSON,
        b'{"messages": ' + b'{"a": ' * 50_000 + b"1" + b"}" * 50_000 + b"}",
        400,
    ),
    ("empty body", "POST", "/v1/stream", JSON, b"", 400),
    ("missing messages", "POST", "/v1/chat/completions", JSON, b'{"max_tokens": 3}', 400),
    ("empty messages", "POST", "/v1/chat/completions", JSON, b'{"messages": []}', 400),
    ("message not object", "POST", "/v1/chat/completions", JSON, b'{"messages": ["hi"]}', 400),
    ("missing prompt", "POST", "/v1/completions", JSON, b'{"max_tokens": 3}', 400),
    ("prompt wrong type", "POST", "/v1/stream", JSON, b'{"prompt": 5}', 400),
    ("max_tokens zero", "POST", "/v1/stream", JSON, b'{"prompt": "a", "max_tokens": 0}', 400),
    ("max_tokens huge", "POST", "/v1/stream", JSON, b'{"prompt": "a", "max_tokens": 100000}', 400),
    ("max_tokens string", "POST", "/v1/stream", JSON, b'{"prompt": "a", "max_tokens": "5"}', 400),
    ("max_tokens float", "POST", "/v1/stream", JSON, b'{"prompt": "a", "max_tokens": 2.5}', 400),
    ("temperature bad", "POST", "/v1/stream", JSON, b'{"prompt": "a", "temperature": "hot"}', 400),
    ("temperature range", "POST", "/v1/stream", JSON, b'{"prompt": "a", "temperature": 9}', 400),
    ("stream not bool", "POST", "/v1/stream", JSON, b'{"prompt": "a", "stream": "yes"}', 400),
    ("seed not int", "POST", "/v1/stream", JSON, b'{"prompt": "a", "seed": "x"}', 400),
    (
        "stream_options bad",
        "POST",
        "/v1/stream",
        JSON,
        b'{"prompt": "a", "stream_options": 1}',
        400,
    ),
    ("n > 1", "POST", "/v1/completions", JSON, b'{"prompt": "a", "n": 3}', 400),
    (
        "prompt too long",
        "POST",
        "/v1/stream",
        JSON,
        json.dumps({"prompt": "a" * 70000}).encode(),
        400,
    ),
    ("body too large", "POST", "/v1/stream", JSON, b'{"prompt": "' + b"a" * (1 << 21) + b'"}', 413),
    (
        "form content type",
        "POST",
        "/v1/stream",
        {"content-type": "application/x-www-form-urlencoded"},
        b"prompt=hi",
        415,
    ),
    (
        "text content type",
        "POST",
        "/v1/chat/completions",
        {"content-type": "text/plain"},
        b"{}",
        415,
    ),
    ("unknown route", "GET", "/v2/nothing", {}, b"", 404),
    ("unknown post route", "POST", "/v1/embeddings", JSON, b"{}", 404),
    ("wrong method", "GET", "/v1/chat/completions", {}, b"", 405),
    ("wrong method models", "DELETE", "/v1/models", {}, b"", 405),
]


@pytest.mark.parametrize(
    ("name", "method", "path", "headers", "body", "status"), CASES, ids=[c[0] for c in CASES]
)
def test_bad_http_input_is_4xx_json(
    fixed_server: Server,
    name: str,
    method: str,
    path: str,
    headers: dict[str, str],
    body: bytes,
    status: int,
) -> None:
    r = httpx.request(method, fixed_server.url + path, headers=headers, content=body, timeout=30)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["code"] == status and err["message"] and err["type"]
    # OpenAI's error object has a "param" on every error: the field at fault, else null
    assert err["param"] == PARAMS.get(name), err


#: The field each bad request names in its error's "param" (the rest have null).
PARAMS = {
    "missing messages": "messages",
    "empty messages": "messages",
    "message not object": "messages",
    "missing prompt": "prompt",
    "prompt wrong type": "prompt",
    "max_tokens zero": "max_tokens",
    "max_tokens huge": "max_tokens",
    "max_tokens string": "max_tokens",
    "max_tokens float": "max_tokens",
    "temperature bad": "temperature",
    "temperature range": "temperature",
    "stream not bool": "stream",
    "seed not int": "seed",
    "stream_options bad": "stream_options",
    "n > 1": "n",
    "prompt too long": "prompt",
}


def test_chunked_oversized_body_is_413(fixed_server: Server) -> None:
    def gen() -> Any:
        for _ in range(40):
            yield b"x" * 65536

    r = httpx.post(fixed_server.url + "/v1/stream", headers=JSON, content=gen(), timeout=30)
    assert r.status_code == 413 and r.json()["error"]["code"] == 413


def test_413_reaches_a_client_still_sending_its_body(fixed_server: Server) -> None:
    """The server answers an oversized body before reading it; a client still writing the rest
    when that answer comes finishes writing and reads the 413, not a reset (the server lingers:
    half-close, then reads and drops the rest). Before, the server closed at once and the
    client's next write got a reset, so a client slower than the server (a loaded machine)
    never read the 413."""
    body, first = 4 << 20, 512 << 10  # four times the limit; more than the server reads ahead
    with socket.create_connection(("127.0.0.1", fixed_server.port), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/stream HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n" % body + b"x" * first
        )
        sock.recv(1, socket.MSG_PEEK)  # the answer has come: the client is slower than the server
        time.sleep(0.2)  # and slower still: the server has closed (or half-closed) by now
        sent = first
        while sent < body:  # a reset here is the bug: HTTP clients send the body, then read
            sent += sock.send(b"x" * min(65536, body - sent))
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, payload = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413 "), data[:300]
    assert b"connection: close" in head.lower() and json.loads(payload)["error"]["code"] == 413


def _ws_refusal(server: Server, frame: str | bytes) -> tuple[dict[str, Any] | None, int | None]:
    with connect(server.ws_url, max_size=None) as ws:
        ws.send(frame)
        err = None
        try:
            while True:
                msg = ws.recv(timeout=10)
                err = json.loads(msg)
        except ConnectionClosed as exc:
            return err, exc.rcvd.code if exc.rcvd else None


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        ("{not json", 1008),
        ('{"messages": []}', 1008),
        ('{"prompt": "a", "max_tokens": -1}', 1008),
        ("[DONE]", 1008),
        ("[" * 100_000, 1008),
        (b"\x00\x01binary", 1008),
    ],
)
def test_bad_ws_frames_get_error_frame_and_close(
    fixed_server: Server, frame: str | bytes, code: int
) -> None:
    err, got = _ws_refusal(fixed_server, frame)
    assert got == code
    assert err is not None and err["error"]["code"] == 400


def test_oversized_ws_frame_is_1009(fixed_server: Server) -> None:
    _, got = _ws_refusal(fixed_server, json.dumps({"prompt": "a" * (2 << 20)}))
    assert got == 1009


def test_server_alive_after_bad_input(fixed_server: Server) -> None:
    r = httpx.post(fixed_server.url + "/v1/chat/completions", json=OK_CHAT, timeout=30)
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] <= 2
    assert fixed_server.proc.poll() is None
    metrics = httpx.get(fixed_server.url + "/metrics").text
    assert "streamslo_http_5xx_total{" not in metrics
