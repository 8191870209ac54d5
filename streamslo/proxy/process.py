"""Running the proxy beside blocking code: in a background thread (:func:`background_proxy`),
or as ``python -m streamslo proxy ...`` in a child process (:func:`spawn_proxy`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from streamslo.proxy.config import Endpoint, Faults, ProxyLimits, parse_listen
from streamslo.proxy.engine import FaultProxy
from streamslo.run.childproc import read_first_line

__all__ = ["READY_PREFIX", "STATS_PREFIX", "ProxyProcess", "background_proxy", "spawn_proxy"]

#: The command's first stdout line starts with this, then the bound ``HOST:PORT``.
READY_PREFIX = "listening "
#: The command's last stdout line: this, then the counters as JSON.
STATS_PREFIX = "stats "


@contextlib.contextmanager
def background_proxy(
    upstream: str | Endpoint,
    faults: Faults | None = None,
    *,
    listen: str | Endpoint = "127.0.0.1:0",
    limits: ProxyLimits | None = None,
) -> Iterator[FaultProxy]:
    """Run a :class:`FaultProxy` on its own event loop in a daemon thread, for blocking
    clients (the transports, tests). Yields the started proxy; read ``proxy.url`` and, after
    the block, ``proxy.stats``.

    Raises:
        OSError: the listen address cannot be bound.
    """
    loop = asyncio.new_event_loop()
    proxy = FaultProxy(upstream, faults, listen=listen, limits=limits)
    started: list[BaseException | None] = []
    ready = threading.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(proxy.start())
            started.append(None)
        except BaseException as exc:  # handed to the caller's thread below
            started.append(exc)
        ready.set()
        if started[0] is None:
            loop.run_forever()

    thread = threading.Thread(target=run, name="streamslo-proxy", daemon=True)
    thread.start()
    ready.wait()
    try:
        if started[0] is not None:
            raise started[0]
        yield proxy
    finally:
        if started and started[0] is None:
            asyncio.run_coroutine_threadsafe(proxy.close(), loop).result(timeout=30)
            loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)
        loop.close()


@dataclass
class ProxyProcess:
    """A ``streamslo proxy`` child process: where it listens and, once stopped, its counters."""

    process: subprocess.Popen[bytes]
    address: Endpoint
    banner: str = ""
    """Its first stdout line: ``listening HOST:PORT -> UPSTREAM faults: ...``."""
    stats: dict[str, int] = field(default_factory=dict)
    """The ``stats`` line it printed on exit (empty until :meth:`stop`)."""
    output: str = ""
    """Everything it printed on stdout after the first line (filled by :meth:`stop`)."""

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> int:
        """Send ``sig`` (to this PID only), wait, collect stdout; returns the exit code.
        Kills it if it does not exit within ``timeout``. A second call only returns the code."""
        if self.process.stdout is None or self.process.stdout.closed:
            return self.process.wait(timeout=timeout)
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            out, _ = self.process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            out, _ = self.process.communicate(timeout=timeout)
        self.output += out.decode(errors="replace")
        for line in self.output.splitlines():
            if line.startswith(STATS_PREFIX):
                self.stats = json.loads(line[len(STATS_PREFIX) :])
        return self.process.returncode


@contextlib.contextmanager
def spawn_proxy(args: Sequence[str], *, startup_timeout: float = 20.0) -> Iterator[ProxyProcess]:
    """Start ``python -m streamslo proxy ARGS`` and read the bound address from its first
    stdout line; stop it (SIGTERM) when the block ends.

    Raises:
        RuntimeError: it exited or said something else before listening.
    """
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    process = subprocess.Popen(
        [sys.executable, "-m", "streamslo", "proxy", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        env=env,
    )
    proc: ProxyProcess | None = None
    try:
        first, rest = read_first_line(process, startup_timeout, "streamslo proxy")
        if not first.startswith(READY_PREFIX):
            raise RuntimeError(f"streamslo proxy said {first!r}, not {READY_PREFIX!r}HOST:PORT")
        proc = ProxyProcess(
            process, parse_listen(first[len(READY_PREFIX) :].split()[0]), first, output=rest
        )
        yield proc
    finally:
        if proc is not None:
            proc.stop()
        elif process.poll() is None:
            process.kill()
            process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()
