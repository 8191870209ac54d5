"""Theil–Sen trends and leak verdicts."""

from __future__ import annotations

import numpy as np
import pytest

from streamslo.figures.drift import judge, theil_sen


def test_theil_sen_recovers_a_line_despite_outliers():
    t = np.arange(200.0)
    y = 3.0 * t + 10.0
    y[::17] += 5_000.0  # spikes (a GC, a burst) do not move a robust slope
    slope, intercept, lo, hi = theil_sen(t, y)
    assert slope == pytest.approx(3.0)
    assert intercept == pytest.approx(10.0)
    assert lo <= 3.0 <= hi


def test_the_confidence_interval_covers_the_true_slope_most_of_the_time():
    rng = np.random.default_rng(0)
    t = np.arange(60.0)
    covered = 0
    for _ in range(200):
        y = 0.5 * t + rng.normal(0, 5, t.size)
        _, _, lo, hi = theil_sen(t, y)
        covered += lo <= 0.5 <= hi
    assert 0.90 <= covered / 200 <= 0.99  # about the stated 95 %


def test_a_growing_series_is_a_leak_and_noise_is_flat():
    rng = np.random.default_rng(1)
    t = np.arange(0.0, 3600.0, 10.0)
    leak = judge("gen_rss_mb", "MiB", t, 200.0 + t / 3600.0 * 40.0 + rng.normal(0, 2, t.size))
    assert leak.verdict == "leak"
    assert leak.slope_per_h == pytest.approx(40.0, rel=0.15)
    assert leak.ci_low_per_h > 0 and leak.growth_pct > 5
    flat = judge("gen_rss_mb", "MiB", t, 200.0 + rng.normal(0, 2, t.size) + (t < 300) * -50)
    assert flat.verdict == "flat"  # the warm-up step is left out, and the rest is noise
    tiny = judge("x", "MiB", t, 200.0 + t / 3600.0 * 1.0 + rng.normal(0, 0.01, t.size))
    assert tiny.ci_low_per_h > 0 and tiny.verdict == "flat"  # real, but under 5 % over the run


def test_memory_that_fills_then_levels_off_is_not_a_leak():
    # The shape measured by bench/bench_soak_memory.py: +34 MiB over the first quarter, then
    # flat with noise; fitted over the whole it grows, its later half does not.
    rng = np.random.default_rng(2)
    t = np.arange(0.0, 1200.0, 10.0)
    y = 161.0 + np.minimum(t, 300.0) / 300.0 * 34.0 + rng.normal(0, 4, t.size)
    trend = judge("gen_rss_mb", "MiB", t, y)
    assert trend.ci_low_per_h > 0  # the whole series does slope up...
    assert trend.late_ci_low_per_h < 0 < trend.late_ci_high_per_h  # ...its later half does not
    assert trend.verdict == "flat"


def test_short_series_and_restart_counters():
    assert judge("x", "MiB", [0, 1, 2], [1, 2, 3]).verdict == "too short"
    assert judge("r", "restarts", [0, 10, 20], [0, 0, 2], counter=True).verdict == "restarts"
    assert judge("r", "restarts", [0, 10, 20], [1, 1, 1], counter=True).verdict == "flat"


def test_a_long_series_is_thinned_and_still_fits():
    t = np.arange(0.0, 100_000.0)
    y = 0.001 * t + 50.0
    trend = judge("x", "MiB", t, y)
    assert trend.points == 90_000 and trend.verdict == "leak"
    assert trend.slope_per_h == pytest.approx(3.6, rel=1e-3)


def test_a_run_too_short_to_judge_says_so_with_the_minimum():
    """A 40 s run's open files (scraped every 2 s) warm up from 5 to 16: no verdict, no slope,
    and the note says what a verdict needs."""
    from streamslo.figures.drift import MIN_POINTS, MIN_SPAN_S

    t = np.arange(0.0, 40.0, 2.0)
    trend = judge("server_open_files", "files", t, np.minimum(5 + t / 2, 16))
    assert trend.verdict == "too short" and trend.slope_per_h is None
    assert trend.note == (
        f"too short to judge: 38 s and 18 points; a verdict needs at least {MIN_SPAN_S:.0f} s "
        f"and {MIN_POINTS} points"
    )


@pytest.mark.parametrize("seed", range(12))
def test_flat_is_never_said_beside_an_interval_that_allows_growth(seed):
    """Noisy series of a few minutes: whatever the draw, a ``flat`` verdict comes with a later
    half whose interval allows at most 5 % growth over that half; wider ones are
    ``inconclusive``, with the growth they allow."""
    rng = np.random.default_rng(seed)
    t = np.arange(0.0, 70.0 + 60.0 * (seed % 4), 2.0)
    y = 50.0 + rng.normal(0, 1.0 + 4 * (seed % 3), t.size)
    trend = judge("server_rss_mb", "MiB", t, y)
    assert trend.verdict in ("flat", "inconclusive", "leak", "shrinking")
    half_span_h = (t[-1] - t[int(t.size * 0.1)]) / 2 / 3600.0
    allowed = trend.late_ci_high_per_h * half_span_h / trend.start
    if trend.verdict == "flat":
        assert allowed <= 0.05 * 1.1, trend  # (the thinning makes the half's span inexact)
    if trend.verdict == "inconclusive":
        assert trend.note and "allows growth of" in trend.note


def test_a_wide_interval_is_inconclusive_not_flat():
    rng = np.random.default_rng(7)
    t = np.arange(0.0, 90.0, 2.0)
    trend = judge("server_rss_mb", "MiB", t, 100.0 + rng.normal(0, 15, t.size))
    assert trend.verdict == "inconclusive"
    assert trend.late_ci_high_per_h > 0 > trend.late_ci_low_per_h
