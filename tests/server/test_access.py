"""Who may call what: ``--api-key-env`` on ``/v1/*``, ``/debug/*`` for loopback or the key, the
warning when binding beyond loopback, and the key kept off command lines and the config. The
access guard is the app's: asked of the app in this process (tests/server/inprocess.py); the
Gunicorn workers reading the key themselves, on a real server."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Iterator

import httpx
import psutil
import pytest
from starlette.testclient import TestClient, WebSocketDenialResponse

from streamslo.server.access import is_loopback
from streamslo.server.launch import is_loopback_host, warn_if_exposed
from tests.server.conftest import ROOT
from tests.server.inprocess import app_client, ws_recv
from tests.server.streams import sse

KEY = "s3cret-key-for-tests"
ENV = {"STREAMSLO_TEST_KEY": KEY}
AUTH = {"authorization": f"Bearer {KEY}"}
BODY = {"prompt": "hi", "max_tokens": 3, "ignore_eos": True}
# Uvicorn trusts X-Forwarded-For from 127.0.0.1 (a proxy on this host): this is how a request
# that a local reverse proxy forwards from another machine arrives.
REMOTE = {"x-forwarded-for": "203.0.113.9"}


@pytest.fixture(scope="module")
def keyed() -> Iterator[TestClient]:
    with app_client(api_key_env="STREAMSLO_TEST_KEY", env=ENV) as tc:
        yield tc


def _assert_401(r: httpx.Response) -> None:
    assert r.status_code == 401, r.text
    assert r.json()["error"]["code"] == 401 and r.json()["error"]["type"] == "authentication_error"
    assert r.headers["www-authenticate"] == "Bearer"


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"authorization": "Bearer wrong"},
        {"authorization": KEY},
        {"authorization": f"Basic {KEY}"},
        {"authorization": f"Bearer {KEY}x"},
    ],
)
def test_v1_needs_the_key(keyed: TestClient, headers: dict[str, str]) -> None:
    _assert_401(keyed.post("/v1/stream", json=BODY, headers=headers))
    _assert_401(keyed.get("/v1/models", headers=headers))


def test_the_key_opens_sse_and_ws(keyed: TestClient) -> None:
    with keyed.stream("POST", "/v1/stream", json=BODY, headers=AUTH) as r:
        assert r.status_code == 200
        assert "data: [DONE]" in r.read().decode()
    with keyed.websocket_connect("/v1/ws", headers=AUTH) as ws:
        ws.send_text(json.dumps(BODY))
        frames = [ws_recv(ws) for _ in range(5)]
    assert frames[-1] == "[DONE]"


def test_ws_handshake_without_the_key_is_401_with_the_error_body(keyed: TestClient) -> None:
    """Refused with an HTTP answer (the ASGI denial response, not a handshake the app left
    unfinished, which Uvicorn logs as an error and answers with a bare 500)."""
    with pytest.raises(WebSocketDenialResponse) as refused, keyed.websocket_connect("/v1/ws"):
        pass
    response = refused.value
    assert response.status_code == 401
    assert json.loads(response.content)["error"]["code"] == 401


def test_health_and_metrics_stay_open(keyed: TestClient) -> None:
    for path in ("/healthz", "/metrics", "/openapi.json"):
        assert keyed.get(path, headers=REMOTE).status_code == 200, path


def test_debug_answers_loopback_or_the_key(keyed: TestClient, fixed_app: TestClient) -> None:
    for tc in (keyed, fixed_app):
        assert tc.get("/debug/workers").status_code == 200
    _assert_401(keyed.get("/debug/stalls", headers=REMOTE))
    with_key = keyed.get("/debug/stalls", headers={**REMOTE, **AUTH})
    assert with_key.status_code == 200 and "stalls" in with_key.json()
    no_key = fixed_app.get("/debug/stalls", headers=REMOTE)
    assert no_key.status_code == 403 and no_key.json()["error"]["code"] == 403
    assert fixed_app.get("/v1/models", headers=REMOTE).status_code == 200


def test_the_key_is_on_no_command_line_and_in_no_config(serve) -> None:
    s = serve("--server", "gunicorn", "--api-key-env", "STREAMSLO_TEST_KEY", env=ENV)
    assert sse(s.url, "/v1/stream", BODY).status == 401
    r = httpx.post(s.url + "/v1/stream", json=BODY, headers=AUTH, timeout=30)
    assert r.status_code == 200 and "[DONE]" in r.text  # the workers read the key themselves
    procs = [psutil.Process(s.proc.pid), *psutil.Process(s.proc.pid).children(recursive=True)]
    for p in procs:
        assert KEY not in " ".join(p.cmdline())
        config = p.environ().get("STREAMSLO_SERVER_CONFIG", "")
        assert KEY not in config


def test_an_unset_key_variable_is_bad_input(tmp_path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "streamslo",
            "serve",
            "--api-key-env",
            "STREAMSLO_SURELY_UNSET",
            "--port",
            "0",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "STREAMSLO_SURELY_UNSET is unset or empty" in proc.stderr


def test_loopback_checks() -> None:
    assert is_loopback(("127.0.0.1", 1)) and is_loopback(("::1", 1))
    assert is_loopback(("::ffff:127.0.0.1", 1)) and is_loopback(("127.8.9.10", 1))
    assert not is_loopback(("203.0.113.9", 1)) and not is_loopback(None)
    assert not is_loopback(("not-an-ip", 1))
    assert (
        is_loopback_host("127.0.0.1") and is_loopback_host("localhost") and is_loopback_host("::1")
    )
    assert not is_loopback_host("0.0.0.0") and not is_loopback_host("example.org")


def test_binding_beyond_loopback_warns(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="streamslo.server.launch"):
        warn_if_exposed("127.0.0.1", 8000, keyed=False)
        assert caplog.records == []
        warn_if_exposed("0.0.0.0", 8000, keyed=False)
        warn_if_exposed("0.0.0.0", 8000, keyed=True)
    unkeyed, with_key = (r.getMessage() for r in caplog.records)
    assert "reachable from other machines" in unkeyed and "without --api-key-env" in unkeyed
    assert "needs the API key" in with_key
