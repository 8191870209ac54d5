"""The test-start prewarm: Locust's stop() must not map every module to its file mid-stream.

Locust's ``Runner.stop()`` calls ``inspect.stack()`` while users still finish their streams;
cold, that walks every loaded module with a ``realpath`` each (60-300 ms in the event loop on
this machine, measured by ``bench/bench_accuracy.py`` as one long gap in every stream in flight
at the end of a run). Each case runs in a fresh interpreter, so ``inspect``'s caches are cold.
"""

from __future__ import annotations

import subprocess
import sys

_PROBE = """
import inspect, os, sys
import locust.runners
import streamslo.loadgen.locustfile
from streamslo.loadgen.prewarm import prewarm

if sys.argv[1] == "warm":
    prewarm()
calls = 0
real = os.path.realpath

def counting(*args, **kwargs):
    global calls
    calls += 1
    return real(*args, **kwargs)

os.path.realpath = counting
inspect.stack()
print(calls, len(sys.modules))
"""


def _realpaths_at_stop(mode: str) -> tuple[int, int]:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, mode],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    calls, modules = out.stdout.split()
    return int(calls), int(modules)


def test_cold_inspect_stack_walks_every_module() -> None:
    calls, modules = _realpaths_at_stop("cold")
    assert calls > modules // 2, (calls, modules)


def test_prewarm_leaves_inspect_stack_no_module_walk() -> None:
    calls, modules = _realpaths_at_stop("warm")
    assert calls <= 20, (
        f"inspect.stack() after prewarm still did {calls} realpath calls ({modules} modules)"
    )
