"""Gunicorn hooks (``-c python:streamslo.server.gunicorn_conf``): count worker deaths.

The master's ``child_exit`` counts every worker that exited without a clean shutdown (a
timeout kill, a crash) as a restart, in the state file named by ``STREAMSLO_STATE_FILE``;
``worker_abort`` runs in a worker killed by the timeout (SIGABRT) and logs where its loop was.
Workers read the file for ``/metrics`` (``streamslo_worker_restarts_total``) and
``/debug/workers``. ``STREAMSLO_SNDBUF`` sets SO_SNDBUF on the listening sockets.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import traceback
from typing import Any

from streamslo.server import workerstate

__all__ = ["child_exit", "when_ready", "worker_abort"]

_STATE = os.environ.get("STREAMSLO_STATE_FILE")


def when_ready(server: Any) -> None:
    """Apply the optional send-buffer size to the listeners (accepted sockets inherit it)."""
    size = os.environ.get("STREAMSLO_SNDBUF")
    if size:
        for listener in server.LISTENERS:
            listener.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, int(size))


def child_exit(server: Any, worker: Any) -> None:
    """Master side: a worker process ended."""
    if not _STATE:
        return
    clean = worker.pid in workerstate.read(_STATE).get("clean_pids", [])
    if clean:
        workerstate.bump(_STATE, "exits", pid=worker.pid)
    else:
        aborted = bool(getattr(worker, "aborted", False))
        workerstate.bump(_STATE, "restarts", pid=worker.pid, aborted=aborted)
        if aborted:  # killed by --timeout (the worker itself cannot count: SIGABRT is fatal)
            workerstate.bump(_STATE, "aborts", pid=worker.pid)
        server.log.error("worker %s died mid-service (restart counted)", worker.pid)


def worker_abort(worker: Any) -> None:
    """Worker side, on SIGABRT from the master's timeout: log the blocked loop's stack."""
    frame = sys._current_frames().get(threading.main_thread().ident or 0)
    stack = "".join(traceback.format_stack(frame, limit=15)) if frame is not None else "?"
    worker.log.error("worker %s timed out; its event loop was at:\n%s", os.getpid(), stack)
