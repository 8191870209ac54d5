"""The report's long-run section: windows timeline with alert marks, budget burn-down, alerts
and drift, in HTML, Markdown and JSON."""

from __future__ import annotations

import json

import numpy as np
import pytest

from streamslo.figures.windows import WindowAggregator, WindowBook
from streamslo.reports import build_report
from streamslo.results.layout import Layout, read_json, write_json
from streamslo.results.writer import ResultsWriter
from streamslo.runfiles.finalize import finalize
from streamslo.runfiles.windows_csv import append_rows
from streamslo.slo.budget import parse_budget
from tests.soak.helpers import Clock, record


@pytest.fixture(scope="module")
def soak_dir(tmp_path_factory):
    """Two minutes of streams; from the second minute a third of them are truncated; the
    generator's memory grows 1 MiB a window (a leak)."""
    d = tmp_path_factory.mktemp("soak") / "run"
    clock = Clock(2_000_000.0)
    writer = ResultsWriter(d, clock.t, flush_interval=1e9)
    book = WindowBook(5.0, clock)
    agg = WindowAggregator(5.0, "p", clock)
    rng = np.random.default_rng(5)
    rows = []
    for i in range(1200):
        t = clock.t + 0.1 * i
        bad = t > clock.t + 60 and i % 3 == 0
        rec = record(i, t, outcome="truncated" if bad else "ok", rng=rng)
        writer.add(rec)
        agg.add(rec)
        agg.sample(t, rss_bytes=(100 + i / 50) * 2**20, cpu=20.0, lag_ms=1.0, active=10)
    clock.t += 200
    book.merge(agg.take())
    rows = book.close_all()
    writer.flush(wait=True)
    append_rows(Layout(d).windows_csv, rows)
    budget = parse_budget(
        {
            "objective": "truncation_rate",
            "target": 0.99,
            "time_scale": 120,
            "alerts": [{"long": "1h", "short": "5m", "factor": 14.4, "abortOnFail": True}],
        }
    )
    run = read_json(Layout(d).run_json)
    write_json(Layout(d).run_json, {**run, "budget": budget.as_dict(), "window_s": 5.0})
    finalize(d, {"start_epoch": 2_000_000.0, "end_epoch": 2_000_125.0})
    return d


def test_finalize_replays_the_alerts_and_judges_the_drift(soak_dir):
    run = read_json(Layout(soak_dir).run_json)
    (alert,) = run["alerts"]  # replayed from windows.csv: the run recorded none itself
    # 1h/5m at time_scale 120: 30 s / 2.5 s. A third of the streams fail from t+60: the short
    # span burns 33x at once, the long one passes 14.4x with its third failing 5 s window.
    assert alert["name"] == "1h/5m×14.4" and alert["fired_at_epoch"] == 2_000_075.0
    summary = read_json(Layout(soak_dir).summary_json)
    assert summary["drift"]["gen_rss_mb"]["verdict"] == "leak"
    assert summary["budget"]["alerts_fired"] == 1 and summary["budget"]["consumed"] > 1
    assert summary["windows"]["requests"] == 1200 and run["windows"]["rebuilt"] == 0


def test_the_report_shows_windows_budget_alerts_and_drift(soak_dir, tmp_path):
    res = build_report(None, soak_dir, tmp_path / "report.html", resamples=50)
    md = res.markdown.read_text()
    for text in (
        "Long run",
        "Error budget",
        "Alerts fired",
        "1h/5m×14.4",
        "Drift and leaks",
        "gen_rss_mb",
        "leak",
    ):
        assert text in md, text
    page = res.html.read_text()
    for alt in (
        "Windows: throughput, truncation and ITL p99 per window",
        "Error budget burn-down",
        "Resources over time",
    ):
        assert f'alt="{alt}' in page, alt
    data = json.loads(res.json.read_text())
    (soak,) = data["soak"]
    assert soak["window_count"] == 24 and soak["alerts"][0]["name"] == "1h/5m×14.4"
    assert soak["spent"] > 1.0


def test_a_run_without_windows_gets_no_long_run_section(tmp_path):
    from tests.results.helpers import record as plain_record

    d = tmp_path / "run"
    w = ResultsWriter(d, 1000.0)
    for i in range(5):
        w.add(plain_record(i, started_at=1000.0 + i))
    w.flush(wait=True)
    finalize(d, {})
    Layout(d).windows_csv.unlink()
    res = build_report(None, d, tmp_path / "r.html", resamples=20)
    assert "Long run" not in res.markdown.read_text()
    assert json.loads(res.json.read_text())["soak"] == []


def test_partial_windows_are_divided_by_the_part_the_run_covered():
    """Windows are aligned to the clock: a run from t=103 to t=125 covers 7 s of its first
    10 s window and 5 s of its last. 70 requests in the first window is 10/s, not a ramp."""
    from streamslo.reports.soak import SoakSection, window_rates

    rows = [
        {"window_start": 100.0 + 10 * i, "window_s": 10.0, "requests": n}
        for i, n in enumerate((70, 100, 50))
    ]
    sec = SoakSection("after", "run", rows, None, [], None, {}, [], (103.0, 125.0))
    assert window_rates(sec) == [(0.0, 10.0, True), (10.0, 10.0, False), (20.0, 10.0, True)]
