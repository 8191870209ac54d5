"""The generator gives the C heap's free pages back (streamslo.loadgen.heap), so its RSS follows
the memory it uses: without it, glibc kept every page freed in the middle of its heaps and a
soak's RSS crept up while the memory in use stayed flat (bench/RESULTS.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.soak.conftest import REPO

glibc_only = pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.confstr("CS_GNU_LIBC_VERSION") is None,
    reason="malloc_trim is glibc's",
)

# A heap like a soak's: many blocks above malloc's small-object limit freed while every tenth
# stays (a stream's buffers freed, a long-lived row kept): one in fifty, so no free block reaches the top.
_FRAGMENT = """
import json, sys
from streamslo.loadgen import heap

def rss_kib():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))

def churn(rounds):
    kept = []
    for r in range(rounds):
        blocks = [bytes(2000 + (i % 7) * 100) for i in range(20_000)]
        kept.extend(blocks[::50])
        del blocks
        if TRIM:
            heap.trim()
    return kept

TRIM = sys.argv[1] == "trim"
heap.trim()  # loads the C library's function before the baseline
base = rss_kib()
kept = churn(int(sys.argv[2]))
print(json.dumps({"grew_kib": rss_kib() - base, "kept_kib": sum(map(len, kept)) // 1024}))
"""


def _grew(mode: str, rounds: int) -> dict[str, int]:
    r = subprocess.run(
        [sys.executable, "-c", _FRAGMENT, mode, str(rounds)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={**os.environ, "MALLOC_ARENA_MAX": "1"},
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)  # type: ignore[no-any-return]


@glibc_only
def test_trim_takes_a_short_while_and_says_so():
    from streamslo.loadgen import heap

    took = heap.trim()
    assert took is not None and 0.0 <= took < 1.0


@glibc_only
def test_a_fragmented_heap_costs_what_it_holds_once_trimmed():
    kept = _grew("keep", 3)
    trimmed = _grew("trim", 3)
    # Blocks still held: ~2.7 MiB in both. Untrimmed, a round's freed blocks stay resident
    # (~45 MiB: the heap never shrinks); trimmed, RSS stays near what is held (each block held
    # keeps its one or two pages).
    assert kept["grew_kib"] > 10 * kept["kept_kib"], kept
    assert trimmed["grew_kib"] < 4 * trimmed["kept_kib"], trimmed


_MONITOR = """
import gevent
from streamslo.loadgen import heap
from streamslo.loadgen.monitor import GeneratorMonitor
calls = []
heap.compact = lambda: calls.append(1)
m = GeneratorMonitor(None, "t")
m.start()
gevent.sleep(1.3)
m.stop()
print(len(calls))
"""


def test_the_monitor_trims_on_its_period_and_not_when_told_not_to():
    def calls(period: str) -> int:
        r = subprocess.run(
            [sys.executable, "-c", _MONITOR],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=REPO,
            env={**os.environ, "STREAMSLO_HEAP_TRIM_S": period},
        )
        assert r.returncode == 0, r.stderr
        return int(r.stdout.strip())

    assert 3 <= calls("0.25") <= 6  # 1.3 s at one every 0.25 s (a busy machine lags)
    assert calls("0") == 0


_CYCLES = """
import gc, json
from streamslo.loadgen import heap
gc.collect(); gc.freeze()
gc.set_threshold(50_000, 100, 1000)  # the generator's
obj = {"a": [1.5, 2, {"b": "c"}], "d": {"e": None}}
young = []
for second in range(1800):  # half an hour of a JSON file written every second
    json.dumps(obj, indent=2)
    if MODE == "compact" and second % 30 == 29:
        heap.compact()
    young.append(len(gc.get_objects(0)))
print(max(young[300:]))
"""


def test_compacting_keeps_the_young_cyclic_garbage_of_indented_json_small():
    def peak(mode: str) -> int:
        r = subprocess.run(
            [sys.executable, "-c", "MODE = " + repr(mode) + "\n" + _CYCLES],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=REPO,
        )
        assert r.returncode == 0, r.stderr
        return int(r.stdout)

    # Each indented dump leaves ~30 objects in cycles: 54,000 in half an hour, freed only
    # when the young generation reaches 50,000; compacted every 30 s, under 2,000.
    assert peak("none") > 20_000
    assert peak("compact") < 2_500


_ARROW = """
import json, os
import numpy as np
from streamslo.loadgen import heap  # as the generator does: before pyarrow
import pyarrow as pa
import pyarrow.parquet as pq
from streamslo.results.writer import warm_pyarrow

def rss_kib():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))

warm_pyarrow()
t = pa.table({"a": np.arange(1_000_000, dtype=np.float64)})
pq.write_table(t, pa.BufferOutputStream())
heap.trim()
base = rss_kib()
for _ in range(5):  # part files written, their buffers freed
    pq.write_table(t, pa.BufferOutputStream())
heap.trim()  # the generator's 30 s step
print(json.dumps({"pool": pa.default_memory_pool().backend_name, "kept_kib": rss_kib() - base}))
"""


@glibc_only
def test_arrow_buffers_go_back_when_freed():
    # mimalloc (arrow's default) kept such buffers resident in huge pages, trimmed or not:
    # ~80 MiB here.
    r = subprocess.run(
        [sys.executable, "-c", _ARROW], capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["pool"] == "system" and d["kept_kib"] < 2048, d
