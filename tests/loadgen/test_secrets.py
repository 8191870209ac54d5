"""Secrets stay secret, end to end with real processes: header values never on a command line,
keys a server echoes never in the results, the Locust log or the web UI, the web UI start form
never offering what could leak a key or touch local files, and no CSV cell a formula."""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pandas as pd
import psutil
import pytest

from tests.faulty.process import unused_port
from tests.loadgen.helpers import LOCUSTFILE, REPO, stop_process, streamslo_run

pytestmark = pytest.mark.load

KEY = "sk-live-9d8c7b6a5f4e3d2c"
TENANT = "tenant-token-5150"
FILE_KEY = "file-api-key-8086"
PLAIN = "plain-visible-4242"
SECRETS = (KEY, TENANT, FILE_KEY)
FORMULA = "=1+2"


class _EchoServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.seen: list[dict[str, str]] = []
        self.count = itertools.count()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    """Every other chat request of the load: a 401 whose message echoes the credentials it got;
    the rest (and every request before the load: the probes and the preflight, which say so in
    a header) stream ``max_tokens`` chunks and end with ``finish_reason`` "=1+2"."""

    protocol_version = "HTTP/1.1"
    server: _EchoServer

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _send(self, status: int, ctype: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self.server.seen.append(dict(self.headers))
        self._send(200, "application/json", b'{"object":"list","data":[{"id":"echo"}]}')

    def do_POST(self) -> None:
        req = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))))
        self.server.seen.append(dict(self.headers))
        before_load = self.headers.get("X-Streamslo-Preflight") == "1"
        if not before_load and next(self.server.count) % 2:
            got = " / ".join(
                self.headers.get(h, "") for h in ("Authorization", "X-Api-Key", "X-Tenant-Token")
            )
            body = json.dumps({"error": {"message": f"invalid credentials: {got}", "code": 401}})
            self._send(401, "application/json", body.encode())
            return

        def chunk(delta: dict[str, str], finish: str | None) -> bytes:
            doc = {
                "id": "c",
                "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
            return b"data: " + json.dumps(doc).encode() + b"\n\n"

        n = int(req.get("max_tokens", 1))
        body = (
            b"".join(chunk({"content": "t"}, None) for _ in range(n))
            + chunk({}, FORMULA)
            + b"data: [DONE]\n\n"
        )
        self._send(200, "text/event-stream", body)


@pytest.fixture
def echo_server() -> Iterator[_EchoServer]:
    server = _EchoServer()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def _secret_env(tmp_path: Path) -> tuple[dict[str, str], Path]:
    hfile = tmp_path / "headers.txt"
    hfile.write_text(f"# from a vault\nX-Api-Key: {FILE_KEY}\n")
    hfile.chmod(0o600)
    return dict(os.environ, H4_KEY=KEY, H4_TENANT=TENANT), hfile


def _leaks_in_files(directory: Path) -> list[str]:
    found = []
    for path in directory.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            found += [f"{path.relative_to(directory)}: {s}" for s in SECRETS if s.encode() in data]
    return found


def _cmdlines_with(
    values: tuple[str, ...], typed_by_user: list[str]
) -> tuple[list[str], list[list[str]]]:
    """Command lines of every process that hold one of ``values``: the secrets must be on none,
    and a plain ``--header`` value on none but the one the user typed (``typed_by_user``; a
    child forked by it shows that same command line until it execs its own)."""
    leaks, all_lines = [], []
    for proc in psutil.process_iter(["cmdline"]):
        line = proc.info.get("cmdline") or []
        all_lines.append(line)
        text = "\0".join(line)
        leaks += [
            f"pid {proc.pid}: {v}"
            for v in values
            if v in text and not (v == PLAIN and line == typed_by_user)
        ]
    return leaks, all_lines


def test_run_keeps_header_values_off_command_lines_and_keys_out_of_results(echo_server, tmp_path):
    env, hfile = _secret_env(tmp_path)
    out = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "streamslo",
        "run",
        "--host",
        echo_server.url,
        "--out",
        str(out),
        "--allow-invalid",
        "--users",
        "2",
        "--duration",
        "3",
        "--drain",
        "2",
        "--max-tokens",
        "3",
        "--api-key-env",
        "H4_KEY",
        "--header-file",
        str(hfile),
        "--header",
        "X-Tenant-Token: ${H4_TENANT}",
        "--header",
        f"X-Plain: {PLAIN}",
    ]
    proc = subprocess.Popen(
        cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    leaks: list[str] = []
    saw_locust = False
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:
        found, lines = _cmdlines_with((*SECRETS, PLAIN), typed_by_user=cmd)
        leaks += found
        saw_locust |= any(
            "locust" in " ".join(line) and str(out) in " ".join(line) for line in lines
        )
        time.sleep(0.1)
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode in (0, 99), stdout + stderr
    assert saw_locust, (
        "never saw the Locust subprocess: the command lines were not checked during the run"
    )
    assert not leaks, leaks
    # The server did get every header.
    chats = [h for h in echo_server.seen if "X-Tenant-Token" in h]
    assert chats, echo_server.seen
    assert chats[0]["Authorization"] == f"Bearer {KEY}"
    assert (chats[0]["X-Api-Key"], chats[0]["X-Tenant-Token"], chats[0]["X-Plain"]) == (
        FILE_KEY,
        TENANT,
        PLAIN,
    )
    # ...and echoed them, but no file of the results (locust.log included) keeps them.
    assert not _leaks_in_files(out)
    assert not [s for s in SECRETS if s in stdout + stderr]
    streams = pd.read_csv(out / "streams.csv", dtype={"finish_reason": str, "error": str})
    refused = streams[streams["outcome"] == "http_4xx"]
    assert (
        len(refused) > 0
        and refused["error"].str.contains(r"invalid credentials: \*\*\*", regex=True).all()
    )
    # The server's finish_reason would be a formula in a spreadsheet: the cell is neutralized,
    # and the numeric columns stay numbers.
    finished = streams[streams["finish_reason"].notna()]
    assert len(finished) > 0 and (finished["finish_reason"] == "'" + FORMULA).all()
    assert pd.api.types.is_float_dtype(streams["ttft_ms"]) and pd.api.types.is_integer_dtype(
        streams["tokens"]
    )


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as r:
        return bytes(r.read())


def _post_swarm(base: str, **form: str) -> tuple[int, dict[str, object]]:
    data = urllib.parse.urlencode({"user_count": "2", "spawn_rate": "2", **form}).encode()
    try:
        with urllib.request.urlopen(base + "/swarm", data=data, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_web_ui_offers_no_secret_and_shows_no_key(echo_server, tmp_path):
    env, hfile = _secret_env(tmp_path)
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("say hello\n")
    out = tmp_path / "run"
    log_path = tmp_path / "locust.log"
    port = unused_port()
    base = f"http://127.0.0.1:{port}"
    cmd = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(LOCUSTFILE),
        "--host",
        echo_server.url,
        "--web-host",
        "127.0.0.1",
        "--web-port",
        str(port),
        "--autostart",
        "-u",
        "2",
        "-r",
        "2",
        "--run-time",
        "60s",
        "--results-dir",
        str(out),
        "--max-tokens",
        "3",
        "--api-key-env",
        "H4_KEY",
        "--prompt-file",
        str(prompts),
        "--header-file",
        str(hfile),
    ]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 40
            stats: dict = {}
            while time.monotonic() < deadline:
                try:
                    stats = json.loads(_get(base + "/stats/requests"))
                    # the failure this test is about: the server's answer to the bad key
                    if "invalid credentials" in json.dumps(stats.get("errors")) and any(
                        s["name"] == "stream" for s in stats["stats"]
                    ):
                        break
                except OSError:
                    pass
                time.sleep(0.5)
            else:
                pytest.fail(f"no stream failed on the bad key in the web UI: {stats.get('errors')}")
            # The start form: what the page's template arguments offer.
            page = _get(base + "/").decode()
            args = json.loads(
                re.search(r"templateArgs = (\{.*?\})\s*</script>", page, re.S).group(1)
            )
            offered = set(args["extra_options"])
            assert {"max_tokens", "stall_timeout", "protocol"} <= offered
            assert not offered & {
                "api_key_env",
                "prompt_file",
                "results_dir",
                "header",
                "header_file",
                "processes_hint",
            }
            assert not [s for s in SECRETS if s in page]
            # The UI's JSON shows the failures, with the key the server echoed masked.
            text = json.dumps(stats)
            assert "invalid credentials: ***" in text and not [s for s in SECRETS if s in text]
            # A hand-made start request cannot set what the form does not offer...
            status, body = _post_swarm(
                base, host=echo_server.url, api_key_env="HOME", prompt_file="/etc/passwd"
            )
            assert (
                status == 403 and body["success"] is False and "api_key_env" in str(body["message"])
            )
            # ...nor send the secret headers to another host...
            status, body = _post_swarm(base, host="http://127.0.0.1:9")
            assert status == 403 and "host given on the command line" in str(body["message"])
            # ...while an ordinary restart from the form still works.
            status, body = _post_swarm(base, host=echo_server.url)
            assert status == 200 and body["success"] is True, body
        finally:
            stop_process(proc)
    assert not [s for s in SECRETS if s.encode() in log_path.read_bytes()]
    assert (out / "streams.csv").exists() and not _leaks_in_files(out)


def test_a_worker_brings_its_own_credentials(echo_server, tmp_path):
    """``streamslo run --master`` keeps headers off its command line, so Locust's spawn message
    carries none: a worker must keep the ``--header-file`` it was started with."""
    _, hfile = _secret_env(tmp_path)
    port = str(unused_port())
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "locust",
            "-f",
            str(LOCUSTFILE),
            "--worker",
            "--master-host",
            "127.0.0.1",
            "--master-port",
            port,
            "--header-file",
            str(hfile),
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        r = streamslo_run(
            echo_server.url,
            tmp_path / "run",
            "--users",
            "2",
            "--duration",
            "3",
            "--drain",
            "2",
            "--max-tokens",
            "2",
            "--master",
            "--expect-workers",
            "1",
            "--master-bind-port",
            port,
            "--quiet",
        )
        assert r.returncode in (0, 99), r.stdout + r.stderr
    finally:
        if worker.poll() is None:
            stop_process(worker)
    # (the master's preflight request carries no key: it has none; workers bring theirs)
    chats = [
        h for h in echo_server.seen if "Content-Length" in h and "X-Streamslo-Preflight" not in h
    ]
    assert chats and all(h.get("X-Api-Key") == FILE_KEY for h in chats)
    assert not _leaks_in_files(tmp_path / "run")
