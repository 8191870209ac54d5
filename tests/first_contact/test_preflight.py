"""The preflight: each wrong target exits 2 within seconds with its cause, over real sockets,
and nothing is sent after it failed."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from streamslo.run.preflight import PreflightFailed, preflight
from streamslo.workload.requests import RequestOptions
from tests.faulty.process import unused_port
from tests.first_contact.fixed_status import fixed_status_server

REPO = Path(__file__).resolve().parents[2]


def run(host: str, out: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    cmd = [
        sys.executable,
        "-m",
        "streamslo",
        "run",
        "--host",
        host,
        "--out",
        str(out),
        "--users",
        "2",
        "--duration",
        "3",
        "--quiet",
        *args,
    ]
    t = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=REPO)
    return r, time.monotonic() - t


def fails(host: str, **kw: object) -> PreflightFailed:
    t = time.monotonic()
    with pytest.raises(PreflightFailed) as err:
        preflight(host, ["sse"], RequestOptions(**kw))  # type: ignore[arg-type]
    assert time.monotonic() - t < 10
    return err.value


def test_closed_port_exits_2_in_seconds_with_the_cause(tmp_path: Path) -> None:
    r, took = run(f"http://127.0.0.1:{unused_port()}", tmp_path / "out")
    assert r.returncode == 2, r.stderr
    assert took < 10
    assert "connection refused" in r.stderr.lower()
    assert "fix: start the server" in r.stderr
    assert not (tmp_path / "out").exists()  # no empty results directory left behind


def test_https_to_a_plain_http_port_says_use_http(faulty_server, tmp_path: Path) -> None:
    host = faulty_server.base_url.replace("http://", "https://")
    r, took = run(host, tmp_path / "out")
    assert r.returncode == 2, r.stderr
    assert took < 10
    assert "the server speaks plain HTTP" in r.stderr
    assert f"use {faulty_server.base_url}" in r.stderr


def test_a_scheme_that_is_not_http_exits_2(tmp_path: Path) -> None:
    r, took = run("ftp://127.0.0.1:21", tmp_path / "out")
    assert r.returncode == 2, r.stderr
    assert "ftp:// is not HTTP" in r.stderr
    assert took < 10


def test_a_typo_in_the_host_is_a_dns_error() -> None:
    err = fails("http://no-such-host.invalid:8000")
    assert "cannot resolve the host 'no-such-host.invalid'" in str(err)


def test_401_names_the_credentials_and_nothing_more_is_sent(tmp_path: Path) -> None:
    body = b'{"error": {"message": "Invalid API key", "type": "auth_error", "code": 401}}'
    with fixed_status_server(401, body) as srv:
        r, took = run(srv.url, tmp_path / "out", "--model", "m")
        assert r.returncode == 2, r.stderr
        assert took < 10
        assert "HTTP 401: Invalid API key" in r.stderr
        assert "--api-key-env" in r.stderr
        time.sleep(0.5)
        assert srv.posts == 1, srv.requests  # the preflight's one request, no load


def test_403_also_names_the_credentials() -> None:
    with fixed_status_server(403, b'{"error": "forbidden"}') as srv:
        err = fails(srv.url, model="m")
    assert "wants credentials" in str(err)


def test_a_wrong_path_is_404(faulty_server) -> None:
    err = fails(f"{faulty_server.base_url}/api")
    assert "HTTP 404" in str(err) and "wrong path" in str(err)
    assert "/api/v1/chat/completions" in str(err)


def test_an_unknown_model_lists_the_served_ones(faulty_server) -> None:
    err = fails(faulty_server.base_url, model="gpt-typo")
    text = str(err)
    assert "unknown model 'gpt-typo'" in text
    assert "the server lists: ok," in text
    assert "--model ok" in text


def test_a_2xx_body_that_is_not_a_stream(faulty_server) -> None:
    err = fails(f"{faulty_server.base_url}/s/json_body")
    assert "not an event stream (application/json)" in str(err)
    assert "not a streaming endpoint" in str(err)


def test_a_misbehaving_server_is_not_a_wrong_target(faulty_server) -> None:
    """A stream cut short is what the run measures: a note, no exit."""
    results = preflight(
        faulty_server.base_url, ["sse", "ws"], RequestOptions(model="truncated_close")
    )
    assert [r.record.outcome for r in results] == ["truncated", "truncated"]
    assert all(r.diagnosis is not None and not r.diagnosis.fatal for r in results)


def test_a_healthy_target_passes_on_both_protocols(faulty_server) -> None:
    results = preflight(faulty_server.base_url, ["sse", "ws"], RequestOptions())
    assert [(r.protocol, r.record.outcome, r.record.tokens) for r in results] == [
        ("sse", "ok", 4),
        ("ws", "ok", 4),
    ]
    assert all(r.diagnosis is None for r in results)


def test_no_preflight_skips_it(tmp_path: Path) -> None:
    """With --no-preflight a refused port runs the load (and fails its thresholds), as before."""
    r, _ = run(
        f"http://127.0.0.1:{unused_port()}",
        tmp_path / "out",
        "--no-preflight",
        "--duration",
        "1",
        "--allow-invalid",
    )
    assert r.returncode == 99, r.stderr
    assert (tmp_path / "out" / "streams.csv").exists()


def test_a_master_checks_the_target_before_waiting_for_workers(tmp_path: Path) -> None:
    r, took = run(
        f"http://127.0.0.1:{unused_port()}",
        tmp_path / "out",
        "--master",
        "--expect-workers",
        "2",
        "--master-bind-port",
        str(unused_port()),
    )
    assert r.returncode == 2, r.stderr
    assert took < 10 and "connection refused" in r.stderr
    assert "waiting for" not in r.stderr


def test_a_key_the_server_echoes_is_masked(tmp_path: Path) -> None:
    import os

    key = "sk-live-0123456789abcdef"
    body = b'{"error": {"message": "Invalid key sk-live-0123456789abcdef"}}'
    with fixed_status_server(401, body) as srv:
        cmd = [
            sys.executable,
            "-m",
            "streamslo",
            "run",
            "--host",
            srv.url,
            "--out",
            str(tmp_path / "o"),
            "--model",
            "m",
            "--api-key-env",
            "FIRST_KEY",
        ]
        r = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=REPO,
            env={**os.environ, "FIRST_KEY": key},
        )
    assert r.returncode == 2
    assert key not in r.stderr and "Invalid key ***" in r.stderr


def test_preflight_requests_are_marked_and_auth_can_be_a_note() -> None:
    """A master without credentials (its workers bring theirs) is not stopped by a 401."""
    with fixed_status_server(401, b'{"error": {"message": "no key"}}') as srv:
        results = preflight(srv.url, ["sse"], RequestOptions(model="m"), auth_fatal=False)
        assert results[0].record.status == 401
        assert results[0].diagnosis is not None and not results[0].diagnosis.fatal
        assert srv.posts == 1


@pytest.mark.parametrize(
    ("case", "cause"),
    [
        ("dns", "cannot resolve the host 'no-such-host.invalid'"),
        ("404", "HTTP 404: no route /api/v1/chat/completions: wrong path"),
        ("model", "unknown model 'gpt-typo'; the server lists: ok,"),
        ("not-a-stream", "not a streaming endpoint"),
    ],
)
def test_each_wrong_target_exits_2_from_the_command_line(
    faulty_server, tmp_path: Path, case: str, cause: str
) -> None:
    base = faulty_server.base_url
    host, extra = {
        "dns": ("http://no-such-host.invalid:8000", []),
        "404": (f"{base}/api", []),
        "model": (base, ["--model", "gpt-typo"]),
        "not-a-stream": (f"{base}/s/json_body", []),
    }[case]
    r, took = run(host, tmp_path / "out", *extra)
    assert r.returncode == 2, r.stderr
    assert took < 10, took
    assert cause in r.stderr and "fix: " in r.stderr
