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


def _settled(base: str, deadline: float) -> dict:  # type: ignore[type-arg]
    """Locust's statistics once the run stopped and its total holds still for 2 s. A finished
    stream reaches Locust's statistics from a queue a few streams a millisecond
    (loadgen/recorder.py); on a starved machine the last of them were still queued when the
    state read "stopped", and a header read then missed them (86 % against 83 % in the
    results, issue 36)."""
    seen: tuple[int, int] | None = None
    since = time.monotonic()
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            stats = _stats(base)
            total = stats["stats"][-1]
            now = (total["num_requests"], total["num_failures"])
            if stats.get("state") != "stopped" or now != seen:
                seen, since = now, time.monotonic()
            elif time.monotonic() - since >= 2.0:
                return stats
        time.sleep(0.25)
    pytest.fail(f"the run never stopped with its figures still (last: {seen})")


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
        stats = _settled(base, time.monotonic() + RUN_S + 90)
        # What a person sees once the run stopped and every stream is counted.
        png = screenshot(base + "/", tmp_path / "header.png")
        header = header_of(page_dom(base + "/"))
        slo_tab = page_dom(base + "/?tab=streamslo-slo")
    finally:
        stop_process(proc, timeout=30)  # SIGTERM: the results are finalized
        server.stop()
    shown = stats["stats"][-1]  # Locust's total (Aggregated), as the page read it

    summary = json.loads((out / "summary.json").read_text())
    s = pd.read_csv(out / "streams.csv")
    counted = s[~s["outcome"].isin(["cancelled", "client_cancelled"])]
    failed = counted[counted["outcome"] != "ok"]
    # Enough streams for a ratio (about 250 on a quiet machine; 26 on one with four busy loops
    # beside the run, which still tell one stream from another by more than the rounding).
    assert len(counted) >= 20, summary
    # A good share failed, or the test would not tell streams from timings (counted with
    # them, the ratio read a quarter of this: even every stream failed would read 25 %).
    true_pct = summary["error_rate"] * 100
    assert true_pct >= 20, summary["outcomes"]
    assert true_pct == pytest.approx(len(failed) / len(counted) * 100)

    # Locust counted every stream once, and only the streams.
    assert (shown["num_requests"], shown["num_failures"]) == (len(counted), len(failed)), shown
    # The header: Locust rounds the failure ratio to a whole percent.
    assert header.status.lower() == "stopped"
    assert abs(header.failures_pct - true_pct) <= 1, (header, true_pct, shown)
    # Its RPS is Locust's current rate: the streams that ended in the 10 whole seconds that
    # end 2 s before the last one. The run's own rows give about the same window, and the
    # whole run's rate in summary.json is near it (the load is steady): not the four times it
    # read when it counted the timings. The margins are a loaded machine's: Locust stamps a
    # stream when it counts it, the rows when it ended, and a starved process counts in bursts
    # (44 % apart under four busy loops; 1 stream a second on a quiet machine).
    ends = counted["started_at"] + counted["e2e_ms"] / 1000.0
    last = int(ends.max())
    window = len(counted[(ends >= last - 12) & (ends < last - 2)]) / 10
    assert abs(header.rps - window) <= max(1.0, 0.6 * window), (header, window)
    rate = summary["requests_per_s"]
    assert 0.5 * rate <= header.rps <= 2 * rate, (header, rate, summary["duration_s"])

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
