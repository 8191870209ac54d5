"""Run ``streamslo run`` (and plain Locust) as real subprocesses."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[2]
LOCUSTFILE = REPO / "locustfiles" / "streaming_locustfile.py"


def streamslo_run(
    host: str, out: Path, *args: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    cmd = [
        sys.executable,
        "-m",
        "streamslo",
        "run",
        "--host",
        host,
        "--out",
        str(out),
        "--allow-invalid",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO)


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 30) -> None:
    """SIGTERM (Locust finalizes its results then), SIGKILL if it does not exit in time."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def streams(out: Path) -> pd.DataFrame:
    return pd.read_csv(out / "streams.csv")


def gaps(out: Path) -> pd.DataFrame:
    return pd.read_parquet(out / "gaps.parquet")


def wait_rows(
    streams_csv: Path, proc: subprocess.Popen[str], timeout: float = 120, rows: int = 1
) -> None:
    """Wait until ``streams_csv`` holds at least ``rows`` rows (the load has begun and flushed):
    a stop signal sent after it finds streams to keep, however slow the machine. ``timeout``
    only bounds a hang."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"exited early ({proc.returncode}): {proc.communicate()}")
        if streams_csv.exists() and len(streams_csv.read_bytes().splitlines()) > rows:
            return
        time.sleep(0.1)
    raise AssertionError(f"fewer than {rows} rows in {streams_csv} after {timeout}s")


class PipeReader:
    """Reads a process's pipe in a thread, so that a test can wait for a line (an event, not a
    sleep) and still see everything at the end (``text``)."""

    def __init__(self, pipe: object) -> None:
        import threading

        self._pipe = pipe
        self._lines: list[str] = []
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        for line in self._pipe:  # type: ignore[attr-defined]
            with self._cond:
                self._lines.append(line)
                self._cond.notify_all()

    def wait_for(self, text: str, timeout: float = 60) -> None:
        """Return once a line holding ``text`` was read; fail after ``timeout`` (a hang)."""
        with self._cond:
            if not self._cond.wait_for(lambda: text in "".join(self._lines), timeout):
                raise AssertionError(f"{text!r} not seen in {timeout}s:\n{self.text}")

    def join(self, timeout: float = 60) -> str:
        """Everything read, once the process closed its end (ours is closed then)."""
        self._thread.join(timeout)
        if not self._thread.is_alive():
            self._pipe.close()  # type: ignore[attr-defined]
        return self.text

    @property
    def text(self) -> str:
        with self._cond:
            return "".join(self._lines)
