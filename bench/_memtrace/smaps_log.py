"""Log a process's resident memory by kind of mapping every N seconds until it exits (bench
only; read-only /proc): total RSS, the C heap, the largest anonymous region (pyarrow's mimalloc
arena in the generator), other anonymous memory, files, and transparent huge pages.

Run: ``python bench/_memtrace/smaps_log.py PID OUT.tsv [SECONDS]``
"""

from __future__ import annotations

import sys
import time


def sample(pid: int) -> dict[str, int]:
    out = {"rss": 0, "heap": 0, "anon_big": 0, "anon": 0, "file": 0, "thp": 0}
    regions: list[tuple[int, str, int]] = []
    kind, size, rss = "anon", 0, 0
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            parts = line.split()
            if parts and "-" in parts[0] and not parts[0].endswith(":"):
                if rss:
                    regions.append((rss, kind, size))
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                size = hi - lo
                name = parts[5] if len(parts) > 5 else ""
                kind = "heap" if name == "[heap]" else "file" if name.startswith("/") else "anon"
                rss = 0
            elif parts and parts[0] == "Rss:":
                rss = int(parts[1])
            elif parts and parts[0] == "AnonHugePages:":
                out["thp"] += int(parts[1])
    if rss:
        regions.append((rss, kind, size))
    for r, k, s in regions:
        out["rss"] += r
        if k == "anon" and s >= 1 << 30:
            out["anon_big"] += r
        else:
            out[k] += r
    return out


def main() -> None:
    pid, path = int(sys.argv[1]), sys.argv[2]
    every = float(sys.argv[3]) if len(sys.argv) > 3 else 30.0
    with open(path, "a") as f:
        f.write("utc\trss_kib\theap\tanon_1gib_regions\tanon_other\tfile\tthp\n")
        while True:
            try:
                s = sample(pid)
            except OSError:
                return
            f.write(
                f"{time.strftime('%H:%M:%S', time.gmtime())}\t{s['rss']}\t{s['heap']}\t"
                f"{s['anon_big']}\t{s['anon']}\t{s['file']}\t{s['thp']}\n"
            )
            f.flush()
            time.sleep(every)


if __name__ == "__main__":
    main()
