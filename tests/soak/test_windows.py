"""Window aggregation and merging: invariants, agreement with numpy, two processes as one."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest

from streamslo.figures.histogram import DEFAULT_ALPHA
from streamslo.figures.windows import WINDOW_COLUMNS, WindowAggregator, WindowBook, window_index
from tests.soak.helpers import Clock, record

W = 10.0


def _records(n: int, start: float, span: float, seed: int = 0):
    rng = np.random.default_rng(seed)
    ends = np.sort(rng.uniform(start, start + span, n))
    outcomes = rng.choice(["ok"] * 8 + ["truncated", "http_5xx"], n)
    return [
        record(i, float(e), outcome=str(o), status=503 if o == "http_5xx" else 200, rng=rng)
        for i, (e, o) in enumerate(zip(ends, outcomes, strict=True))
    ]


def _run(book: WindowBook, aggs: list[WindowAggregator], recs, clock: Clock, step: float = 3.0):
    """Feed records in end order, shipping each process's parts every ``step`` seconds."""
    rows = []
    for i, rec in enumerate(recs):
        end = rec.started_at + rec.e2e_s
        while clock.t + step <= end:
            clock.t += step
            for a in aggs:
                book.merge(msgpack.unpackb(msgpack.packb(a.take())))
            rows += book.close_ready()
        aggs[i % len(aggs)].add(rec)
    clock.t += step
    for a in aggs:
        book.merge(a.take())
    return rows + book.close_all()


def test_sum_of_requests_equals_streams_and_percentiles_agree_with_numpy():
    clock = Clock(1_000_000.0)
    recs = _records(3_000, clock.t, 120.0)
    book = WindowBook(W, clock)
    rows = _run(book, [WindowAggregator(W, "p1", clock)], recs, clock)
    assert sum(r["requests"] for r in rows) == len(recs)
    assert [r["window_start"] for r in rows] == sorted(
        {r["window_start"] for r in rows}
    )  # one row each
    assert set(rows[0].values) == set(WINDOW_COLUMNS)
    by_k: dict[int, list] = {}
    for rec in recs:
        by_k.setdefault(window_index(rec.started_at + rec.e2e_s, W), []).append(rec)
    for row in rows:
        mine = by_k.get(round(row["window_start"] / W), [])
        assert row["requests"] == len(mine)
        assert row["http_5xx"] == sum(r.outcome == "http_5xx" for r in mine)
        pool = [r for r in mine if r.outcome != "http_5xx"]
        assert row["began"] == len(pool)
        gaps = np.array([g * 1000 for r in pool for g in r.gap_s])
        ttft = np.array([r.ttft_s * 1000 for r in pool])
        for q in (50, 95, 99):
            assert row[f"itl_ms_p{q}"] == pytest.approx(
                np.percentile(gaps, q), rel=DEFAULT_ALPHA, abs=1e-3
            )
            assert row[f"ttft_ms_p{q}"] == pytest.approx(
                np.percentile(ttft, q), rel=DEFAULT_ALPHA, abs=1e-3
            )
        assert row["itl_ms_max"] == pytest.approx(gaps.max(), abs=1e-3)
        assert row["tokens"] == sum(r.tokens for r in mine)


def test_two_processes_give_the_same_windows_as_one():
    recs = _records(2_000, 1_000_000.0, 60.0, seed=4)
    c1, c2 = Clock(), Clock()
    one = _run(WindowBook(W, c1), [WindowAggregator(W, "only", c1)], recs, c1)
    two = _run(
        WindowBook(W, c2), [WindowAggregator(W, "a", c2), WindowAggregator(W, "b", c2)], recs, c2
    )
    strip = ("gen_cpu_pct", "gen_lag_ms_p99", "gen_rss_mb", "active_streams")
    assert [{k: v for k, v in r.values.items() if k not in strip} for r in one] == [
        {k: v for k, v in r.values.items() if k not in strip} for r in two
    ]


def test_a_window_waits_for_every_process_that_reports():
    clock = Clock(1_000_000.0)
    book = WindowBook(W, clock)
    fast, slow = WindowAggregator(W, "fast", clock), WindowAggregator(W, "slow", clock)
    slow.add(record(1, clock.t + 1))
    book.merge(slow.take())  # slow reported once, at the start
    clock.t += 12
    fast.add(record(2, clock.t - 1))
    book.merge(fast.take())
    assert book.close_ready() == []  # slow's watermark is still before the window's end
    clock.t += 1
    book.merge(slow.take())
    rows = book.close_ready()
    assert [r["requests"] for r in rows] == [1]  # the first window only; the second is open
    clock.t += 100  # slow falls silent: after max_wait the window closes anyway
    book.merge(fast.take())
    assert sum(r["requests"] for r in book.close_ready()) == 1


def test_a_late_part_still_counts_once():
    clock = Clock(1_000_000.0)
    book = WindowBook(W, clock)
    a = WindowAggregator(W, "a", clock)
    a.add(record(1, clock.t + 1))
    clock.t += 15
    book.merge(a.take())
    first = book.close_ready()
    a.add(record(2, clock.t - 14))  # ended in the first window, reported after it closed
    clock.t += 15
    book.merge(a.take())
    rest = book.close_ready() + book.close_all()
    assert sum(r["requests"] for r in first + rest) == 2
    assert book.late_parts == 1
    assert sum(g.requests for g in book.totals.values()) == 2


def test_generator_samples_average_per_process_and_add_across():
    clock = Clock(1_000_000.0)
    book = WindowBook(W, clock)
    for name, cpu, active, rss in (("a", 40.0, 10, 100 * 2**20), ("b", 80.0, 30, 50 * 2**20)):
        agg = WindowAggregator(W, name, clock)
        for s in range(5):
            agg.sample(clock.t + s, cpu=cpu + s, active=active, rss_bytes=rss, lag_ms=1.0 + s)
        book.merge(agg.take())
    clock.t += 30
    (row,) = book.close_all()
    assert row["gen_cpu_pct"] == pytest.approx(82.0)  # the busiest process's mean
    assert row["active_streams"] == pytest.approx(40.0)  # streams open in all processes
    assert row["gen_rss_mb"] == pytest.approx(150.0)
    assert row["gen_lag_ms_p99"] == pytest.approx(
        np.percentile([1, 2, 3, 4, 5] * 2, 99), rel=DEFAULT_ALPHA
    )
    assert row["requests"] == 0


def test_a_report_with_another_window_length_is_refused():
    clock = Clock()
    with pytest.raises(ValueError, match="5 s windows"):
        WindowBook(W, clock).merge(WindowAggregator(5.0, "x", clock).take())


def test_parts_handed_over_as_objects_give_the_same_rows_as_wire_parts():
    recs = _records(500, 1_000_000.0, 30.0, seed=9)
    rows = {}
    for wire in (True, False):
        clock = Clock()
        book, agg = WindowBook(W, clock), WindowAggregator(W, "p", clock)
        for rec in recs:
            agg.add(rec)
        clock.t += 100
        book.merge(agg.take(wire=wire))
        rows[wire] = [r.values for r in book.close_all()]
    assert rows[True] == rows[False] and sum(r["requests"] for r in rows[True]) == 500
