"""Giving the C heap's free pages back to the system, so that the generator's RSS follows the
memory it uses.

glibc's ``free()`` keeps freed memory inside its heaps: only a free block at the very top of a
heap goes back to the system. A generator frees memory in the middle of its heaps all the time
(read buffers, rows, a part file's tables, a stream's last objects) while a few long-lived
blocks stay above it, so the free space inside the heaps only grows. Measured on a soak of 150
streams (docs/soak.md, bench/RESULTS.md): the memory in use stayed at 27–29 MiB while the free
space held inside the heaps grew 6 → 19 MiB in 8 minutes, and RSS with it; ``malloc_trim(0)``
hands those free pages back (``madvise``), the blocks in use stay where they are.

:func:`trim` does that; :func:`compact` first frees the young generation's cyclic garbage.
:class:`~streamslo.loadgen.monitor.GeneratorMonitor` calls :func:`compact` once every
:data:`TRIM_EVERY_S`. Elsewhere than glibc (musl, macOS) :func:`trim` does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import os
import time
from collections.abc import Callable

__all__ = ["TRIM_EVERY_S", "compact", "trim"]


# Arrow's buffers (the gap part files, every 2 s) in the C heap, which trim() reaches, not in
# its default mimalloc: mimalloc kept them resident in a 1 GiB arena of transparent huge pages
# (a 2-hour soak's generator: 8 -> 17 MiB there and back, in 2 MiB steps). Read once, when
# pyarrow starts: the load generator imports this module before pyarrow. Set it to "mimalloc"
# (or "jemalloc") to keep arrow's own.
os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")


#: How often the generator gives its free heap pages back (seconds); ``STREAMSLO_HEAP_TRIM_S``
#: sets it (0: never, as before; ``bench/bench_soak_memory.py --no-trim``).
def _period(default: float = 30.0) -> float:
    try:
        v = float(os.environ.get("STREAMSLO_HEAP_TRIM_S", default))
    except ValueError:
        return default
    return v if v >= 0 else default


TRIM_EVERY_S = _period()

_loaded = False
_malloc_trim: Callable[[int], int] | None = None


def _load() -> Callable[[int], int] | None:
    global _loaded, _malloc_trim
    if not _loaded:
        _loaded = True
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            fn = getattr(libc, "malloc_trim", None)
        except OSError:
            fn = None
        if fn is not None:
            fn.argtypes = [ctypes.c_size_t]
            fn.restype = ctypes.c_int
            _malloc_trim = fn
    return _malloc_trim


def trim() -> float | None:
    """Give the heap's free pages back to the system; the seconds it took, or None where the
    C library has no ``malloc_trim``."""
    fn = _load()
    if fn is None:
        return None
    t = time.perf_counter()
    fn(0)
    return time.perf_counter() - t


def compact() -> None:
    """Free the young generation's cyclic garbage, then give the heap's free pages back.

    The generator collects the young generation only every 50,000 net allocations
    (:meth:`~streamslo.loadgen.recorder.RunRecorder.on_test_start`: pauses cost lateness); its
    one steady source of cycles is the JSON it writes every 2 s (``json.dumps`` with ``indent``
    builds closures that refer to each other), ~2,000 objects a minute, so young garbage
    built up for ~25 minutes and its memory went back at once: a saw of several MiB in a
    soak's RSS. Collecting the young generation here (a millisecond or two) keeps it small.
    """
    gc.collect(0)
    trim()
