"""The verdict rule, on runs made in memory (no store, no files): the baseline is the last K
runs that passed; a change counts only beyond noise and beyond its margin; a regression never
becomes a standard."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from streamslo.history.measure import Measured
from streamslo.history.store import HistoryRun
from streamslo.history.verdict import change_interval, judge_series, point_interval
from streamslo.slo.regression import Margin, RegressionSettings

SETTINGS = RegressionSettings(metrics=("itl_ms.p99", "tokens_per_s"))


def run(
    i: int, itl: float, tps: float = 100.0, passed: bool | None = True, noise: float = 0.5
) -> HistoryRun:
    rng = np.random.default_rng(i)
    return HistoryRun(
        id=i,
        run_key=str(i),
        scenario="s",
        target="t",
        start=f"2027-01-{i + 1:02d}T00:00:00Z",
        start_epoch=float(i),
        path="",
        tool_version="0.1.0",
        code_version=None,
        passed=passed,
        valid=True,
        figures={
            "itl_ms.p99": Measured(itl, rng.normal(itl, noise, 400)),
            "tokens_per_s": Measured(tps, rng.normal(tps, 1.0, 400)),
        },
    )


def steady(n: int, level: float = 50.0) -> list[HistoryRun]:
    rng = np.random.default_rng(99)
    return [run(i, level * (1 + rng.normal(0, 0.01))) for i in range(n)]


def test_no_verdict_before_min_baseline_runs_passed():
    js = judge_series(steady(4), SETTINGS)
    assert [j.verdict for j in js] == ["no baseline"] * 3 + ["ok"]
    assert js[0].changes["itl_ms.p99"].low is not None  # a point has its interval all the same


def test_a_rise_beyond_noise_and_margin_is_a_regression():
    runs = [*steady(7), run(7, 65.0)]
    j = judge_series(runs, SETTINGS)[-1]
    assert j.verdict == "regressed" and j.regressed == ("itl_ms.p99",)
    c = j.changes["itl_ms.p99"]
    assert c.delta_low is not None and c.delta_low > 0 and c.delta > c.margin
    assert j.baseline_ids == tuple(range(7))


def test_a_real_change_inside_the_margin_is_no_regression():
    runs = [*steady(7), run(7, 53.5, noise=0.1)]  # +7 %: real, but under the 10 % margin
    c = judge_series(runs, SETTINGS)[-1].changes["itl_ms.p99"]
    assert c.verdict == "within margin" and c.delta_low > 0


def test_a_margin_of_zero_leaves_noise_alone_to_decide():
    runs = [*steady(7), run(7, 53.5, noise=0.1)]
    settings = replace(SETTINGS, margins={"itl_ms.p99": Margin(0.0, False)})
    assert judge_series(runs, settings)[-1].verdict == "regressed"


def test_noise_is_no_regression_however_large_the_change():
    runs = [*steady(7), run(7, 65.0, noise=40.0)]  # the run's own interval is huge
    assert judge_series(runs, SETTINGS)[-1].changes["itl_ms.p99"].verdict == "within noise"


def test_lower_throughput_is_worse_and_lower_latency_better():
    runs = [*steady(7), run(7, 40.0, tps=70.0)]
    j = judge_series(runs, SETTINGS)[-1]
    assert j.changes["itl_ms.p99"].verdict == "improved"
    assert j.changes["tokens_per_s"].verdict == "regressed" and j.regressed == ("tokens_per_s",)


def test_runs_that_failed_their_thresholds_are_no_baseline():
    runs = [*steady(7), run(7, 200.0, passed=False), run(8, 51.0)]
    js = judge_series(runs, SETTINGS)
    assert 7 not in js[-1].baseline_ids and js[-1].verdict == "ok"


def test_a_regression_keeps_failing_until_it_is_fixed():
    """A regression never joins the baseline: the next nights at the same level fail too, and
    a night back at the old level passes."""
    runs = [*steady(7), run(7, 65.0), run(8, 65.5), run(9, 50.2)]
    assert [j.verdict for j in judge_series(runs, SETTINGS)[7:]] == ["regressed", "regressed", "ok"]


def test_the_baseline_is_the_last_k_that_passed():
    settings = replace(SETTINGS, baseline=3, min_baseline=3)
    js = judge_series(steady(6), settings)
    assert js[-1].baseline_ids == (2, 3, 4)


def test_a_metric_without_data_is_said_so():
    runs = [*steady(5), run(5, 50.0)]
    runs[-1] = replace(runs[-1], figures={"tokens_per_s": runs[-1].figures["tokens_per_s"]})
    assert judge_series(runs, SETTINGS)[-1].changes["itl_ms.p99"].verdict == "no data"


def test_the_change_interval_covers_the_change_and_is_seeded():
    base = [Measured(50.0 + i * 0.1, np.random.default_rng(i).normal(50, 1, 400)) for i in range(7)]
    new = Measured(60.0, np.random.default_rng(9).normal(60, 1, 400))
    a = change_interval(new, base, 0.95, np.random.default_rng(1))
    b = change_interval(new, base, 0.95, np.random.default_rng(1))
    assert a == b and a is not None
    level, delta, low, high = a
    assert level == pytest.approx(50.3) and delta == pytest.approx(9.7)
    assert low is not None and high is not None and low < delta < high


def test_a_point_interval_needs_resamples_with_data():
    assert point_interval(Measured(1.0, np.full(400, np.nan)), 0.95) == (None, None)
    low, high = point_interval(Measured(1.0, np.linspace(0, 2, 401)), 0.95)
    assert low == pytest.approx(0.05) and high == pytest.approx(1.95)
