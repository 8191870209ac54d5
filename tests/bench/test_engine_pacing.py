"""The bundled engine's pacing, in real time: a new stream's first gap is a whole interval.

A comparison of timings that holds on a quiet machine only (thread wake-ups under load move a
gap by more than the prefill it checks): the default suite checks the rule that decides it,
``_OutputPhase``, step by step (tests/server/test_hardening.py); ``tox -e bench``
(``STREAMSLO_BENCH_SMOKE=1``) runs this.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import pytest

from tests.bench.conftest import bench_run
from tests.server.test_hardening import slow_prefill_engine

if TYPE_CHECKING:
    from streamslo.server.engine import TokenStream

pytestmark = [pytest.mark.load, bench_run]


def test_a_new_streams_first_gap_is_a_whole_interval() -> None:
    """Every step hands its tokens to the loop at the same point of its interval, so the step
    that admits a stream (longer by its prefill) does not post later than the next: with 8 ms
    prefills at 20 ms a step, a new stream's first gap was 12 ms (an interval less the prefill)
    while a running stream's gaps stay an interval."""
    import itertools
    import statistics

    from streamslo.server.engine import GenRequest

    engine = slow_prefill_engine(prefill_s=0.008, interval_ms=20)
    engine.start()

    async def timed(stream: TokenStream) -> list[float]:
        loop = asyncio.get_running_loop()
        times: list[float] = []
        try:
            async for item in stream:
                if item[0] != "token":
                    break
                times.append(loop.time())
                stream.mark_consumed()
        finally:
            stream.cancel()
        return times

    async def main() -> tuple[list[float], list[list[float]]]:
        running = asyncio.ensure_future(
            timed(engine.submit(GenRequest([0, 40], 60, 1.0, 1, ignore_eos=True)))
        )
        news = []
        for i in range(8):  # one new stream every 130 ms (six and a half steps) while it runs
            await asyncio.sleep(0.13)
            req = GenRequest([0, 41 + i], 4, 1.0, 2 + i, ignore_eos=True)
            news.append(asyncio.ensure_future(timed(engine.submit(req))))
        return await asyncio.wait_for(running, 30), await asyncio.wait_for(
            asyncio.gather(*news), 30
        )

    try:
        running, news = asyncio.run(main())
    finally:
        engine.stop()
    assert len(running) == 60 and all(len(t) == 4 for t in news)
    first_gaps = [(t[1] - t[0]) * 1000 for t in news]
    running_gaps = [(b - a) * 1000 for a, b in itertools.pairwise(running)]
    # Before: ~12 ms (20 - 8). Bounds wide enough for a busy machine's thread wake-ups.
    assert statistics.median(first_gaps) > 17.0, first_gaps
    assert 18.0 < statistics.median(running_gaps) < 22.0, running_gaps
