"""Every bad input is a 4xx with the documented error JSON (WS: error frame + close 1008/1009),
never a 5xx and never a dead server: asked of the app in this process (tests/server/inprocess.py).
A body still being sent when its 413 comes and the WebSocket message limit (the protocol
layer's) need a real socket: test_hardening.py, test_limits.py."""

from __future__ import annotations

import json
from typing import Any

import pytest
from starlette.testclient import TestClient

from tests.server.inprocess import ws_refusal

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
    fixed_app: TestClient,
    name: str,
    method: str,
    path: str,
    headers: dict[str, str],
    body: bytes,
    status: int,
) -> None:
    r = fixed_app.request(method, path, headers=headers, content=body)
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


def test_chunked_oversized_body_is_413(fixed_app: TestClient) -> None:
    def gen() -> Any:
        for _ in range(40):
            yield b"x" * 65536

    r = fixed_app.post("/v1/stream", headers=JSON, content=gen())
    assert r.status_code == 413 and r.json()["error"]["code"] == 413


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
    fixed_app: TestClient, frame: str | bytes, code: int
) -> None:
    err, got = ws_refusal(fixed_app, frame)
    assert got == code
    assert err is not None and err["error"]["code"] == 400


def test_server_alive_after_bad_input(fixed_app: TestClient) -> None:
    r = fixed_app.post("/v1/chat/completions", json=OK_CHAT)
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] <= 2
    metrics = fixed_app.get("/metrics").text
    assert "streamslo_http_5xx_total{" not in metrics
