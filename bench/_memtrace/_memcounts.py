"""What ``sitecustomize.py`` writes on ``SIGUSR1``: a tracemalloc snapshot and counts."""

from __future__ import annotations

import ctypes
import gc
import json
import os
import sys
import time
import tracemalloc
from collections import Counter
from typing import Any


def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class _Mallinfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def _mallinfo() -> dict[str, int]:
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = _Mallinfo2
        m = libc.mallinfo2()
        return {f[0]: int(getattr(m, f[0])) for f in _Mallinfo2._fields_}
    except Exception:
        return {}


def _types(objs: list[Any], top: int = 25) -> list[tuple[str, int]]:
    c = Counter(type(o).__qualname__ for o in objs)
    return c.most_common(top)


def _structures() -> dict[str, Any]:
    out: dict[str, Any] = {}
    hooks = sys.modules.get("streamslo.loadgen.hooks")
    env = getattr(hooks, "_env_holder", {}).get("env") if hooks else None
    if env is None:
        return out
    stats = env.stats
    entries = {f"{k[1]} {k[0]}": e for k, e in stats.entries.items()}
    entries["Aggregated"] = stats.total
    out["locust_entries"] = {
        name: {
            "num_requests": e.num_requests,
            "response_times": len(e.response_times),
            "num_reqs_per_sec": len(e.num_reqs_per_sec),
            "num_fail_per_sec": len(e.num_fail_per_sec),
            "response_times_cache": len(e.response_times_cache or ()),
        }
        for name, e in entries.items()
    }
    out["locust_errors"] = len(stats.errors)
    out["locust_history"] = len(stats.history)
    runner = env.runner
    out["locust_exceptions"] = len(getattr(runner, "exceptions", {}) or {})
    out["locust_user_greenlets"] = len(getattr(runner, "user_greenlets", ()) or ())
    rec = getattr(env, "_streamslo_recorder", None)
    if rec is not None:
        out["recorder_queue"] = len(rec._queue)
        out["recorder_in_flight"] = rec.in_flight
        agg = rec.aggregator
        out["aggregator_parts"] = len(agg._parts) if agg is not None else None
        w = rec.writer
        if w is not None:
            out["writer_pending"] = len(w._pending)
            out["writer_unwritten_bytes"] = len(w._unwritten)
            out["writer_batch"] = len(w._batch)
        mon = rec.monitor
        if mon is not None:
            out["monitor_lag_buckets"] = int(mon.lag._counts.size)
    ch = getattr(env, "_streamslo_windows", None)
    book = getattr(ch, "book", None)
    if book is not None:
        out["book_open"] = len(book._open)
        out["book_totals_groups"] = len(book.totals)
        out["book_totals_buckets"] = sum(
            int(h._counts.size) + len(h._pending)
            for agg in book.totals.values()
            for h in agg.trends.values()
        )
        out["book_sources"] = len(book._sources)
    return out


def _smaps() -> dict[str, int]:
    """RSS (KiB) by kind of mapping: the C heap, other anonymous memory, files."""
    out: dict[str, int] = {"heap": 0, "anon": 0, "file": 0, "stack": 0}
    kind = "anon"
    with open("/proc/self/smaps") as f:
        for line in f:
            parts = line.split()
            if not parts:
                continue
            if "-" in parts[0] and len(parts) >= 5 and not parts[0].endswith(":"):
                name = parts[5] if len(parts) > 5 else ""
                kind = (
                    "heap"
                    if name == "[heap]"
                    else "stack"
                    if name.startswith("[stack")
                    else "file"
                    if name.startswith("/")
                    else "anon"
                )
            elif parts[0] == "Rss:":
                out[kind] += int(parts[1])
    return out


