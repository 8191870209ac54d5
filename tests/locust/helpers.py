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
