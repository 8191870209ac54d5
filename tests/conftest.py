"""Settings of the whole suite."""

from __future__ import annotations

import compileall
import hashlib
import os
import sys
import tempfile
from pathlib import Path

import pytest

from streamslo.oslimits import raise_open_files

REPO = Path(__file__).resolve().parents[1]


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Each checkout gets its own temporary root (emptied when a session starts). In the shared
    /tmp/pytest-of-USER every session of the user prunes the older ones: a session of another
    checkout running meanwhile removed directories under this one (rm_rf errors at the end,
    failures under filterwarnings = error). ``--basetemp`` still wins; xdist workers get theirs
    from the controller."""
    # Like the commands (Locust raises its own to 10000): tests that hold hundreds of
    # connections in one process (client, proxy and upstream sockets together) must not meet a
    # soft open-files limit of 1024 on the CI machine.
    raise_open_files(16384)
    # Where PYTHONDONTWRITEBYTECODE is set, every worker rewrote every test module's asserts
    # and compiled every helper module again, in every run (about 4 s of CPU a worker): cache
    # them, as an unset PYTHONDONTWRITEBYTECODE would (the caches are ignored by git).
    sys.dont_write_bytecode = False
    if not hasattr(config, "workerinput"):
        # The suite starts hundreds of processes that import streamslo (servers, Locust, the
        # CLI). Where PYTHONDONTWRITEBYTECODE is set nothing caches their bytecode, and each
        # one compiled the package again: compile it once here (a no-op when it is current).
        compileall.compile_dir(REPO / "streamslo", quiet=2)
    if config.option.basetemp is None and not hasattr(config, "workerinput"):
        tag = hashlib.sha256(str(REPO).encode()).hexdigest()[:10]
        config.option.basetemp = str(Path(tempfile.gettempdir()) / f"streamslo-tests-{tag}")


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto`` starts three workers per core (at most 24): the suite mostly waits (servers
    streaming at a set pace, load runs of a set length; a worker averages under half a core).
    On 2 cores with a CPU hog on one of them the suite took 8:08 to 8:30 with 4 workers and
    6:26 with 6; one worker per core left the cores idle (10 min without the hog).
    ``PYTEST_XDIST_AUTO_NUM_WORKERS`` still decides when set."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS") or config.option.numprocesses != "auto":
        return None
    return min(24, 3 * max(1, len(os.sched_getaffinity(0))))


#: Seconds each slow test file took in a whole run (``python -m tests.file_times JUNIT.xml``
#: writes it): the slowest files are scheduled first.
FILE_TIMES = REPO / "tests" / "file_times.json"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The slowest files first, each file's tests kept together and in order: with ``--dist
    loadfile`` a worker takes one file at a time in this order, so the long files start at once
    and the short ones fill in at the end (a long file started last was the suite's tail)."""
    import json

    try:
        seconds: dict[str, float] = json.loads(FILE_TIMES.read_text())
    except (OSError, ValueError):
        return
    first_seen: dict[str, int] = {}
    for i, item in enumerate(items):
        first_seen.setdefault(item.nodeid.split("::", 1)[0], i)

    def key(item: pytest.Item) -> tuple[float, int]:
        path = item.nodeid.split("::", 1)[0]
        return (-seconds.get(path, 0.0), first_seen[path])

    items.sort(key=key)  # stable: a file's own order is kept
