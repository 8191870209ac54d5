"""Helpers of the benchmark tests: run a bench script as its own process, import its module,
and the mark of the runs that need a known machine."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.faulty.fixtures import faulty_server  # noqa: F401

__all__ = ["BENCH", "REPO", "bench_module", "bench_run", "run_bench"]

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"

#: A benchmark run: it starts servers and Locust, and what it asserts compares timings (the suite's
#: against an independent client's, CPU per stream), true only on a quiet, known machine. The
#: default suite skips it, visibly; ``tox -e bench`` (``STREAMSLO_BENCH_SMOKE=1``) and the nightly
#: workflow run it.
bench_run = pytest.mark.skipif(
    os.environ.get("STREAMSLO_BENCH_SMOKE") != "1",
    reason="a benchmark run (servers, Locust, timings compared): set STREAMSLO_BENCH_SMOKE=1 "
    "(tox -e bench) to run it",
)


def bench_module(name: str) -> Any:
    """``bench/<name>.py`` as a module (``bench/`` is not a package: its scripts import each
    other by name)."""
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    return importlib.import_module(name)


def run_bench(script: str, out: Path, *args: str, timeout: float = 240) -> dict[str, Any]:
    """Run ``bench/<script>.py ARGS --json OUT`` and return the JSON it wrote (the run's output
    in the assertion message when it failed)."""
    cmd = [sys.executable, str(BENCH / f"{script}.py"), *args, "--json", str(out)]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0 and out.exists(), (
        f"{script} exit {proc.returncode}:\n{proc.stderr[-3000:]}"
    )
    data: dict[str, Any] = json.loads(out.read_text())
    return data
