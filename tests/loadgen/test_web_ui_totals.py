"""Locust's web UI counts streams: the header a person reads first (RPS, Failures), read in a
real headless chromium against the run's own results, on a run where a good share of streams
fail (the bundled server, ``--fault silent-cancel``).

A stream adds its token timings to Locust's statistics (``token ttft``, ``token itl``,
``token max_gap``), which never fail; counted in Locust's total they made the header read a
quarter of the failure ratio at four times the stream rate.
"""

from __future__ import annotations

import contextlib
import csv
import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pandas as pd
import pytest

from tests.faulty.process import unused_port
from tests.loadgen.browser import CHROMIUM, NO_CHROMIUM, header_of, page_dom, screenshot
from tests.loadgen.helpers import LOCUSTFILE, REPO, stop_process
from tests.server.servers import start_server

pytestmark = [
    pytest.mark.load,
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason=NO_CHROMIUM),
]

#: Locust's current RPS averages the 10 whole seconds that end 2 s before its last request.
RUN_S = 16


def _stats(base: str) -> dict:  # type: ignore[type-arg]
    with urllib.request.urlopen(base + "/stats/requests", timeout=5) as r:
        return json.loads(r.read())  # type: ignore[no-any-return]


def _locust_rows(path: Path) -> dict[str, dict[str, str]]:
    with path.open(newline="") as f:
        return {f"{r['Type']} {r['Name']}".strip(): r for r in csv.DictReader(f)}


def test_the_header_reads_the_streams_failure_ratio_and_rate(tmp_path: Path) -> None:
    # Generation stops 0.35 s into a stream (50 tokens/s) and says "stop": every stream that
    # asked for more than about 15 of its 4 to 30 tokens is a silent truncation.
    server = start_server(
        ["--mode", "fixed", "--fault", "silent-cancel", "--cancel-after", "0.35"], tmp_path
    )
    # The failing threshold is the SLO file's last: the tab shows it first.
    slo = tmp_path / "slo.toml"
    slo.write_text(
        '[thresholds]\nhttp_5xx_rate = ["rate<0.01"]\nitl_ms = ["p(99)<10000"]\n'
        'truncation_rate = ["rate<0.01"]\n'
    )
    port = unused_port()
    base = f"http://127.0.0.1:{port}"
    out = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(LOCUSTFILE),
        "--host",
        server.url,
        "--web-host",
        "127.0.0.1",
        "--web-port",
        str(port),
        "--autostart",
        "-u",
        "8",
        "-r",
        "8",
        "--run-time",
        f"{RUN_S}s",
        "--protocol",
        "sse",
        "--output-tokens",
        "uniform:4,30",
        "--slo",
        str(slo),
        "--results-dir",
        str(out),
        "--csv",
        str(tmp_path / "locust"),
    ]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + RUN_S + 60
        state = ""
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                state = _stats(base).get("state", "")
            if state == "stopped":
                break
            time.sleep(0.5)
        else:
            pytest.fail(f"the run never stopped (state {state!r})")
        # What a person sees once the run stopped (the figures hold still from then on).
        png = screenshot(base + "/", tmp_path / "header.png")
        header = header_of(page_dom(base + "/"))
        slo_tab = page_dom(base + "/?tab=streamslo-slo")
    finally:
        stop_process(proc, timeout=30)  # SIGTERM: the results are finalized
        server.stop()

    summary = json.loads((out / "summary.json").read_text())
    s = pd.read_csv(out / "streams.csv")
    counted = s[~s["outcome"].isin(["cancelled", "client_cancelled"])]
    failed = counted[counted["outcome"] != "ok"]
    assert len(counted) > 100, summary
    # A good share failed, or the test would not tell streams from timings.
    true_pct = summary["error_rate"] * 100
    assert 20 <= true_pct <= 98, summary["outcomes"]
    assert true_pct == pytest.approx(len(failed) / len(counted) * 100)

    # The header: Locust rounds the failure ratio to a whole percent.
    assert header.status.lower() == "stopped"
    assert abs(header.failures_pct - true_pct) <= 1, (header, true_pct)
    # Its RPS is Locust's current rate: the streams that ended in the 10 whole seconds that
    # end 2 s before the last one. The run's own rows give the same window...
    ends = counted["started_at"] + counted["e2e_ms"] / 1000.0
    last = int(ends.max())
    window = counted[(ends >= last - 12) & (ends < last - 2)]
    assert abs(header.rps - len(window) / 10) <= 1, (header, len(window))
    # ... and the whole run's rate in summary.json is near it (the load is steady; a loaded
    # machine may slow some seconds more than others): not the four times it read before.
    assert abs(header.rps - summary["requests_per_s"]) <= 0.25 * summary["requests_per_s"], (
        header,
        summary["requests_per_s"],
        summary["duration_s"],
    )

    # Locust's own CSV (--csv) counts the same: one request per stream, the timings beside.
    rows = _locust_rows(tmp_path / "locust_stats.csv")
    total = rows["Aggregated"]
    assert int(total["Request Count"]) == int(rows["SSE stream"]["Request Count"]) == len(counted)
    assert int(total["Failure Count"]) == len(failed)
    for name in ("token ttft", "token itl", "token max_gap"):
        assert int(rows[f"SSE {name}"]["Failure Count"]) == 0
        assert int(rows[f"SSE {name}"]["Request Count"]) > 0

    # The Stream SLOs tab: the failing row first.
    body = slo_tab[slo_tab.index("<tbody") :]
    assert "FAIL" in body, body[:2000]
    positions = [body.index(name) for name in ("truncation_rate", "http_5xx_rate", "itl_ms")]
    assert positions == sorted(positions), body[:2000]

    assert png.exists() and png.stat().st_size > 20_000
    import matplotlib.image as mpimg

    assert mpimg.imread(png).std() > 0.05  # not a blank page
