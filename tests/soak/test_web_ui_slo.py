"""The web UI's Stream SLOs tab checks the run's own SLO (``--slo``), on the running totals."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request

import pytest

from tests.faulty.process import unused_port
from tests.loadgen.helpers import LOCUSTFILE, REPO, stop_process

pytestmark = pytest.mark.load


def test_the_tab_checks_the_runs_slo_not_a_default(faulty_server, tmp_path):
    slo = tmp_path / "slo.toml"
    slo.write_text(
        '[thresholds]\ntruncation_rate = ["rate<0.5"]\nitl_ms = ["p(99)<1"]\n'
        '"ttft_ms{protocol:sse}" = ["p(95)<10000"]\ngoodput_fraction = ["rate>0.5"]\n'
    )
    port = unused_port()
    cmd = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(LOCUSTFILE),
        "--host",
        faulty_server.base_url,
        "--model",
        "timed",
        "--max-tokens",
        "6",
        "--web-host",
        "127.0.0.1",
        "--web-port",
        str(port),
        "--autostart",
        "-u",
        "3",
        "-r",
        "3",
        "--run-time",
        "60s",
        "--slo",
        str(slo),
        "--window",
        "1s",
    ]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rows: dict = {}
    try:
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(
                    f"http://127.0.0.1:{port}/streamslo/live", timeout=5
                ) as r:
                    data = json.loads(r.read())
                rows = {row["name"]: row for row in data["rows"]}
                if int(rows.get("outcome: ok", {}).get("value", 0)) >= 6 and data["last_window"]:
                    break
            except OSError:
                pass
            time.sleep(0.5)
        else:
            pytest.fail(f"no streams in the tab: {rows}")
    finally:
        stop_process(proc, timeout=20)
    assert (
        rows["truncation_rate"]["slo"] == "rate<0.5" and rows["truncation_rate"]["status"] == "PASS"
    )
    assert rows["itl_ms p(99)"]["slo"] == "p(99)<1" and rows["itl_ms p(99)"]["status"] == "FAIL"
    # The run's validity first; then the failing threshold (the file's second), then the
    # others in the file's order.
    assert next(iter(rows)) == "run validity (load generator)"
    assert rows["run validity (load generator)"]["status"] in ("PASS", "FAIL")
    assert list(rows)[1:5] == [
        "itl_ms p(99)",
        "truncation_rate",
        "ttft_ms{protocol:sse} p(95)",
        "goodput_fraction",
    ]
    assert rows["itl_ms p(99)"]["value"].endswith(" ms")
    assert rows["ttft_ms{protocol:sse} p(95)"]["status"] == "PASS"
    assert rows["goodput_fraction"]["status"] == "checked at the end"
    assert "http_5xx_rate" not in rows  # the default SLO's rows are gone: this run has its own
    assert "last window: itl_ms_p99" in rows
