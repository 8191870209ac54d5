"""Uvicorn server and Gunicorn worker classes that drain on SIGTERM.

Plain Uvicorn stops accepting at once on SIGTERM. Here the first SIGTERM/SIGINT only starts a
drain: the socket stays open, new requests get 503 (``Retry-After``), in-flight streams run to
their end; the server exits when none are left or ``graceful_timeout_s`` has passed. A second
signal exits at once. :class:`DrainingUvicornWorker` is ``uvicorn_worker.UvicornWorker`` (the
maintained worker class, see FINDINGS) serving with :class:`DrainingServer`.
"""

from __future__ import annotations

import signal
import sys
import time
from types import FrameType
from typing import Any, ClassVar

import uvicorn
from gunicorn.arbiter import Arbiter
from uvicorn_worker import UvicornWorker

from streamslo.server import runtime
from streamslo.server.config import MAX_BODY_BYTES, ServerConfig

__all__ = ["UVICORN_KWARGS", "DrainingServer", "DrainingUvicornWorker"]

#: Uvicorn settings shared by both launch paths: pure-Python parts, our frame limit.
UVICORN_KWARGS = {
    "loop": "asyncio",
    "http": "h11",
    "ws": "websockets-sansio",
    "ws_max_size": MAX_BODY_BYTES + 4096,
    "timeout_graceful_shutdown": 3,
    "lifespan": "on",
}


class DrainingServer(uvicorn.Server):
    """A Uvicorn server whose first exit signal drains instead of stopping."""

    def __init__(self, config: uvicorn.Config, graceful_timeout_s: float) -> None:
        super().__init__(config)
        self.graceful_timeout_s = graceful_timeout_s
        self._drain_requested = False

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
            waited = time.monotonic() - (rt.drain_started if rt else 0.0)
            if rt is None or not rt.streams or waited > self.graceful_timeout_s:
                self.should_exit = True
        return await super().on_tick(counter)


class DrainingUvicornWorker(UvicornWorker):
    """Gunicorn worker: Uvicorn with :class:`DrainingServer` and :data:`UVICORN_KWARGS`."""

    CONFIG_KWARGS: ClassVar[dict[str, Any]] = {k: v for k, v in UVICORN_KWARGS.items() if k != "lifespan"}

    async def _serve(self) -> None:
        self.config.app = self.wsgi
        cfg = ServerConfig.from_env()
        # Finish draining before Gunicorn's own graceful timeout SIGKILLs us.
        budget = max(1.0, float(self.cfg.graceful_timeout) - 1.0)
        server = DrainingServer(self.config, min(budget, cfg.graceful_timeout_s))
        self._install_sigquit_handler()
        # The master sends SIGTERM for a graceful stop; SIGINT/SIGQUIT mean "now".
        await server.serve(sockets=self.sockets)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if not server.started:
            sys.exit(Arbiter.WORKER_BOOT_ERROR)
