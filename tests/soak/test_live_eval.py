"""Thresholds on running totals agree with the final evaluation over streams.csv and the gaps;
windows.csv is reconciled with streams.csv at finalize (a killed run)."""

from __future__ import annotations

import numpy as np
import pytest

from streamslo.figures.histogram import DEFAULT_ALPHA
from streamslo.figures.metrics import RATE_METRICS, rate_value
from streamslo.figures.windows import WindowAggregator, WindowBook
from streamslo.results.layout import Layout, load_run
from streamslo.results.writer import ResultsWriter
from streamslo.runfiles.finalize import finalize_killed
from streamslo.runfiles.windows_csv import append_rows, read_windows
from streamslo.slo import thresholds
from streamslo.slo.live_eval import (
    LIVE_UNSUPPORTED,
    evaluate_live,
    live_abort_check,
    rate_from_counts,
)
from tests.soak.helpers import Clock, record

SLO_TEXT = """
[thresholds]
truncation_rate = ["rate<0.5"]
"http_5xx_rate{protocol:ws}" = ["rate<0.5"]
error_rate = ["rate<0.01"]
itl_ms = ["p(99)<200", "p(50)<40", "avg<100", "max<10000", "count>10"]
"ttft_ms{outcome:ok}" = ["p(95)<2000", "med<300"]
e2e_ms = ["p(90)<5000"]
tpot_ms = ["p(99)<100"]
max_gap_ms = ["p(99)<500"]
requests = ["count>10"]
streams_began = ["count>10"]
tokens = ["count>10"]
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A results directory of 600 streams, and the window book that saw the same streams."""
    d = tmp_path_factory.mktemp("live") / "run"
    clock = Clock(1_000_000.0)
    writer = ResultsWriter(d, clock.t, flush_interval=1e9)
    book = WindowBook(10.0, clock)
    agg = WindowAggregator(10.0, "p", clock)
    rng = np.random.default_rng(2)
    rows = []
    for i in range(600):
        proto = "ws" if i % 3 == 0 else "sse"
        o = str(rng.choice(["ok"] * 6 + ["truncated", "http_5xx", "cancelled", "stalled"]))
        rec = record(
            i,
            clock.t + 0.1 * i,
            outcome=o,
            status=503 if o == "http_5xx" else (101 if proto == "ws" else 200),
            protocol=proto,
            rng=rng,
        )
        writer.add(rec)
        agg.add(rec)
        if i == 450:  # the run is killed here: later windows never reach windows.csv
            clock.t += 45
            book.merge(agg.take())
            rows = book.close_ready()
    writer.flush(wait=True)
    book.merge(agg.take())
    append_rows(Layout(d).windows_csv, rows)
    return d, book


def test_rates_from_counts_equal_the_rates_from_streams_csv(run):
    d, book = run
    data = load_run(d)
    from streamslo.slo.live_eval import counts_of

    outcomes, began = counts_of(book.totals)
    for name in RATE_METRICS:
        if name in LIVE_UNSUPPORTED:
            continue
        assert rate_from_counts(name, outcomes, began) == rate_value(data, name), name


def test_live_thresholds_agree_with_the_final_evaluation(run):
    d, book = run
    slo = thresholds.parse_slo(SLO_TEXT)
    data = load_run(d)
    for th, final in zip(
        slo.thresholds, thresholds.evaluate(slo, data, duration_s=60.0), strict=True
    ):
        live = evaluate_live(th, book.totals, 60.0)
        assert live is not None
        assert live.samples == final.samples, th.name
        assert live.observed == pytest.approx(final.observed, rel=DEFAULT_ALPHA, abs=0.002), th.name
        assert live.passed == final.passed, th.name


def test_live_abort_check_fires_only_failing_abort_thresholds_after_their_delay(run):
    _, book = run
    slo = thresholds.parse_slo("""
[thresholds]
error_rate = [{ threshold = "rate<0.01", abortOnFail = true, delayAbortEval = "30s" }]
itl_ms = [{ threshold = "p(99)<100000", abortOnFail = true }]
ttft_ms = ["p(99)<1"]
""")
    assert live_abort_check(slo, book.totals, 10.0) == []
    failed = live_abort_check(slo, book.totals, 31.0)
    assert [r.metric for r in failed] == ["error_rate"]
    assert "FAILED" in failed[0].message


def test_goodput_is_left_to_the_end(run):
    _, book = run
    slo = thresholds.parse_slo('[thresholds]\ngoodput_fraction = ["rate>0.5"]\n')
    assert evaluate_live(slo.thresholds[0], book.totals, 10.0) is None


def test_finalize_of_a_killed_run_rebuilds_the_missing_windows(run):
    d, _ = run
    layout = Layout(d)
    live_rows = read_windows(layout.windows_csv)
    data = load_run(d)
    assert sum(r["requests"] for r in live_rows) < len(data.streams)  # the kill lost windows
    finalize_killed(d)
    rows = read_windows(layout.windows_csv)
    assert sum(r["requests"] for r in rows) == len(data.streams)
    assert [r["window_start"] for r in rows] == sorted(r["window_start"] for r in rows)
    kept = {r["window_start"]: r for r in live_rows}
    for r in rows:  # the windows written live are kept as they were
        if r["window_start"] in kept:
            assert r == kept[r["window_start"]]
    import json

    run_json = json.loads(layout.run_json.read_text())
    assert run_json["windows"]["rebuilt"] >= 1 and run_json["windows"]["requests"] == len(
        data.streams
    )
    # The rebuilt windows' percentiles come from the same histograms: within 1 % of numpy.
    last = rows[-1]
    end = data.streams["started_at"] + data.streams["e2e_ms"].fillna(0) / 1000
    in_last = data.streams[(end // 10.0) * 10.0 == last["window_start"]]
    pool = in_last[in_last["outcome"].isin(["ok", "truncated", "stalled"])]
    gaps = data.gaps[data.gaps["stream_id"].isin(pool["stream_id"])]["gap_ms"].to_numpy()
    assert last["itl_ms_p99"] == pytest.approx(np.percentile(gaps, 99), rel=DEFAULT_ALPHA)
