"""Stopping a run from outside: SIGTERM (``timeout``), a second signal, a killed Locust, and
``compare`` interrupted. Each time: no process of the run's process groups survives, and the
results directory is finalized (``complete: true``) with its rows."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from streamslo.results.layout import SCHEMA_VERSION, Layout, load_run
from streamslo.run.signals import REPEAT_WINDOW_S
from tests.loadgen.helpers import REPO, PipeReader

pytestmark = pytest.mark.load


class ProcessWatch:
    """Records every descendant of ``root`` (and its process group) while it runs."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.seen: dict[int, psutil.Process] = {}
        self.cmdlines: dict[int, str] = {}
        self.groups: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(0.1):
            try:
                procs = psutil.Process(self.root).children(recursive=True)
            except psutil.NoSuchProcess:
                return  # the root is gone: nothing more will start
            except psutil.Error:
                continue  # a child went away while it was listed: look again
            for p in procs:
                # Looked at on every pass, not only when first seen: a child caught between its
                # fork and its exec still shows its parent's command line (and may then change
                # its process group), which on a loaded machine can last past one pass.
                try:
                    self.groups.add(os.getpgid(p.pid))
                    self.cmdlines[p.pid] = " ".join(p.cmdline())
                    self.seen.setdefault(p.pid, p)
                except (OSError, psutil.Error):
                    continue

    def named(self, word: str) -> list[psutil.Process]:
        """Recorded processes whose command line had ``word`` in it."""
        return [self.seen[pid] for pid, cmd in self.cmdlines.items() if word in cmd]

    def survivors(self) -> list[str]:
        """Every recorded process still alive, and any process left in a recorded group."""
        self._stop.set()
        self._thread.join()
        time.sleep(0.3)
        alive = []
        own = os.getpgrp()
        for p in psutil.process_iter():
            try:
                if p.status() == psutil.STATUS_ZOMBIE:
                    continue
                pgid = os.getpgid(p.pid)
                known = p.pid in self.seen and self.seen[p.pid].create_time() == p.create_time()
                if known or (pgid in self.groups and pgid != own):
                    alive.append(f"{p.pid} {' '.join(p.cmdline())[:120]}")
            except (psutil.Error, OSError):
                continue
        return alive


