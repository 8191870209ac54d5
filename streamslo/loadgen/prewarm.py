"""Work done once at test start so that it does not stall the streams later.

Locust's ``Runner.stop()`` begins with ``inspect.stack()`` (to log who called it). The first
``inspect`` lookup of a process maps every loaded module to its file: a ``realpath`` per module,
about a thousand modules in a generator (Locust, gevent, pandas, pyarrow): 60-300 ms of CPU on
this machine, in the event loop, while the users are still finishing their streams (Locust's
``--stop-timeout`` lets them). Every stream in flight at the end of a run then read one gap
tens to hundreds of ms too long: the "72 ms gap with a 47 ms generator stall" of a 16-stream run.
Doing that lookup once at test start, before any stream, fills ``inspect``'s caches (and
``linecache`` with the source of the Locust modules on the stop path); the lookup at stop then
costs about a millisecond.
"""

from __future__ import annotations

import importlib
import inspect
import linecache

__all__ = ["prewarm"]

#: The modules whose frames are on the stack when Locust stops a run (their source is read).
_STOP_PATH = ("locust.main", "locust.runners", "locust.event", "locust.env")


def prewarm() -> None:
    """Fill ``inspect``'s module-file caches and ``linecache`` for Locust's stop path now."""
    inspect.getmodule(prewarm.__code__, "<streamslo-prewarm>")
    for name in _STOP_PATH:
        try:
            path = inspect.getsourcefile(importlib.import_module(name))
        except (ImportError, TypeError):
            continue
        if path:
            linecache.getlines(path)
