"""Locust's own distributed mode: a master and two bare workers (given only the locustfile)
write one results directory holding every stream once."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.faulty.process import unused_port
from tests.locust.helpers import LOCUSTFILE, REPO, gaps, streams

pytestmark = pytest.mark.load


def test_master_and_bare_workers(faulty_server, tmp_path):
    port = str(unused_port())
    out = tmp_path / "run"
    locust = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE)]
    workers = [
        subprocess.Popen([*locust, "--worker", "--master-host", "127.0.0.1", "--master-port", port],
                         cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(2)
    ]
    try:
        master = subprocess.run(
            [*locust, "--master", "--master-bind-host", "127.0.0.1", "--master-bind-port", port,
             "--expect-workers", "2", "--headless", "-u", "6", "-r", "6", "-t", "5s",
             "--host", faulty_server.base_url, "--model", "timed", "--max-tokens", "4",
             "--protocol", "mixed", "--results-dir", str(out), "--stop-timeout", "3"],
            cwd=REPO, capture_output=True, text=True, timeout=90,
        )
        assert master.returncode == 0, master.stderr[-2000:]
    finally:
        for w in workers:
            try:
                w.wait(timeout=20)
            except subprocess.TimeoutExpired:
                w.kill()
                w.wait()
    s = streams(out)
    assert len(s) > 10 and s["stream_id"].is_unique
    assert set(s["protocol"]) == {"sse", "ws"}  # the master's --protocol reached the workers
    assert s["stream_id"].str.rsplit("-", n=1).str[0].nunique() == 2  # both workers wrote
    assert set(gaps(out)["stream_id"]) == set(s["stream_id"])
    summary = json.loads((out / "summary.json").read_text())
    assert summary["requests"] == len(s)
