"""Locust's web UI with the stream users, as a person sees it in a real headless chromium."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request

import pytest

from tests.faulty.process import unused_port
from tests.loadgen.browser import CHROMIUM, NO_CHROMIUM, chromium
from tests.loadgen.helpers import LOCUSTFILE, REPO, stop_process

pytestmark = [pytest.mark.load, pytest.mark.browser]


def _get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())


@pytest.fixture
def locust_ui(faulty_server, tmp_path):
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
        "8",
        "--web-host",
        "127.0.0.1",
        "--web-port",
        str(port),
        "--autostart",
        "-u",
        "4",
        "-r",
        "4",
        "--run-time",
        "60s",
        "--results-dir",
        str(tmp_path / "run"),
    ]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                stats = _get_json(base + "/stats/requests")
                # Locust caches /stats/requests for a moment: wait for both our rows and its own.
                if (
                    stats.get("extended_stats")
                    and any(
                        r["metric"] == "outcome: ok" and int(r["value"]) > 0
                        for r in stats["extended_stats"][0]["data"]
                    )
                    and any(s["name"] == "stream" for s in stats["stats"])
                ):
                    break
            except OSError:
                pass
            time.sleep(0.5)
        else:
            pytest.fail("the Locust web UI never showed a finished stream")
        yield base
    finally:
        stop_process(proc, timeout=20)


def test_live_slo_rows_in_stats_endpoint(locust_ui):
    stats = _get_json(locust_ui + "/stats/requests")
    data = stats["extended_stats"][0]["data"]
    rows = {r["metric"]: r for r in data}
    # Locust's table sorts by "name": the rows' own order (failing thresholds first).
    assert [r["name"] for r in data] == [f"{i:03d}" for i in range(len(data))]
    assert rows["truncation_rate"]["status"] == "PASS"
    assert rows["itl_ms p(99)"]["value"].endswith(" ms")
    entries = {(s["method"], s["name"]): s for s in stats["stats"]}
    assert {("SSE", "token ttft"), ("SSE", "token itl"), ("SSE", "stream")} <= set(entries)
    # Locust's total (the header, the charts) counts streams; the timings have their own rows.
    streams = sum(s["num_requests"] for (_, name), s in entries.items() if name == "stream")
    assert entries[("", "Aggregated")]["num_requests"] == streams


@pytest.mark.skipif(
    CHROMIUM is None,
    reason=NO_CHROMIUM,
)
def test_stream_slo_tab_renders(locust_ui, tmp_path):
    url = locust_ui + "/?tab=streamslo-slo"
    dom = chromium("--virtual-time-budget=6000", "--dump-dom", url).stdout.decode(
        "utf-8", "replace"
    )
    assert "Stream SLOs" in dom
    for text in ("truncation_rate", "http_5xx_rate", "itl_ms p(99)", "outcome: ok", "PASS"):
        assert text in dom, text
    png = tmp_path / "ui.png"
    chromium("--window-size=1280,900", "--virtual-time-budget=6000", f"--screenshot={png}", url)
    assert png.exists() and png.stat().st_size > 20_000
    import matplotlib.image as mpimg

    img = mpimg.imread(png)
    assert img.std() > 0.05  # not a blank page


@pytest.mark.skipif(
    CHROMIUM is None,
    reason=NO_CHROMIUM,
)
def test_start_form_shows_streaming_options(faulty_server):
    port = unused_port()
    cmd = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(LOCUSTFILE),
        "--host",
        faulty_server.base_url,
        "--web-host",
        "127.0.0.1",
        "--web-port",
        str(port),
    ]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2).read()
                break
            except OSError:
                time.sleep(0.3)
        dom = chromium(
            "--virtual-time-budget=5000", "--dump-dom", f"http://127.0.0.1:{port}/"
        ).stdout.decode("utf-8", "replace")
        for option in ("max_tokens", "stall_timeout", "protocol"):
            assert option in dom, option
        # Anyone who reaches the UI must not pick an environment variable to send as a key, or
        # a local file to read or write: those options are for the command line only.
        for option in ("results_dir", "prompt_file", "api_key_env", "header_file"):
            assert option not in dom, option
    finally:
        proc.terminate()
        proc.wait(timeout=20)
