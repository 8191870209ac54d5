"""A small JSON file shared by the Gunicorn master (which writes it) and its workers (which read
it): worker exits and aborts survive the workers they count.

Keys: ``restarts`` (workers that died without a clean shutdown: timeout kills, crashes),
``exits`` (clean worker exits), ``aborts`` (workers killed by the master's timeout, SIGABRT),
``clean_pids`` (workers that finished a clean shutdown), ``events`` (the last 50).
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from typing import Any

__all__ = ["bump", "mark_clean", "read"]


def read(path: str | None) -> dict[str, Any]:
    """The state, or an empty dict when there is no file (e.g. not under Gunicorn)."""
    if not path:
        return {}
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def bump(path: str, key: str, **event: object) -> None:
    """Add one to ``key`` and log the event, under an exclusive lock."""
    _update(path, key, None, event)


def mark_clean(path: str, pid: int) -> None:
    """A worker finished its clean shutdown (so its exit is not a restart)."""
    _update(path, None, pid, {})


def _update(path: str, key: str | None, clean_pid: int | None, event: dict[str, Any]) -> None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    with os.fdopen(fd, "r+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            data = json.loads(f.read() or "{}")
        except ValueError:
            data = {}
        if key is not None:
            data[key] = int(data.get(key, 0)) + 1
            events = list(data.get("events", []))[-49:]
            events.append({"kind": key, "time": time.time(), **event})
            data["events"] = events
        if clean_pid is not None:
            data["clean_pids"] = [*list(data.get("clean_pids", []))[-99:], clean_pid]
        f.seek(0)
        f.truncate()
        f.write(json.dumps(data))
