"""The bundled target server as a subprocess: started on a free 127.0.0.1 port, waited for
(``/healthz``), and stopped by its PID. Used by ``compare``, ``soak`` and the pytest fixtures.

Errors: :class:`~streamslo.errors.ServerExtraMissing` (bad input, exit code 2) before anything
starts when the ``server`` extra is not installed; :class:`ServerStartError` (an internal
error, exit code 1, not bad input) when the server crashes or never answers, with its log's
tail in the message.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from streamslo.errors import StreamSLOError
from streamslo.server.deps import require_server_extra

__all__ = [
    "BundledServer",
    "ServerStartError",
    "free_port",
    "log_tail",
    "split_cpus",
    "start_bundled",
]


class ServerStartError(StreamSLOError):
    """The server exited, or did not answer ``/healthz`` in time (the message holds its log).

    A server of ours that will not start is our failure, not the user's input.
    """


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def log_tail(path: Path, n: int = 3000) -> str:
    """The last ``n`` characters of a log file ("" when it cannot be read)."""
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return ""


class BundledServer:
    """``streamslo serve SERVE_ARGS`` in its own process group.

    Args:
        serve_args: ``streamslo serve`` options (``--mode naive ...``); host and port are added.
        log: where the server's stdout and stderr go.
        cpus: a ``taskset -c`` CPU list to pin the server to, or None.

    Raises:
        ServerExtraMissing: the ``server`` extra is not installed (checked before starting).
    """

    def __init__(self, serve_args: Sequence[str], log: Path, cpus: str | None = None) -> None:
        require_server_extra("the bundled server")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.serve_args = tuple(serve_args)
        self.log = Path(log)
        cmd = [
            sys.executable,
            "-m",
            "streamslo",
            "serve",
            *self.serve_args,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
        ]
        self.cmd = ["taskset", "-c", cpus, *cmd] if cpus else cmd
        with open(self.log, "wb") as out:
            self.process = subprocess.Popen(
                self.cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    @property
    def mode(self) -> str:
        args = list(self.serve_args)
        return args[args.index("--mode") + 1] if "--mode" in args[:-1] else "fixed"

    def wait_ready(self, timeout: float = 90.0) -> BundledServer:
        """Wait until ``/healthz`` answers 200.

        Raises:
            ServerStartError: the server exited or did not answer in time; it is stopped.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ServerStartError(
                    f"{' '.join(self.cmd)} exited with {self.process.returncode}:\n{log_tail(self.log)}"
                )
            try:
                with urllib.request.urlopen(self.url + "/healthz", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.2)
        self.stop()
        raise ServerStartError(
            f"{self.url}/healthz did not answer within {timeout:g}s:\n{log_tail(self.log)}"
        )

    def stop(self, timeout: float = 40.0) -> None:
        """SIGTERM the server (it drains), SIGKILL its whole process group after ``timeout``.

        The signal goes to the server's main process only: it forwards it to Gunicorn, whose
        master stops its workers once. Signalling the whole group would reach each worker
        twice, and a second signal means "exit now", skipping the graceful shutdown.
        """
        if self.process.poll() is not None:
            return
        try:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        except ProcessLookupError:
            pass

    def __enter__(self) -> BundledServer:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def start_bundled(serve_options: str, log: Path, cpus: str | None = None) -> BundledServer:
    """``streamslo serve SERVE_OPTIONS`` started and answering: how ``compare`` (``--before-cmd``,
    ``--after-cmd``) and ``soak`` (``--serve``) start theirs.

    Args:
        serve_options: ``serve`` options as one shell-quoted string (``--mode naive ...``).
        log: where the server's output goes.
        cpus: a ``taskset -c`` CPU list, or None.

    Raises:
        ServerExtraMissing: the ``server`` extra is not installed.
        ServerStartError: the server exited or did not answer in time (it is stopped).
    """
    import shlex

    return BundledServer(shlex.split(serve_options), log, cpus).wait_ready()


def split_cpus() -> tuple[str | None, str | None]:
    """(server cpus, generator cpus) for taskset, or (None, None) on one core."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except AttributeError:
        return None, None
    if len(cpus) < 2 or not _has_taskset():
        return None, None
    half = len(cpus) // 2
    return ",".join(map(str, cpus[:half])), ",".join(map(str, cpus[half:]))


def _has_taskset() -> bool:
    from shutil import which

    return which("taskset") is not None
