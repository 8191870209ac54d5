"""Real target servers as subprocesses on free loopback ports (no mocks)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from streamslo.server.bundled import free_port

__all__ = ["ROOT", "Server", "model_server", "start_server"]

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/v1/ws"

    def stop(self, timeout: float = 20) -> int:
        """SIGTERM this server (by its pid) and wait; SIGKILL if it does not exit."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return int(self.proc.returncode)

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def start_server(
    args: list[str], tmp: Path, ready_timeout: float = 60, env: dict[str, str] | None = None
) -> Server:
    port = free_port()
    log = tmp / f"server-{port}.log"
    cmd = [sys.executable, "-m", "streamslo.server", "--port", str(port), *args]
    env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    with open(log, "wb") as f:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, env=env)
    server = Server(proc, port, log)
    deadline = time.monotonic() + ready_timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited {proc.returncode}:\n{server.output()}")
        try:
            if httpx.get(f"{server.url}/healthz", timeout=1).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    server.stop()
    raise RuntimeError(f"server not ready in {ready_timeout} s:\n{server.output()}")


@contextlib.contextmanager
def model_server(
    tmp: Path, interval_ms: int, reasoning: int = 0, tool: int = 0
) -> Iterator[Server]:
    """A fixed-mode server playing a model: ``interval_ms`` a token, the first ``reasoning``
    tokens reasoning, the last ``tool`` a tool call's arguments; stopped on the way out."""
    args = ["--mode", "fixed", "--token-interval-ms", str(interval_ms)]
    if reasoning:
        args += ["--reasoning-tokens", str(reasoning)]
    if tool:
        args += ["--tool-call-tokens", str(tool)]
    server = start_server(args, tmp)
    try:
        yield server
    finally:
        server.stop()
