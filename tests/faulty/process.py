"""Run the faulty server as a subprocess on a free 127.0.0.1 port."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from streamslo.run.childproc import read_first_line

__all__ = ["FaultyServer", "start_faulty_server", "unused_port"]

_REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class FaultyServer:
    """A running faulty server: where it listens, and its process."""

    port: int
    process: subprocess.Popen[str]
    host: str = "127.0.0.1"

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>``; select a scenario with the request's ``model``."""
        return f"http://{self.host}:{self.port}"

    @property
    def ws_url(self) -> str:
        """``ws://127.0.0.1:<port>/v1/ws``; select a scenario with each frame's ``model``."""
        return f"ws://{self.host}:{self.port}/v1/ws"

    def url(self, scenario: str) -> str:
        """A base URL that selects ``scenario`` by path: ``http://.../s/<scenario>``.

        Append ``/v1/chat/completions`` etc. as for any base URL.
        """
        return f"{self.base_url}/s/{scenario}"

    def ws_url_for(self, scenario: str) -> str:
        """``ws://.../s/<scenario>/v1/ws``: the only way to reach handshake-level faults."""
        return f"ws://{self.host}:{self.port}/s/{scenario}/v1/ws"

    @property
    def pid(self) -> int:
        return self.process.pid


def unused_port() -> int:
    """A 127.0.0.1 port with nothing listening (for ``connect refused`` tests).

    Racy by nature: another process may take it later; good enough for tests.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.terminate()  # SIGTERM to this PID only
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)
    if process.stdout is not None:
        process.stdout.close()


@contextlib.contextmanager
def start_faulty_server(
    *, startup_timeout: float = 20.0, quiet: bool = False
) -> Iterator[FaultyServer]:
    """Start ``python -m tests.faulty.server --port 0``; yield it; stop it on exit.

    The server picks a free port itself and reports it (``READY <port>``), so there is no
    race between choosing a port and binding it. It also exits if this process dies.
    ``quiet`` sends the server's stderr (tracebacks of unexpected errors) to /dev/null.
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(_REPO_ROOT), env.get("PYTHONPATH", "")) if p
    )
    env["PYTHONUNBUFFERED"] = "1"
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.faulty.server", "--port", "0", "--exit-with-parent"],
        cwd=_REPO_ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL if quiet else None,
        text=True,
    )
    try:
        line, _ = read_first_line(process, startup_timeout, "faulty server")
        if not line.startswith("READY "):
            raise RuntimeError(f"faulty server said {line!r}, not READY <port>")
        server = FaultyServer(port=int(line.split()[1]), process=process)
    except BaseException:
        _stop(process)
        raise
    try:
        yield server
    finally:
        _stop(process)
