"""Stop signals: the first interrupts (128 + signum), a repeat within the window counts once, a
second kills the child process groups at once, a third ends the process; leftovers are reaped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest

from streamslo.run.signals import REPEAT_WINDOW_S, Interrupted, StopSignals, exit_code_of

REPO = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent(
    """
    import subprocess, sys, time
    from streamslo.run.signals import StopSignals, exit_code_of

    mode = sys.argv[1]
    try:
        with StopSignals(grace=2.0):
            # A child process group of two processes, as Locust's or a server's would be.
            child = subprocess.Popen(["sh", "-c", "sleep 120 & sleep 120; wait"], start_new_session=True)
            try:
                # inside the try: a signal sent as soon as this is read lands in it
                print("ready", child.pid, flush=True)
                time.sleep(60)
            except KeyboardInterrupt:
                print("interrupted", flush=True)
                if mode == "drain":
                    child.wait()  # the drain: only a second signal cuts it short
                elif mode == "stuck":
                    time.sleep(60)
                raise
    except KeyboardInterrupt as exc:
        print(type(exc).__name__, flush=True)
        sys.exit(exit_code_of(exc))
    """
)


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _gone(procs: list[psutil.Process], timeout: float = 10) -> bool:
    """Every one of ``procs`` has ended, or does within ``timeout`` (a SIGKILLed process still
    runs until the kernel schedules its exit: on a loaded machine, a little later)."""
    deadline = time.monotonic() + timeout
    while any(_alive(p) for p in procs):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _start(mode: str) -> tuple[subprocess.Popen[str], list[psutil.Process]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, mode],
        cwd=REPO,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    line = proc.stdout.readline().split()
    assert line[0] == "ready", line
    group = psutil.Process(int(line[1]))
    deadline = time.monotonic() + 10
    while len(group.children()) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    return proc, [group, *group.children()]


def _finish(proc: subprocess.Popen[str], seen: str = "") -> tuple[str, str]:
    out, err = proc.communicate(timeout=30)
    return seen + out, err


def _handled(pipe, text: str) -> str:
    """Read ``pipe`` up to the line holding ``text``: the handler ran (an event, however late the
    loaded machine ran it); the lines read are returned."""
    seen = ""
    while text not in seen:
        line = pipe.readline()
        assert line, f"{text!r} never came: {seen!r}"
        seen += line
    return seen


def _after_the_window() -> None:
    """Wait past the repeat window, counted from a handler that already ran: the next signal of
    the same kind is a real repeat."""
    time.sleep(REPEAT_WINDOW_S + 0.3)


@pytest.mark.parametrize(
    ("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129), (signal.SIGINT, 130)]
)
def test_first_signal_interrupts_and_leftovers_are_reaped(sig, code):
    proc, children = _start("plain")
    proc.send_signal(sig)
    out, err = _finish(proc)
    assert proc.returncode == code, err
    assert out.split()[-2:] == ["interrupted", "Interrupted"]
    assert _gone(children)  # nobody stopped them: the reaper did


def test_a_repeat_within_the_window_counts_once():
    """``timeout`` signals the command and then its process group: two SIGTERMs at once."""
    proc, children = _start("drain")
    proc.send_signal(signal.SIGTERM)
    proc.send_signal(signal.SIGTERM)
    _handled(proc.stdout, "interrupted")
    _after_the_window()
    assert proc.poll() is None  # still draining: the repeat did not escalate
    assert all(_alive(c) for c in children)
    proc.send_signal(signal.SIGTERM)  # now a real second signal
    _, err = _finish(proc)
    assert proc.returncode == 143
    assert "second stop signal" in err


def test_second_signal_kills_the_child_groups_at_once():
    proc, children = _start("drain")
    proc.send_signal(signal.SIGTERM)
    seen = _handled(proc.stdout, "interrupted")  # SIGINT first would decide the exit code
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = _finish(proc, seen)
    assert out.split()[-2:] == ["interrupted", "Interrupted"]
    assert time.monotonic() - t0 < 5
    assert proc.returncode == 143  # the first signal decides the exit code
    assert "killing the child processes now" in err
    assert _gone(children)


def test_third_signal_ends_the_process_by_the_signal():
    proc, children = _start("stuck")
    proc.send_signal(signal.SIGTERM)
    _handled(proc.stdout, "interrupted")
    _after_the_window()
    proc.send_signal(signal.SIGTERM)
    _handled(proc.stderr, "second stop signal")
    _after_the_window()
    proc.send_signal(signal.SIGTERM)
    _finish(proc)
    assert proc.returncode == -signal.SIGTERM
    assert _gone(children)


def test_exit_codes():
    assert Interrupted(signal.SIGTERM).exit_code == 143
    assert exit_code_of(KeyboardInterrupt()) == 130
    assert isinstance(Interrupted(signal.SIGHUP), KeyboardInterrupt)


def test_outside_the_main_thread_it_does_nothing():
    before = signal.getsignal(signal.SIGTERM)
    seen = []

    def run() -> None:
        with StopSignals():
            seen.append(signal.getsignal(signal.SIGTERM))

    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert seen == [before] and signal.getsignal(signal.SIGTERM) is before


def test_handlers_are_restored(monkeypatch):
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    with StopSignals():
        assert signal.getsignal(signal.SIGTERM) is not before[signal.SIGTERM]
    assert {s: signal.getsignal(s) for s in before} == before
    assert os.getpgrp()  # still our own process group: nothing was killed
