"""Regenerate ``bench/results/*.json`` and the generated tables of ``bench/RESULTS.md``.

Each benchmark stays runnable alone (``python bench/bench_X.py ...``); this runs them one after
another with the arguments below (``--quick``: smaller levels and shorter cells, for a shared or
slow machine), then rewrites every marked section of ``bench/RESULTS.md`` from the JSON::

    <!-- bench:NAME -->
    ... (generated: the bench's ``render(json)``) ...
    <!-- /bench:NAME -->

Text outside the markers (notes, interpretation, hand-run tables) is kept as it is. A section
whose JSON is missing is left untouched; a marker pair missing from RESULTS.md is appended.

Run::

    python bench/run_all.py [--quick] [--only burst,accuracy] [--render-only] [--results DIR] [--md FILE]
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))


@dataclass(frozen=True)
class Bench:
    """One benchmark: its module (``bench/<module>.py``, with ``render(data) -> str``), the JSON
    it writes (``results/<name>.json``), its arguments in a full and a quick run, and the title
    of its section."""

    name: str
    module: str
    title: str
    full: tuple[str, ...]
    quick: tuple[str, ...]


BENCHES: tuple[Bench, ...] = (
    Bench(
        "stream_users",
        "bench_stream_users",
        "Stream users on one client core",
        ("--levels", "100,250,500", "--seconds", "12"),
        (
            "--levels",
            "100,250",
            "--seconds",
            "8",
            "--clients",
            "streamslo per-stream,streamslo WS,HttpUser+requests,FastHttpUser readline,"
            "asyncio aiohttp,asyncio websockets",
        ),
    ),
    Bench(
        "accuracy",
        "bench_accuracy",
        "Accuracy against a known schedule",
        ("--levels", "16,100,250", "--seconds", "15"),
        ("--levels", "16,250", "--seconds", "8"),
    ),
    Bench(
        "burst",
        "bench_burst",
        "The bundled server under a 250-stream burst, and serving overhead",
        ("--repeats", "3", "--overhead", "--seconds", "20"),
        ("--repeats", "1", "--overhead", "--seconds", "20"),
    ),
    Bench(
        "memory",
        "bench_memory",
        "Memory per open stream",
        ("--levels", "50,500", "--server-levels", "10,250"),
        ("--levels", "50,300", "--server-levels", "10,150", "--seconds", "8"),
    ),
    Bench(
        "scaleout",
        "bench_scaleout",
        "Scale-out: one worker process vs two",
        ("--levels", "150,300", "--seconds", "15"),
        ("--levels", "400", "--seconds", "10"),
    ),
    Bench(
        "scaleout_shared",
        "bench_scaleout",
        "Scaling on this machine: the whole system on one core, then on two",
        (
            "--layout",
            "shared",
            "--processes",
            "1,2",
            "--levels",
            "450,500,550,600,800,900,950,1000,1100",
            "--seconds",
            "15",
            "--stop-after-fail",
        ),
        ("--layout", "shared", "--levels", "200,400", "--seconds", "8"),
    ),
    Bench(
        "relay",
        "bench_relay",
        "Worker-to-master record relay",
        (),
        ("--records", "1000", "--repeats", "2", "--seconds", "8"),
    ),
    Bench(
        "replay",
        "bench_replay",
        "Trace replay, client hang-ups and the prefix cache",
        (),
        ("--quick",),
    ),
    Bench(
        "flood",
        "bench_flood",
        "Flood: events per client core when nothing paces them",
        ("--streams", "20", "--seconds", "10"),
        ("--streams", "20", "--seconds", "6", "--clients", "streamslo SSE,asyncio raw"),
    ),
    Bench(
        "history",
        "bench_history",
        "Run history: the store, and the regression verdict's false alarms",
        ("--histories", "100"),
        ("--histories", "20", "--runs", "300"),
    ),
    Bench(
        "dialects",
        "bench_dialects",
        "Every --api dialect against one server; reasoning models' TTFO",
        ("--duration", "60"),
        ("--duration", "30"),
    ),
)


def begin(name: str) -> str:
    return f"<!-- bench:{name} -->"


def end(name: str) -> str:
    return f"<!-- /bench:{name} -->"


def rewrite(md: str, name: str, title: str, body: str) -> str:
    """``md`` with the section between ``name``'s markers replaced by ``body`` (appended, under
    ``title``, when the markers are absent)."""
    block = f"{begin(name)}\n{body.strip()}\n{end(name)}"
    pattern = re.compile(re.escape(begin(name)) + r".*?" + re.escape(end(name)), re.S)
    if pattern.search(md):
        return pattern.sub(lambda _m: block, md, count=1)
    return md.rstrip("\n") + f"\n\n## {title} (`bench/{name_to_file(name)}`)\n\n{block}\n"


def name_to_file(name: str) -> str:
    return next(f"{b.module}.py" for b in BENCHES if b.name == name)


def render_all(results: Path, md_path: Path, only: set[str] | None = None) -> list[str]:
    """Rewrite ``md_path``'s sections from the JSON in ``results``; the names rewritten."""
    md = md_path.read_text() if md_path.exists() else "# Benchmark results\n"
    done = []
    for b in BENCHES:
        path = results / f"{b.name}.json"
        if (only and b.name not in only) or not path.exists():
            continue
        data: dict[str, Any] = json.loads(path.read_text())
        body = importlib.import_module(b.module).render(data)
        stamp = data.get("written_at")
        if stamp:
            body += f"\n\n_Generated from `bench/results/{b.name}.json` ({stamp}, {data.get('cpus', '?')} CPUs)._"
        md = rewrite(md, b.name, b.title, body)
        done.append(b.name)
    md_path.write_text(md)
    return done


def run_one(b: Bench, quick: bool, results: Path) -> tuple[int, float]:
    """Run one benchmark as its own process; (exit code, seconds)."""
    args = b.quick if quick else b.full
    out = results / f"{b.name}.json"
    # Relative paths where they can be: the command is recorded in the JSON and RESULTS.md.
    shown = out.relative_to(BENCH.parent) if out.is_relative_to(BENCH.parent) else out
    cmd = [sys.executable, f"bench/{b.module}.py", *args, "--json", str(shown)]
    print(f"== {b.name}: {' '.join(cmd[1:])}", file=sys.stderr, flush=True)
    t = time.time()
    rc = subprocess.call(cmd, cwd=BENCH.parent)
    return rc, time.time() - t


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="smaller levels, shorter cells")
    p.add_argument(
        "--only",
        default="",
        help="these benches only, comma-separated: " + ",".join(b.name for b in BENCHES),
    )
    p.add_argument(
        "--render-only", action="store_true", help="rewrite RESULTS.md from the JSON; run nothing"
    )
    p.add_argument("--results", type=Path, default=BENCH / "results")
    p.add_argument("--md", type=Path, default=BENCH / "RESULTS.md")
    args = p.parse_args(argv)
    only = {x.strip() for x in args.only.split(",") if x.strip()} or None
    unknown = (only or set()) - {b.name for b in BENCHES}
    if unknown:
        p.error(f"unknown bench: {', '.join(sorted(unknown))}")
    failed = []
    if not args.render_only:
        args.results.mkdir(parents=True, exist_ok=True)
        for b in BENCHES:
            if only and b.name not in only:
                continue
            rc, secs = run_one(b, args.quick, args.results)
            print(f"== {b.name}: exit {rc} after {secs:.0f} s", file=sys.stderr, flush=True)
            if rc:
                failed.append(b.name)
    done = render_all(args.results, args.md, only)
    print(f"rewrote {args.md}: {', '.join(done) or 'nothing'}", file=sys.stderr)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
