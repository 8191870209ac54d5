"""The fault proxy's timings, end to end, to the tens of milliseconds: latency is a delay line
(TTFT shifted by one trip per answer waited for, the gaps kept), a bandwidth cap slows the stream
several times, a slow close does not lengthen the stream.

Comparisons of timings that hold on a quiet machine only: the default suite checks the same
faults with bounds that hold under any load (tests/proxy/test_outcomes.py); ``tox -e bench``
(``STREAMSLO_BENCH_SMOKE=1``) runs these.
"""

from __future__ import annotations

import pytest

from streamslo.proxy import Faults
from tests.bench.conftest import bench_run
from tests.faulty.server import TIMED_ITL_S, TIMED_TTFT_S
from tests.proxy.test_outcomes import PROTOCOLS, through
from tests.stream.test_faulty_matrix import MAX_TOKENS

pytestmark = [pytest.mark.load, bench_run]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_latency_shifts_ttft_by_the_trips_and_keeps_every_gap(faulty_server, protocol):
    latency = 0.25
    base, _ = through(faulty_server, Faults(), "timed", protocol)
    rec, _ = through(faulty_server, Faults(latency_s=latency), "timed", protocol)
    assert base.outcome == rec.outcome == "ok", rec.error
    # SSE pays the one-way delay once (the answer). WebSocket pays it twice: the client
    # waits for the delayed handshake answer before it sends its request.
    trips = 2 if protocol == "ws" else 1
    assert rec.ttft_s - base.ttft_s == pytest.approx(trips * latency, abs=0.1)
    assert base.ttft_s == pytest.approx(TIMED_TTFT_S, abs=0.15)
    assert len(rec.gap_s) == MAX_TOKENS - 1
    for gap in rec.gap_s:
        assert gap == pytest.approx(TIMED_ITL_S, abs=0.04)  # a delay line: gaps kept


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_bandwidth_cap_slows_the_stream_several_times(faulty_server, protocol):
    base, _ = through(faulty_server, Faults(), "ok", protocol)
    rec, _ = through(faulty_server, Faults(bandwidth=2000, burst=100), "ok", protocol)
    assert base.outcome == rec.outcome == "ok", rec.error
    assert base.e2e_s < rec.e2e_s / 3


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_slow_close_leaves_the_stream_as_fast_as_without(faulty_server, protocol):
    rec, _ = through(faulty_server, Faults(slow_close_s=1.0), "ok", protocol)
    assert rec.outcome == "ok", rec.error
    assert rec.e2e_s < 0.5  # [DONE] came at once
