"""Open-loop and soak runs timed to the tens of milliseconds: arrivals sent at their scheduled
time (median lag under 50 ms, none more than 0.2 s late under a concurrency cap), the 'timed'
server's 50 ms gaps measured as 50 +- 10 ms.

True on a quiet machine only: the default suite runs the same loads and checks what holds under
any load (tests/loadgen/test_load_modes.py); ``tox -e bench`` (``STREAMSLO_BENCH_SMOKE=1``) runs
these.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.bench.conftest import bench_run
from tests.loadgen.test_load_modes import capped_open_loop_run, open_loop_run, soak_run

pytestmark = [pytest.mark.load, bench_run]


def test_open_loop_arrivals_start_at_their_scheduled_time(faulty_server, tmp_path):
    s, _ = open_loop_run(faulty_server, tmp_path)
    lag = s["started_at"] - s["scheduled_at"]
    assert (lag > -0.01).all() and lag.median() < 0.05


def test_capped_open_loop_sends_on_time_or_drops(faulty_server, tmp_path):
    s, _, _ = capped_open_loop_run(faulty_server, tmp_path)
    late = (s["started_at"] - s["scheduled_at"]).to_numpy()
    assert late.max() < 0.2, late.max()


def test_soak_measures_the_servers_gaps(faulty_server, tmp_path):
    _, summary = soak_run(faulty_server, tmp_path)
    assert np.isclose(np.median(summary["itl_ms"]["p50"]), 50, atol=10)
