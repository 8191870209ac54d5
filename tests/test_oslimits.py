"""The open-files limit is raised, never lowered, and never past the hard limit."""

from __future__ import annotations

import resource
import subprocess
import sys


def _in_child(code: str) -> str:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout.strip()


def test_raises_the_soft_limit_up_to_the_hard_one():
    out = _in_child(
        "import resource\n"
        "from streamslo.oslimits import raise_open_files\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (256, min(hard, 4096)))\n"
        "a = raise_open_files(2000)\n"
        "b = raise_open_files(100_000)\n"
        "c = raise_open_files(10)\n"
        "print(a, b, c, resource.getrlimit(resource.RLIMIT_NOFILE)[0])\n"
    )
    hard = min(resource.getrlimit(resource.RLIMIT_NOFILE)[1], 4096)
    a, b, c, now = map(int, out.split())
    assert a == min(2000, hard)
    assert b == hard  # capped by the hard limit
    assert c == hard == now  # never lowered