def _pymalloc() -> dict[str, int]:
    """pymalloc's own counts (``sys._debugmallocstats``, which writes to fd 2)."""
    import tempfile

    out: dict[str, int] = {}
    with tempfile.TemporaryFile("w+") as tmp:
        saved = os.dup(2)
        try:
            os.dup2(tmp.fileno(), 2)
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        tmp.seek(0)
        for line in tmp:
            if line.startswith("# arenas allocated current"):
                out["arenas_current"] = int(line.split("=")[1].replace(",", ""))
            elif line.startswith("# arenas highwater mark"):
                out["arenas_highwater"] = int(line.split("=")[1].replace(",", ""))
            elif line.startswith("# bytes in allocated blocks"):
                out["bytes_in_blocks"] = int(line.split("=")[1].replace(",", ""))
            elif line.startswith("# bytes in available blocks"):
                out["bytes_available"] = int(line.split("=")[1].replace(",", ""))
            elif line.rstrip().endswith("bytes in arenas") or "Total" in line:
                pass
    return out


def _arrow() -> dict[str, Any]:
    pa = sys.modules.get("pyarrow")
    if pa is None:
        return {}
    pool = pa.default_memory_pool()
    return {
        "backend": pool.backend_name,
        "bytes_allocated": pool.bytes_allocated(),
        "max_memory": pool.max_memory(),
    }


def dump(base: str) -> None:
    t0 = time.time()
    info: dict[str, Any] = {"t": t0, "pid": os.getpid()}
    info["rss_kib"] = _rss_kib()
    info["traced"] = tracemalloc.get_traced_memory()
    info["allocated_blocks"] = sys.getallocatedblocks()
    info["mallinfo"] = _mallinfo()
    info["smaps_kib"] = _smaps()
    info["pymalloc"] = _pymalloc()
    info["arrow"] = _arrow()
    info["gc_count"] = gc.get_count()
    info["gc_threshold"] = gc.get_threshold()
    info["gc_freeze_count"] = gc.get_freeze_count()
    info["gc_stats"] = gc.get_stats()
    gens = [gc.get_objects(generation=g) for g in range(3)]
    info["gc_gen_sizes"] = [len(g) for g in gens]
    info["gen2_types"] = _types(gens[2])
    del gens
    info["structures"] = _structures()
    if tracemalloc.is_tracing():
        snap = tracemalloc.take_snapshot()
        snap = snap.filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
        snap.dump(base + ".snap")
        del snap
    if os.environ.get("STREAMSLO_MEMTRACE_COLLECT"):
        # Which of gen 2 is garbage that only a full collection frees (cycles)?
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            n = gc.collect()
            info["collect_unreachable"] = n
            info["garbage_types"] = _types(gc.garbage, 40)
            funcs = Counter(
                f"{o.__qualname__} {o.__code__.co_filename}:{o.__code__.co_firstlineno}"
                for o in gc.garbage
                if type(o).__name__ == "function"
            )
            info["garbage_functions"] = funcs.most_common(20)
            dicts = Counter(
                ",".join(sorted(map(str, o))[:6]) for o in gc.garbage if type(o) is dict
            )
            info["garbage_dict_keys"] = dicts.most_common(10)
            gc.garbage.clear()
        finally:
            gc.set_debug(0)
        gc.collect()  # the cycles saved above, freed now
        info["traced_after_collect"] = tracemalloc.get_traced_memory()
        info["rss_kib_after_collect"] = _rss_kib()
        info["mallinfo_after_collect"] = _mallinfo()
    if os.environ.get("STREAMSLO_MEMTRACE_TRIM", "0") == "1":
        # What would giving the heap's free pages back cost, and what would it return?
        libc = ctypes.CDLL("libc.so.6")
        before = _rss_kib()
        t1 = time.perf_counter()
        libc.malloc_trim(0)
        info["trim_ms"] = (time.perf_counter() - t1) * 1000.0
        info["trim_rss_kib"] = [before, _rss_kib()]
        info["mallinfo_after_trim"] = _mallinfo()
    info["dump_s"] = time.time() - t0
    with open(base + ".json", "w") as f:
        json.dump(info, f, indent=1)