def _start(*cmd: str) -> tuple[subprocess.Popen[str], ProcessWatch]:
    proc = subprocess.Popen(
        list(cmd), cwd=REPO, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    return proc, ProcessWatch(proc.pid)


def _run_cmd(host: str, out: Path, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "streamslo",
        "run",
        "--host",
        host,
        "--out",
        str(out),
        "--model",
        "timed",
        "--users",
        "4",
        "--allow-invalid",
        *args,
    ]


def _wait_rows(streams_csv: Path, proc: subprocess.Popen[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"exited early ({proc.returncode}): {proc.communicate()}")
        if streams_csv.exists() and len(streams_csv.read_bytes().splitlines()) > 1:
            return
        time.sleep(0.2)
    raise AssertionError(f"no rows in {streams_csv} after {timeout}s")


def _finalized(out: Path) -> dict:
    run = json.loads(Layout(out).run_json.read_text())
    assert run["complete"] is True and run["schema_version"] == SCHEMA_VERSION
    data = load_run(out)
    assert len(data.streams) > 0 and (data.streams["outcome"] == "ok").sum() > 0
    assert data.skipped_rows == 0
    return run


def test_timeout_sigterm_drains_finalizes_and_leaves_no_process(faulty_server, tmp_path):
    out = tmp_path / "run"
    # ``timeout`` stopped by SIGTERM does what it does when its time is up (coreutils' cleanup):
    # SIGTERM to the command, then to its whole process group, so the run gets the signal twice
    # at once. Stopping it once the load has begun (not after a fixed 8 s) keeps the test
    # independent of how fast the machine starts Locust.
    proc, watch = _start(
        "timeout",
        "--preserve-status",
        "-s",
        "TERM",
        "600",
        *_run_cmd(
            faulty_server.base_url, out, "--duration", "60", "--max-tokens", "20", "--drain", "5"
        ),
    )
    _wait_rows(Layout(out).streams_csv, proc, 120)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=90)
    assert proc.returncode == 143, err
    assert time.monotonic() - t0 < 5 + 40  # the drain (5 s), not the duration (60 s)
    assert "interrupted (SIGTERM); exit code 143" in err
    assert "second stop signal" not in err  # timeout's double delivery counted once
    assert watch.named("locust"), "the run started no Locust?"
    assert watch.survivors() == []
    run = _finalized(out)
    assert run["interrupted"] is True and run["stop_signal"] == "SIGTERM" and not run["killed"]
    assert (Layout(out).summary_json).exists() and (Layout(out).slo_json).exists()


def test_a_second_signal_kills_at_once_and_still_finalizes(faulty_server, tmp_path):
    out = tmp_path / "run"
    # 100-token streams take ~5.3 s: some are always in flight, and the drain would be 60 s.
    proc, watch = _start(
        *_run_cmd(
            faulty_server.base_url, out, "--duration", "60", "--max-tokens", "100", "--drain", "60"
        )
    )
    _wait_rows(Layout(out).streams_csv, proc, 120)
    err_lines, out_lines = PipeReader(proc.stderr), PipeReader(proc.stdout)
    proc.send_signal(signal.SIGTERM)
    # The first signal was handled (it says so); a second one more than the repeat window
    # later is a real second signal, however late the first handler ran.
    err_lines.wait_for("interrupted")
    time.sleep(REPEAT_WINDOW_S + 0.5)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    err, _ = err_lines.join(), out_lines.join()
    assert time.monotonic() - t0 < 45, "the second signal did not cut the drain (60 s) short"
    assert proc.returncode == 143, err
    assert "killing the child processes now" in err
    assert watch.survivors() == []
    assert _finalized(out)["interrupted"] is True


def test_a_killed_locust_is_finalized_and_said(faulty_server, tmp_path):
    out = tmp_path / "run"
    proc, watch = _start(
        *_run_cmd(
            faulty_server.base_url, out, "--duration", "60", "--max-tokens", "8", "--drain", "5"
        )
    )
    _wait_rows(Layout(out).streams_csv, proc, 120)
    time.sleep(2.5)  # a flush or two more
    (locust,) = [p for p in watch.named("locust") if p.ppid() == proc.pid]
    locust.kill()
    t0 = time.monotonic()
    _, err = proc.communicate(timeout=60)
    assert time.monotonic() - t0 < 40  # not the rest of the duration (60 s)
    assert proc.returncode == 1, err
    assert "the load generator (locust) was killed by SIGKILL" in err and "killed: true" in err
    assert watch.survivors() == []
    run = _finalized(out)
    assert run["killed"] is True and run["locust_exit_code"] == -9
    assert (
        run["end_epoch"] <= time.time() - (time.monotonic() - t0) + 1
    )  # its last record, not "now"


def test_compare_stops_after_a_signal_instead_of_starting_the_next_run(tmp_path):
    out = tmp_path / "cmp"
    proc, watch = _start(
        sys.executable,
        "-m",
        "streamslo",
        "compare",
        "--out",
        str(out),
        "--users",
        "4",
        "--duration",
        "60",
        "--drain",
        "5",
        "--allow-invalid",
    )
    _wait_rows(Layout(out / "naive").streams_csv, proc, 180)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert "compare: interrupted during the naive run" in err
    assert watch.named("serve"), "compare started no server?"
    assert watch.survivors() == []
    run = json.loads(Layout(out / "naive").run_json.read_text())
    assert run["complete"] is True and run["interrupted"] is True
    assert len(load_run(out / "naive").streams) > 0
    assert not (out / "fixed").exists() and not (out / "report.html").exists()


def test_a_killed_runner_takes_locust_with_it_and_finalize_recovers_the_run(
    faulty_server, tmp_path
):
    out = tmp_path / "run"
    proc, watch = _start(
        *_run_cmd(
            faulty_server.base_url, out, "--duration", "60", "--max-tokens", "8", "--drain", "5"
        )
    )
    _wait_rows(Layout(out).streams_csv, proc, 120)
    time.sleep(2.5)
    proc.kill()  # nothing to catch: run.json stays complete: false
    proc.communicate(timeout=30)
    killed_at = time.time()
    # Locust drains (5 s), writes and exits; on a loaded machine that took over 30 s once.
    deadline = time.monotonic() + 60
    while (
        watch.named("locust")
        and any(
            p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in watch.named("locust")
        )
        and time.monotonic() < deadline
    ):
        time.sleep(0.2)
    assert watch.survivors() == []  # Locust got SIGTERM when its parent died, and stopped
    assert json.loads(Layout(out).run_json.read_text())["complete"] is False
    r = subprocess.run(
        [sys.executable, "-m", "streamslo", "finalize", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    run = _finalized(out)
    assert run["killed"] is True and run["end_epoch"] < killed_at + 10
