"""Confidence intervals: exact weighted percentiles, whole-stream resampling, sane widths."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from streamslo.reports.bootstrap import (
    Clustered,
    bootstrap_means,
    bootstrap_percentiles,
    difference_interval,
    draw_stream_counts,
    resamples_for,
)
from tests.reports.conftest import Built, write_fixed


def test_weighted_percentiles_equal_numpy_on_repeated_streams() -> None:
    rng = np.random.default_rng(3)
    values = rng.exponential(10.0, 300)
    clusters = rng.integers(0, 25, 300)
    data = Clustered(values, clusters, 30)  # 5 streams gave no sample
    ps = [0, 50, 90, 99, 100]
    got = bootstrap_percentiles(data, ps, 40, np.random.default_rng(11))
    draws = draw_stream_counts(np.random.default_rng(11), 30, 40)
    assert (draws.sum(axis=1) == 30).all()
    for i, counts in enumerate(draws):
        pooled = np.repeat(values, counts[clusters])  # each drawn stream brings all its gaps
        if pooled.size == 0:
            assert np.isnan(got[i]).all()
        else:
            np.testing.assert_allclose(got[i], np.percentile(pooled, ps), rtol=1e-12)


def test_bootstrap_means() -> None:
    x = np.array([0.0] * 90 + [1.0] * 10)
    m = bootstrap_means(Clustered(x, np.arange(100), 100), 2000, np.random.default_rng(0))
    assert m.mean() == pytest.approx(0.1, abs=0.005)
    assert m.std() == pytest.approx(np.sqrt(0.1 * 0.9 / 100), rel=0.15)


def _gaps(rng: np.random.Generator, n_streams: int, per: int, shift: float) -> Clustered:
    # each stream has its own speed, so its gaps are correlated
    speed = rng.gamma(2.0, 10.0, n_streams)
    values = (speed[:, None] + rng.normal(0, 1, (n_streams, per))).ravel() + shift
    return Clustered(values, np.repeat(np.arange(n_streams), per), n_streams)


def test_ci_excludes_zero_for_a_real_difference_and_includes_it_for_none() -> None:
    rng = np.random.default_rng(5)
    a, b = _gaps(rng, 80, 30, 0.0), _gaps(rng, 80, 30, 15.0)
    ba = bootstrap_percentiles(a, [50], 500, np.random.default_rng(1))[:, 0]
    bb = bootstrap_percentiles(b, [50], 500, np.random.default_rng(2))[:, 0]
    low, high = difference_interval(ba, bb, 0.95)
    assert low is not None and high is not None and low > 0
    same = bootstrap_percentiles(a, [50], 500, np.random.default_rng(3))[:, 0]
    low, high = difference_interval(ba, same, 0.95)
    assert low is not None and high is not None and low < 0 < high


def test_whole_stream_resampling_is_wider_than_per_gap() -> None:
    # correlated gaps: resampling single gaps would understate the uncertainty
    data = _gaps(np.random.default_rng(8), 60, 50, 0.0)
    per_gap = Clustered(data.values, np.arange(data.values.size), data.values.size)
    w_stream = np.std(bootstrap_percentiles(data, [50], 400, np.random.default_rng(1)))
    w_gap = np.std(bootstrap_percentiles(per_gap, [50], 400, np.random.default_rng(1)))
    assert w_stream > 3 * w_gap


def test_resample_budget_is_bounded() -> None:
    assert resamples_for(1_000, 1000) == 1000
    assert resamples_for(10_000_000, 1000) == 200
    assert resamples_for(10_000_000, 50) == 50


def test_report_cis_real_difference(compared: Built) -> None:
    itl = next(x for x in compared.data["latency"] if x["metric"] == "itl_ms")
    p99 = next(d for d in itl["differences"] if d["stat"] == "p99")
    assert p99["ci_low"] < p99["delta"] < p99["ci_high"] < 0
    assert p99["significant"] is True
    trunc = next(r for r in compared.data["rates"] if r["metric"] == "truncation_rate")
    assert trunc["difference"]["ci_high"] < 0


def test_identical_runs_give_cis_including_zero(tmp_path: Path) -> None:
    from streamslo.reports import build_report

    s = write_fixed(tmp_path / "a", truncate_every=9)
    res = build_report(s.path, s.path, tmp_path / "same.html", resamples=300)
    data = json.loads(res.json.read_text())
    for entry in data["latency"]:
        for d in entry["differences"]:
            assert d["delta"] == 0
            assert d["ci_low"] <= 0 <= d["ci_high"], (entry["metric"], d)
            assert d["significant"] is False
    for r in data["rates"]:
        if r["difference"]["ci_low"] is not None:
            assert r["difference"]["ci_low"] <= 0 <= r["difference"]["ci_high"]
    assert data["warnings"] == []


def test_seeded_and_reproducible(tmp_path: Path, compared: Built) -> None:
    from streamslo.reports import build_report

    again = build_report(compared.before.path, compared.after.path, tmp_path / "again.html")
    assert again.report.latency == compared.result.report.latency
    assert again.report.rates == compared.result.report.rates
