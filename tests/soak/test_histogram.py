"""The mergeable histogram: percentiles within its stated precision of numpy's, merging, wire form."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest

from streamslo.figures.histogram import DEFAULT_ALPHA, LogHistogram

DISTRIBUTIONS = {
    "lognormal ITL": lambda rng: rng.lognormal(3.9, 0.4, 20_000),
    "bimodal with stalls": lambda rng: np.concatenate(
        [rng.normal(50, 3, 9_900), rng.uniform(2_000, 9_000, 100)]
    ),
    "tiny and zero": lambda rng: np.concatenate(
        [np.zeros(50), rng.uniform(0.0, 0.01, 500), rng.uniform(1, 5, 500)]
    ),
    "few samples": lambda rng: rng.uniform(1, 1000, 7),
}
QUANTILES = (0.0, 0.01, 0.25, 0.5, 0.9, 0.95, 0.99, 0.999, 1.0)


@pytest.mark.parametrize("name", list(DISTRIBUTIONS))
def test_quantiles_within_stated_precision_of_numpy(name):
    rng = np.random.default_rng(7)
    values = DISTRIBUTIONS[name](rng)
    h = LogHistogram()
    h.add_many(values.tolist())
    for q in QUANTILES:
        exact = float(np.percentile(values, q * 100))
        # Relative alpha, plus the floor below which values count as 0 (1 µs in ms).
        assert h.quantile(q) == pytest.approx(exact, rel=DEFAULT_ALPHA, abs=h.floor), (q, exact)
    assert h.quantile(0.0) == values.min() and h.quantile(1.0) == values.max()
    assert h.mean == pytest.approx(values.mean())
    assert len(h) == values.size


def test_merging_two_processes_equals_one_histogram_of_all_samples():
    rng = np.random.default_rng(1)
    a, b = rng.lognormal(3, 0.7, 5_000), rng.lognormal(5, 0.3, 3_000)
    ha, hb, hall = LogHistogram(), LogHistogram(), LogHistogram()
    ha.add_many(a.tolist())
    hb.add_many(b.tolist())
    hall.add_many(np.concatenate([a, b]).tolist())
    merged = ha.copy().merge(hb)
    assert merged.to_wire() == hall.to_wire()
    assert ha.count == a.size  # merging into a copy left the original alone


def test_wire_form_survives_msgpack_and_rebuilds_the_same_histogram():
    h = LogHistogram(scale=1000.0)  # seconds in, ms kept
    h.add_many([0.05, 0.051, 0.2, 3.0])
    h.add(0.0)
    wire = msgpack.unpackb(msgpack.packb(h.to_wire()))
    back = LogHistogram.from_wire(wire)
    assert back.to_wire() == h.to_wire()
    assert back.quantile(0.5) == pytest.approx(51.0, rel=DEFAULT_ALPHA)
    assert back.zero == 1 and back.max == 3000.0
    # Compact: one byte per empty bucket between the extremes (50 ms .. 3 s: ~206 buckets).
    assert len(msgpack.packb(wire)) < 300


def test_from_wire_rejects_counts_that_do_not_add_up():
    wire = LogHistogram().to_wire() | {"n": 3}
    with pytest.raises(ValueError, match="add up"):
        LogHistogram.from_wire(wire)
    with pytest.raises(ValueError, match="not a histogram"):
        LogHistogram.from_wire({"a": 0.01})


def test_merge_refuses_another_precision():
    with pytest.raises(ValueError, match="precision"):
        LogHistogram(0.01).merge(LogHistogram(0.02))


def test_count_le_gives_cumulative_buckets():
    h = LogHistogram()
    h.add_many([1.0, 2.0, 5.0, 100.0, 1000.0])
    assert h.count_le(0.5) == 0
    assert h.count_le(5.0) == 3
    assert h.count_le(99.0) == 3
    assert h.count_le(1e6) == 5


def test_memory_is_bounded_by_the_value_range_not_the_sample_count():
    h = LogHistogram()
    rng = np.random.default_rng(3)
    for _ in range(50):
        h.add_many(rng.uniform(1, 1000, 10_000).tolist())
    assert h.count == 500_000
    assert len(h.to_wire()["c"]) < 400  # 1 ms .. 1 s at 1 %: ~350 buckets
