"""``streamslo run --master --expect-workers N``: the load comes from plain Locust workers
(here on this machine, sharing the results directory), and one results directory holds it all."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.faulty.process import unused_port
from tests.loadgen.helpers import LOCUSTFILE, REPO, stop_process, streams, streamslo_run

pytestmark = pytest.mark.load


def test_run_as_master_of_bare_workers(faulty_server, tmp_path):
    port = str(unused_port())
    out = tmp_path / "run"
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "locust",
                "-f",
                str(LOCUSTFILE),
                "--worker",
                "--master-host",
                "127.0.0.1",
                "--master-port",
                port,
            ],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(2)
    ]
    try:
        r = streamslo_run(
            faulty_server.base_url,
            out,
            "--model",
            "timed",
            "--users",
            "6",
            "--duration",
            "5",
            "--max-tokens",
            "4",
            "--protocol",
            "mixed",
            "--drain",
            "3",
            "--master",
            "--expect-workers",
            "2",
            "--master-bind-port",
            port,
            timeout=120,
        )
        assert r.returncode == 0, r.stdout + r.stderr
    finally:
        for w in workers:  # they leave with the master; stop any that did not
            if w.poll() is None:
                stop_process(w, timeout=20)
    s = streams(out)
    assert len(s) > 10 and s["stream_id"].is_unique
    assert set(s["protocol"]) == {"sse", "ws"}  # the master's options reached the workers
    assert s["stream_id"].str.rsplit("-", n=1).str[0].nunique() == 2  # both workers wrote
    assert json.loads((out / "summary.json").read_text())["requests"] == len(s)
