"""Synthetic stream records and a scripted clock for the window tests."""

from __future__ import annotations

import numpy as np

from streamslo.stream.timing import StreamRecord


class Clock:
    """Epoch seconds that move only when told."""

    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def record(
    i: int,
    end: float,
    *,
    outcome: str = "ok",
    status: int | None = 200,
    protocol: str = "sse",
    rng: np.random.Generator | None = None,
    tokens: int = 20,
    user_class: str = "SSEStreamUser",
) -> StreamRecord:
    """A finished stream ending at epoch ``end`` with random gaps (seconds)."""
    rng = rng or np.random.default_rng(i)
    gaps = (
        rng.lognormal(np.log(0.05), 0.3, tokens - 1).tolist()
        if status is not None and outcome not in ("http_5xx", "connect_error")
        else []
    )
    ttft = float(rng.uniform(0.1, 0.4)) if gaps else None
    e2e = (ttft or 0.0) + sum(gaps) if gaps else 0.01
    gap_t = (np.cumsum(gaps) + (ttft or 0.0)).tolist() if gaps else []  # perf_counter, t0 = 0
    return StreamRecord(
        stream_id=f"s{i}",
        protocol=protocol,
        user_class=user_class,
        started_at=end - e2e,
        t0=0.0,
        status=status,
        outcome=outcome,
        connect_s=0.001,
        ttft_s=ttft,
        e2e_s=e2e,
        tokens=len(gaps) + 1 if gaps else 0,
        gap_s=gaps,
        gap_t=gap_t,
    )
