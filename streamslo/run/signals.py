"""Stop signals for the commands that run children (``run``, ``soak``, ``compare``).

SIGINT (Ctrl-C), SIGTERM and SIGHUP all mean "stop, and keep what was measured":

1. the first raises :class:`Interrupted` (a ``KeyboardInterrupt``) in the main thread: the
   command stops the load (streams in flight get the drain), stops its children, finalizes the
   results directory, and exits ``128 + signal number`` (130 for Ctrl-C, 143 for SIGTERM, 129
   for SIGHUP, the shell's convention);
2. a second one kills every child process group at once (SIGKILL) and lets the command go on
   finalizing what was written, which no longer waits for anything;
3. a third one ends the command at once, by the signal itself.

A repeat of the same signal within :data:`REPEAT_WINDOW_S` counts once: ``timeout`` sends its
signal to the command and then to the command's process group, so the command receives it twice
in the same millisecond, and that must not skip the drain.

When the command returns (or raises), any child process it started that still runs is stopped:
SIGTERM to the child, then SIGKILL to the process groups of it and its descendants after a
grace period. No load generator or server outlives the command.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from types import FrameType, TracebackType

__all__ = [
    "REPEAT_WINDOW_S",
    "STOP_SIGNALS",
    "Interrupted",
    "StopSignals",
    "exit_code_of",
    "kill_groups",
]

STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: The same signal again within this many seconds is the same request (see the module docstring).
REPEAT_WINDOW_S = 0.5


class Interrupted(KeyboardInterrupt):
    """A stop signal arrived; raised in the main thread by :class:`StopSignals`.

    Attributes:
        signum: the signal's number.
    """

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(signal.Signals(signum).name)

    @property
    def exit_code(self) -> int:
        """``128 + signum``: 130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP."""
        return 128 + self.signum


def exit_code_of(exc: KeyboardInterrupt) -> int:
    """The exit code for an interruption: 128 + its signal (a bare Ctrl-C: 130)."""
    return exc.exit_code if isinstance(exc, Interrupted) else 128 + signal.SIGINT


def _descendants(exclude: frozenset[int]) -> list[tuple[int, int]]:
    """(pid, process group) of every live descendant of this process not in ``exclude``."""
    import psutil

    out = []
    try:
        children = psutil.Process().children(recursive=True)
    except psutil.Error:
        return []
    for child in children:
        if child.pid in exclude:
            continue
        try:
            out.append((child.pid, os.getpgid(child.pid)))
        except OSError:
            continue
    return out


def kill_groups(procs: list[tuple[int, int]], sig: int = signal.SIGKILL) -> None:
    """Send ``sig`` to each process and to its process group (never to our own group)."""
    own = os.getpgrp()
    for pgid in {g for _, g in procs if g != own}:
        with contextlib.suppress(OSError):
            os.killpg(pgid, sig)
    for pid, _ in procs:
        with contextlib.suppress(OSError):
            os.kill(pid, sig)


class StopSignals:
    """Install the stop-signal handling for the duration of a command (see the module docstring).

    Only in the main thread (elsewhere signals cannot be handled); a no-op otherwise.

    Args:
        grace: seconds a leftover child gets after SIGTERM before its group is killed.
    """

    def __init__(self, grace: float = 10.0) -> None:
        self.grace = grace
        self.received: list[int] = []
        """Every stop signal counted, in order."""
        self._last: tuple[int, float] | None = None
        self._previous: dict[int, object] = {}
        self._before: frozenset[int] = frozenset()
        self._active = False

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is not threading.main_thread():
            return self
        self._before = frozenset(pid for pid, _ in _descendants(frozenset()))
        for sig in STOP_SIGNALS:
            self._previous[sig] = signal.signal(sig, self._handle)
        self._active = True
        return self

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        now = time.monotonic()
        if (
            self._last is not None
            and self._last[0] == signum
            and now - self._last[1] < REPEAT_WINDOW_S
        ):
            return
        self._last = (signum, now)
        self.received.append(signum)
        if len(self.received) == 1:
            raise Interrupted(signum)
        if len(self.received) == 2:
            print(
                "streamslo: second stop signal: killing the child processes now",
                file=sys.stderr,
                flush=True,
            )
            kill_groups(_descendants(self._before))
            return
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    def reap(self) -> list[int]:
        """Stop every child started since :meth:`__enter__` that still runs.

        Returns:
            The pids that were still running.
        """
        import psutil

        left = _descendants(self._before)
        if not left:
            return []
        # SIGTERM to our own children only: each stops its own (a server's master its workers;
        # a worker signalled twice would skip its graceful shutdown).
        own = os.getpid()
        for child in psutil.Process().children():
            if child.pid in {pid for pid, _ in left}:
                try:
                    if child.ppid() == own:
                        child.terminate()
                except psutil.Error:
                    pass
        procs = []
        for pid, _ in left:
            try:
                procs.append(psutil.Process(pid))
            except psutil.Error:
                continue
        _, alive = psutil.wait_procs(procs, timeout=self.grace)
        # Kill the groups even when their leaders are gone: a dead leader's workers may live on.
        kill_groups(left)
        if alive:
            print(
                f"streamslo: killed {len(alive)} child process(es) that did not stop",
                file=sys.stderr,
                flush=True,
            )
        return [pid for pid, _ in left]

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        if not self._active:
            return
        try:
            self.reap()
        finally:
            for sig, previous in self._previous.items():
                signal.signal(sig, previous)  # type: ignore[arg-type]
            self._active = False
