"""Uvicorn server and Gunicorn worker classes that drain on SIGTERM.

Plain Uvicorn stops accepting at once on SIGTERM. Here the first SIGTERM/SIGINT only starts a
drain: the socket stays open, new requests get 503 (``Retry-After``; WebSocket: an error frame
and close 1013), in-flight streams run to their end; the server exits once none has been left
for :data:`DRAIN_SETTLE_S`, or when ``graceful_timeout_s`` has passed. A second signal exits at
once. :class:`DrainingUvicornWorker` is ``uvicorn_worker.UvicornWorker`` (the
maintained worker class; the one in uvicorn is deprecated) serving with :class:`DrainingServer`.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import sys
import time
from types import FrameType
from typing import Any

import uvicorn
from gunicorn.arbiter import Arbiter
from uvicorn_worker import UvicornWorker

from streamslo.server import runtime
from streamslo.server.config import ServerConfig
from streamslo.server.guard import GuardedH11Protocol, GuardedWSProtocol

__all__ = [
    "DRAIN_SETTLE_S",
    "DrainingServer",
    "DrainingUvicornWorker",
    "no_delay",
    "uvicorn_kwargs",
]


def no_delay(sock: socket.socket) -> None:
    """Turn Nagle's algorithm off on a listening socket; Linux passes it on to every accepted
    connection. asyncio turns it off only on sockets made with ``IPPROTO_TCP`` as their
    protocol, which a plain ``socket.socket()`` (ours, Gunicorn's) is not: a small write (a
    token) then waited for the ACK of the one before, and on a kept-alive connection the
    client delays that ACK up to 40 ms, so a stream's first tokens left together, late."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def uvicorn_kwargs(cfg: ServerConfig) -> dict[str, Any]:
    """Uvicorn settings shared by both launch paths: pure-Python parts with our limits
    (:mod:`streamslo.server.guard`), the WebSocket message limit."""
    return {
        "loop": "asyncio",
        "http": GuardedH11Protocol,
        "ws": GuardedWSProtocol,
        # The message limit itself, so an oversized one closes 1009 like an oversized body 413s.
        "ws_max_size": cfg.max_body_bytes,
        "timeout_graceful_shutdown": 3,
        "lifespan": "on",
    }


#: How long a draining server waits with no stream left before it exits. A client that sends
#: its next request right after a [DONE] (keep-alive, or the same WebSocket) then gets its 503 /
#: 1013 instead of a connection closed under it by the exit (without it, WebSocket clients in
#: the drain test got close 1012, "restarting", for their next request).
DRAIN_SETTLE_S = 0.5


class DrainingServer(uvicorn.Server):
    """A Uvicorn server whose first exit signal drains instead of stopping."""

    def __init__(self, config: uvicorn.Config, graceful_timeout_s: float) -> None:
        super().__init__(config)
        self.graceful_timeout_s = graceful_timeout_s
        self._drain_requested = False
        self._idle_since: float | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        rt = runtime.current()
        if self._drain_requested or rt is None:
            self.should_exit = True
            if self._drain_requested:
                self.force_exit = True
            return
        self._drain_requested = True
        rt.begin_drain()

    async def on_tick(self, counter: int) -> bool:
        if self._drain_requested and not self.should_exit:
            rt = runtime.current()
            now = time.monotonic()
            if rt is not None and rt.streams:
                self._idle_since = None
            elif self._idle_since is None:
                self._idle_since = now
            waited = now - (rt.drain_started if rt else 0.0)
            settled = self._idle_since is not None and now - self._idle_since >= DRAIN_SETTLE_S
            if rt is None or settled or waited > self.graceful_timeout_s:
                self.should_exit = True
        return await super().on_tick(counter)


class DrainingUvicornWorker(UvicornWorker):  # type: ignore[misc]  # uvicorn-worker ships no types
    """Gunicorn worker: Uvicorn with :class:`DrainingServer` and :func:`uvicorn_kwargs`, for
    the :class:`ServerConfig` in ``STREAMSLO_SERVER_CONFIG``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.server_config = ServerConfig.from_env()
        # Read by UvicornWorker.__init__ (an instance attribute shadows the class default).
        self.CONFIG_KWARGS = {
            k: v for k, v in uvicorn_kwargs(self.server_config).items() if k != "lifespan"
        }
        super().__init__(*args, **kwargs)

    async def _serve(self) -> None:
        self.config.app = self.wsgi
        cfg = self.server_config
        # Finish draining before Gunicorn's own graceful timeout SIGKILLs us.
        budget = max(1.0, float(self.cfg.graceful_timeout) - 1.0)
        server = DrainingServer(self.config, min(budget, cfg.graceful_timeout_s))
        self._install_sigquit_handler()
        for sock in self.sockets:
            no_delay(sock)
        # The master sends SIGTERM for a graceful stop; SIGINT/SIGQUIT mean "now".
        await server.serve(sockets=self.sockets)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if not server.started:
            sys.exit(Arbiter.WORKER_BOOT_ERROR)
