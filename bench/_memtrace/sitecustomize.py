"""Memory tracing for the load generator of a soak (bench only; ``bench/bench_soak_memory.py
--trace``): put this directory on ``PYTHONPATH`` with ``STREAMSLO_MEMTRACE=DIR`` set, and each
Python process started then traces its allocations (``tracemalloc``, ``STREAMSLO_MEMTRACE_FRAMES`` frames, default 3; 0: counts only) and, on
``SIGUSR1``, writes ``DIR/<pid>-<n>.snap`` (a tracemalloc snapshot) and ``DIR/<pid>-<n>.json``
(counts: objects by type, the sizes of Locust's and streamslo's per-run structures, the
allocator's own figures). Compare two with ``bench/memtrace_diff.py``.
"""

from __future__ import annotations

import os

_DIR = os.environ.get("STREAMSLO_MEMTRACE")

if _DIR:
    import signal
    import tracemalloc

    _frames = int(os.environ.get("STREAMSLO_MEMTRACE_FRAMES", "3"))
    if _frames > 0:  # 0: counts only
        tracemalloc.start(_frames)
    _n = [0]

    def _dump(signum: int, frame: object) -> None:
        import sys

        _n[0] += 1
        base = os.path.join(str(_DIR), f"{os.getpid()}-{_n[0]}")
        try:
            sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
            import _memcounts

            _memcounts.dump(base)
        except Exception as exc:  # never kill the generator
            with open(base + ".err", "w") as f:
                f.write(repr(exc))

    signal.signal(signal.SIGUSR1, _dump)
