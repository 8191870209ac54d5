"""The timed faulty stream's latencies against the server's own clock (a first token at 0.3 s,
then one every 50 ms), within 40 ms: true where the server's clock is the only delay, on a
quiet machine. On a loaded one a descheduled client or server moves a gap by more (it failed
under a busy suite); the default suite checks the same record's shape and invariant
(tests/stream/test_faulty_matrix.py, ``test_timed_stream_records``). ``tox -e bench`` runs this.
"""

from __future__ import annotations

import pytest

from tests.bench.conftest import bench_run
from tests.faulty.server import TIMED_ITL_S, TIMED_TTFT_S
from tests.stream.test_faulty_matrix import MAX_TOKENS, run_case

pytestmark = [pytest.mark.load, bench_run]


def test_timed_stream_latencies(faulty_server):
    """Run alone (not in the concurrent matrix) so the server's clock is the only delay."""
    for proto in ("sse", "ws"):
        rec = run_case(faulty_server.base_url, "timed", proto)
        assert rec.outcome == "ok"
        assert rec.ttft_s == pytest.approx(TIMED_TTFT_S, abs=0.15)
        assert len(rec.gap_s) == MAX_TOKENS - 1
        for g in rec.gap_s:
            assert g == pytest.approx(TIMED_ITL_S, abs=0.04)
