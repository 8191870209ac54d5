"""Who may call what: ``--api-key-env`` on ``/v1/*``, ``/debug/*`` for loopback or the key, the
warning when binding beyond loopback, and the key kept off command lines and the config."""

from __future__ import annotations

import json
import logging
import subprocess
import sys

import httpx
import psutil
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from streamslo.server.access import is_loopback
from streamslo.server.launch import is_loopback_host, warn_if_exposed
from tests.server.conftest import ROOT, Server
from tests.server.streams import sse

KEY = "s3cret-key-for-tests"
ENV = {"STREAMSLO_TEST_KEY": KEY}
AUTH = {"authorization": f"Bearer {KEY}"}
BODY = {"prompt": "hi", "max_tokens": 3, "ignore_eos": True}
# Uvicorn trusts X-Forwarded-For from 127.0.0.1 (a proxy on this host): this is how a request
# that a local reverse proxy forwards from another machine arrives.
REMOTE = {"x-forwarded-for": "203.0.113.9"}


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Server:
    from tests.server.conftest import start_server

    s = start_server(
        ["--api-key-env", "STREAMSLO_TEST_KEY"], tmp_path_factory.mktemp("keyed"), env=ENV
    )
    yield s
    s.stop()


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
def test_v1_needs_the_key(keyed: Server, headers: dict[str, str]) -> None:
    _assert_401(httpx.post(keyed.url + "/v1/stream", json=BODY, headers=headers, timeout=10))
    _assert_401(httpx.get(keyed.url + "/v1/models", headers=headers, timeout=10))


def test_the_key_opens_sse_and_ws(keyed: Server) -> None:
    with httpx.stream("POST", keyed.url + "/v1/stream", json=BODY, headers=AUTH, timeout=30) as r:
        assert r.status_code == 200
        assert "data: [DONE]" in r.read().decode()
    with connect(keyed.ws_url, additional_headers=AUTH) as ws:
        ws.send(json.dumps(BODY))
        frames = [ws.recv(timeout=10) for _ in range(5)]
    assert frames[-1] == "[DONE]"


def test_ws_handshake_without_the_key_is_401_with_the_error_body(keyed: Server) -> None:
    with pytest.raises(InvalidStatus) as refused, connect(keyed.ws_url):
        pass
    response = refused.value.response
    assert response.status_code == 401
    assert json.loads(response.body)["error"]["code"] == 401
    assert "ASGI callable returned without completing handshake" not in keyed.output()


def test_health_and_metrics_stay_open(keyed: Server) -> None:
    for path in ("/healthz", "/metrics", "/openapi.json"):
        assert httpx.get(keyed.url + path, headers=REMOTE, timeout=10).status_code == 200, path


def test_debug_answers_loopback_or_the_key(keyed: Server, fixed_server: Server) -> None:
    for s in (keyed, fixed_server):
        assert httpx.get(s.url + "/debug/workers", timeout=10).status_code == 200
    _assert_401(httpx.get(keyed.url + "/debug/stalls", headers=REMOTE, timeout=10))
    with_key = httpx.get(keyed.url + "/debug/stalls", headers={**REMOTE, **AUTH}, timeout=10)
    assert with_key.status_code == 200 and "stalls" in with_key.json()
    no_key = httpx.get(fixed_server.url + "/debug/stalls", headers=REMOTE, timeout=10)
    assert no_key.status_code == 403 and no_key.json()["error"]["code"] == 403
    assert httpx.get(fixed_server.url + "/v1/models", headers=REMOTE, timeout=10).status_code == 200


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
