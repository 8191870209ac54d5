"""A worker of another streamslo or Locust version, or with a clock too far from the master's,
is refused before load: the judgement as a pure function, then real Locust processes (a master
and workers that claim another version or run another clock)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

import streamslo
from streamslo.loadgen.admission import MAX_CLOCK_SKEW_S, Hello, judge
from tests.faulty.process import unused_port
from tests.loadgen.helpers import LOCUSTFILE, REPO, stop_process

MASTER = Hello("0.1.0", "2.47.0", 0.0, "master-host")


def test_the_same_versions_and_a_close_clock_are_admitted():
    assert judge(Hello("0.1.0", "2.47.0", 1000.5, "w"), MASTER, now=1000.0) is None


def test_another_streamslo_version_is_refused_naming_both():
    why = judge(Hello("0.0.9", "2.47.0", 1000.0, "w"), MASTER, now=1000.0)
    assert why is not None
    assert "streamslo 0.0.9" in why and "streamslo 0.1.0" in why


def test_another_locust_version_is_refused_naming_both():
    why = judge(Hello("0.1.0", "2.46.1", 1000.0, "w"), MASTER, now=1000.0)
    assert why is not None and "Locust 2.46.1" in why and "Locust 2.47.0" in why


@pytest.mark.parametrize("skew", [MAX_CLOCK_SKEW_S + 0.5, -(MAX_CLOCK_SKEW_S + 30)])
def test_a_clock_too_far_off_is_refused_with_both_clocks(skew):
    why = judge(Hello("0.1.0", "2.47.0", 1_800_000_000.0 + skew, "w"), MASTER, 1_800_000_000.0)
    assert why is not None
    assert f"{abs(skew):.1f} s {'ahead of' if skew > 0 else 'behind'}" in why
    assert "2027-01-15T08:00:00.000Z" in why  # the master's clock, and the worker's beside it


def test_a_clock_just_within_the_limit_is_admitted():
    assert judge(Hello("0.1.0", "2.47.0", 1000.0 - 1.9, "w"), MASTER, 1000.0) is None


def test_a_hello_that_is_no_hello_is_none():
    assert Hello.from_message({"streamslo": "0.1.0"}) is None
    assert Hello.from_message("hello") is None
    h = Hello.from_message(Hello("a", "b", 1.0, "h").as_message())
    assert h == Hello("a", "b", 1.0, "h")


# ----------------------------------------------------------------------- processes
#: A worker that claims another streamslo version (or runs a clock 30 s ahead): the real
#: locust entry point, with one attribute patched before it starts.
_WRAPPER = """
import sys, time
import streamslo, streamslo.loadgen.admission as adm
how, sys.argv = sys.argv[1], ["locust", *sys.argv[2:]]
if how == "version":
    streamslo.__version__ = "0.0.1-other"
elif how == "clock":
    adm.wall_clock = lambda: time.time() + 30.0
from locust.main import main
main()
"""


def _worker(how: str, port: int, log: Path, cwd: Path) -> subprocess.Popen[bytes]:
    cwd.mkdir()
    with log.open("wb") as out:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(
            [
                *(sys.executable, "-c", _WRAPPER, how, "-f", str(LOCUSTFILE), "--worker"),
                *("--master-host", "127.0.0.1", "--master-port", str(port)),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
        )


@pytest.mark.load
def test_workers_of_another_version_or_clock_are_refused_before_load(tmp_path):
    port = unused_port()
    master_log = tmp_path / "master.log"
    with master_log.open("wb") as out:
        master = subprocess.Popen(
            [
                *(sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--master", "--headless"),
                *("--master-bind-host", "127.0.0.1", "--master-bind-port", str(port)),
                *("--expect-workers", "1", "--expect-workers-max-wait", "12"),
                *("-u", "1", "-r", "1", "-t", "3s", "--host", "http://127.0.0.1:9"),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=REPO,
        )
    time.sleep(1.5)
    logs = {how: tmp_path / f"worker-{how}.log" for how in ("version", "clock")}
    workers = {how: _worker(how, port, logs[how], tmp_path / how) for how in logs}
    try:
        codes = {how: p.wait(timeout=60) for how, p in workers.items()}
        master.wait(timeout=60)
    finally:
        for p in (*workers.values(), master):
            stop_process(p)
    version_log = logs["version"].read_text(errors="replace")
    clock_log = logs["clock"].read_text(errors="replace")
    master_text = master_log.read_text(errors="replace")
    # Each worker says why, with both sides named, and exits 2 (bad input).
    assert codes == {"version": 2, "clock": 2}, (codes, version_log[-2000:], clock_log[-2000:])
    assert "streamslo 0.0.1-other with Locust" in version_log
    assert f"the master streamslo {streamslo.__version__}" in version_log
    assert "s ahead of the master's" in clock_log and "synchronise" in clock_log
    # The master refused both and never handed out a user.
    assert master_text.count("refused:") == 2, master_text[-3000:]
    assert "Sending spawn jobs" not in master_text
    assert "streamslo 0.0.1-other" in master_text
