"""Compare two tracemalloc snapshots of the generator (``bench_soak_memory.py --trace``): the
top growers by traceback (or by line), and the counts written beside each snapshot.

Run: ``python bench/memtrace_diff.py DIR/<pid>-1.snap DIR/<pid>-2.snap [--by traceback|lineno]
[--top 15]``
"""

from __future__ import annotations

import argparse
import json
import tracemalloc
from pathlib import Path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("a", type=Path)
    p.add_argument("b", type=Path)
    p.add_argument("--by", default="traceback", choices=("traceback", "lineno", "filename"))
    p.add_argument("--top", type=int, default=15)
    p.add_argument("--frames", type=int, default=6, help="frames shown per traceback")
    args = p.parse_args()
    ja, jb = (json.loads(x.with_suffix(".json").read_text()) for x in (args.a, args.b))
    minutes = (jb["t"] - ja["t"]) / 60.0
    print(f"{minutes:.1f} min apart")
    for key in ("rss_kib", "traced", "allocated_blocks", "gc_gen_sizes", "gc_count"):
        print(f"  {key}: {ja.get(key)} -> {jb.get(key)}")
    for key in ("uordblks", "fordblks", "arena", "hblkhd"):
        print(f"  mallinfo {key}: {ja['mallinfo'].get(key)} -> {jb['mallinfo'].get(key)}")
    sa, sb = ja.get("structures", {}), jb.get("structures", {})
    for key in sorted(set(sa) | set(sb)):
        if sa.get(key) != sb.get(key):
            print(f"  {key}: {sa.get(key)} -> {sb.get(key)}")
    for j in (ja, jb):
        if "collect_unreachable" in j:
            print(
                f"  full collection: {j['collect_unreachable']} unreachable, traced "
                f"{j['traced'][0] / 2**20:.1f} -> {j['traced_after_collect'][0] / 2**20:.1f} MiB;"
                f" garbage types {j['garbage_types'][:12]}"
            )
    snap_a = tracemalloc.Snapshot.load(str(args.a))
    snap_b = tracemalloc.Snapshot.load(str(args.b))
    stats = snap_b.compare_to(snap_a, args.by)
    total = sum(s.size_diff for s in stats)
    print(f"\ntraced growth {total / 2**20:+.2f} MiB ({total / 2**20 / minutes * 60:+.1f} MiB/h)")
    for s in stats[: args.top]:
        print(
            f"\n{s.size_diff / 1024:+9.1f} KiB ({s.count_diff:+d} blocks), now "
            f"{s.size / 1024:.1f} KiB in {s.count} blocks"
        )
        for line in s.traceback.format(limit=args.frames, most_recent_first=True):
            print("   " + line)


if __name__ == "__main__":
    main()
