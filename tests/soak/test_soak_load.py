"""Real runs: windows.csv as the run goes, burn-rate alerts from a server that starts failing
mid-run, the Prometheus endpoint, the progress lines, and windows through a Locust master."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request

import numpy as np
import pandas as pd
import pytest

from streamslo.figures.histogram import DEFAULT_ALPHA
from tests.faulty.process import unused_port
from tests.soak.conftest import REPO

pytestmark = pytest.mark.load

BUDGET = """\
[thresholds]
truncation_rate = ["rate<0.9"]

[budget]
objective = "truncation_rate"
target = 0.99
time_scale = 150          # 1h/5m -> 24s/2s, 6h/30m -> 144s/12s
alerts = [{{ long = "1h", short = "5m", factor = 14.4, abortOnFail = {abort} }},
          {{ long = "6h", short = "30m", factor = 6 }}]
"""


def _run(host: str, out, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
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
        "--model",
        "m",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO)


def _lenient(tmp_path):
    """An SLO that holds on a contended machine: these tests check windows, not latency."""
    p = tmp_path / "lenient.toml"
    p.write_text('[thresholds]\nrequests = ["count>0"]\n')
    return str(p)


def _windows(out) -> pd.DataFrame:
    return pd.read_csv(out / "windows.csv")


def test_the_fast_alert_fires_within_its_short_window_and_stops_the_run(failing_server, tmp_path):
    # Failures begin with the load, not at a time a loaded machine's run may start after (its
    # probes and the server's /healthz before the load, then about a second of streams).
    server = failing_server(fail_after_requests=50, fail_share=0.5)
    slo = tmp_path / "slo.toml"
    slo.write_text(BUDGET.format(abort="true"))
    out = tmp_path / "run"
    r = _run(
        server.url,
        out,
        "--users",
        "10",
        "--duration",
        "40",
        "--max-tokens",
        "8",
        "--window",
        "0.5s",
        "--drain",
        "2",
        "--slo",
        str(slo),
        "--progress",
        "off",
    )
    assert r.returncode == 99, r.stdout + r.stderr
    run = json.loads((out / "run.json").read_text())
    fast = run["aborted_by_alert"]
    assert fast["name"] == "1h/5m×14.4" and fast["short_s"] == 2.0 and fast["long_s"] == 24.0
    # Half the streams fail from `fails_from` on: the short span burns at ~50x at once; the
    # alert fires at the end of a window within the short span (plus one window of slack, and
    # 2 s for a starved generator, whose failing streams end and are counted late: 0.25 s past
    # the span and its window under a CPU hog), long before the long span (24 s) could.
    assert server.fails_from <= fast["fired_at_epoch"] <= server.fails_from + 2.0 + 0.5 + 2.5
    assert fast["burn_short"] > 14.4 and fast["burn_long"] > 14.4
    assert fast in run["alerts"]  # with the slow alert (factor 6), which fires no later
    assert run["end_epoch"] - run["start_epoch"] < 30  # stopped early, not after 40 s
    assert "budget alert 1h/5m×14.4 fired" in r.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["budget"]["alerts_fired"] == len(run["alerts"])
    assert summary["budget"]["consumed"] > 1.0  # the budget was overspent


def test_a_clean_run_fires_no_alert_and_its_windows_agree_with_the_streams(
    failing_server, tmp_path
):
    server = failing_server()
    slo = tmp_path / "slo.toml"
    slo.write_text(BUDGET.format(abort="true"))
    out = tmp_path / "run"
    r = _run(
        server.url,
        out,
        "--users",
        "12",
        "--duration",
        "8",
        "--max-tokens",
        "10",
        "--window",
        "1s",
        "--drain",
        "3",
        "--slo",
        str(slo),
        "--progress",
        "plain",
        "--progress-interval",
        "2",
    )
    assert r.returncode == 0, r.stdout + r.stderr
    run = json.loads((out / "run.json").read_text())
    assert run["alerts"] == [] and run["aborted_by_alert"] is None
    assert run["windows"]["rebuilt"] == 0  # every window was written live, and right
    w = _windows(out)
    s = pd.read_csv(out / "streams.csv")
    g = pd.read_parquet(out / "gaps.parquet")
    assert w["requests"].sum() == len(s)
    assert w["window_start"].is_unique and (w["window_s"] == 1.0).all()
    assert w["gen_cpu_pct"].notna().any() and w["gen_rss_mb"].notna().any()
    end = s["started_at"] + s["e2e_ms"] / 1000.0
    s["w"] = np.floor(end / 1.0)
    for _, row in w[w["requests"] > 3].iterrows():
        mine = s[s["w"] == row["window_start"]]
        gaps = g[g["stream_id"].isin(mine["stream_id"])]["gap_ms"].to_numpy()
        assert row["itl_ms_p99"] == pytest.approx(
            np.percentile(gaps, 99), rel=DEFAULT_ALPHA, abs=0.002
        )
        assert row["ttft_ms_p50"] == pytest.approx(
            np.percentile(mine["ttft_ms"], 50), rel=DEFAULT_ALPHA, abs=0.002
        )
    # Plain progress lines on stderr (not a terminal), every 2 s and at the end.
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("streamslo: ") and "ETA" in ln]
    assert len(lines) >= 3, r.stderr
    assert "alerts 0" in lines[-1] and "streams " in lines[-1]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["windows"]["requests"] == len(s)
    assert summary["drift"]["gen_rss_mb"]["verdict"] in ("flat", "too short")


def test_windows_through_a_master_and_two_processes(faulty_server, tmp_path):
    out = tmp_path / "run"
    r = _run(
        faulty_server.base_url,
        out,
        "--model",
        "timed",
        "--users",
        "8",
        "--duration",
        "10",
        "--max-tokens",
        "6",
        "--processes",
        "2",
        "--window",
        "2s",
        "--drain",
        "3",
        "--progress",
        "off",
        "--slo",
        _lenient(tmp_path),
    )
    assert r.returncode == 0, r.stdout + r.stderr
    w = _windows(out)
    s = pd.read_csv(out / "streams.csv")
    assert w["requests"].sum() == len(s) > 10
    run = json.loads((out / "run.json").read_text())
    # The master merged both workers' parts live. Only the streams of the final drain may come
    # too late for it (Locust gives its workers 0.5 s at the quit): the last windows, rebuilt.
    live = json.loads((out / "live.json").read_text())
    assert live["rows_written"] >= 2
    assert set(run["windows"]["rebuilt_windows"]) <= set(w["window_start"].iloc[-2:]), run[
        "windows"
    ]


def test_the_prometheus_endpoint_serves_the_generators_metrics(faulty_server, tmp_path):
    port = unused_port()
    out = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "streamslo",
        "run",
        "--host",
        faulty_server.base_url,
        "--out",
        str(out),
        "--allow-invalid",
        "--model",
        "timed",
        "--users",
        "4",
        "--duration",
        "8",
        "--max-tokens",
        "6",
        "--window",
        "1s",
        "--drain",
        "2",
        "--progress",
        "off",
        "--prometheus-port",
        str(port),
        "--slo",
        _lenient(tmp_path),
    ]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        text = ""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                text = (
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2)
                    .read()
                    .decode()
                )
                if (
                    'streamslo_gen_streams_total{outcome="ok"}' in text
                    and "streamslo_gen_cpu_percent" in text
                ):
                    ok = float(
                        text.split('streamslo_gen_streams_total{outcome="ok"}')[1].split()[0]
                    )
                    if ok > 0:
                        break
            except OSError:
                pass
            time.sleep(0.5)
        else:
            pytest.fail(f"no streams on the Prometheus endpoint:\n{text[-2000:]}")
        assert 'streamslo_gen_itl_seconds_bucket{le="0.2"}' in text
        assert "streamslo_gen_ttft_seconds_count" in text
    finally:
        proc.wait(timeout=60)
    assert proc.returncode == 0


def test_soak_runs_a_constant_load_scenario_with_its_budget_against_a_host(faulty_server, tmp_path):
    scenario = tmp_path / "soak.toml"
    scenario.write_text(
        '[load]\nusers = 4\nduration = "5s"\nmodel = "timed"\nmax_tokens = 4\nwindow = "1s"\ndrain = "3s"\n'
        'progress = "off"\n\n[thresholds]\nrequests = ["count>0"]\n\n'
        '[budget]\nobjective = "http_5xx_rate"\ntarget = 0.99\ntime_scale = 300\n'
    )
    out = tmp_path / "soak"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "streamslo",
            "soak",
            "--scenario",
            str(scenario),
            "--host",
            faulty_server.base_url,
            "--out",
            str(out),
            "--allow-invalid",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert not (tmp_path / "soak-server.log").exists()  # --host given: no bundled server
    run = json.loads((out / "run.json").read_text())
    assert (
        run["target"] == faulty_server.base_url
        and run["duration_s"] == 5.0
        and run["window_s"] == 1.0
    )
    assert (
        run["budget"]["alerts"][0]["long_s"] == 12.0 and run["alerts"] == []
    )  # 1h / 300, no alert
    assert _windows(out)["requests"].sum() == len(pd.read_csv(out / "streams.csv")) > 0
