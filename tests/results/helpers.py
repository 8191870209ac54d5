"""Finished stream records and directories as a run leaves them, for the results tests."""

from __future__ import annotations

import time
from pathlib import Path

from streamslo.stream.timing import StreamRecord


def record(
    n: int, *, gaps: int = 3, error: str = "", outcome: str = "ok", started_at: float | None = None
) -> StreamRecord:
    """A finished stream ``s-<n>`` with ``gaps`` inter-token gaps of 20 ms."""
    t0 = 100.0
    rec = StreamRecord(
        stream_id=f"s-{n}",
        protocol="sse",
        user_class="SSEUser",
        started_at=time.time() if started_at is None else started_at,
        t0=t0,
    )
    rec.status = 200
    rec.outcome = outcome
    rec.error = error
    rec.ttft_s = 0.05
    rec.e2e_s = 0.05 + 0.02 * gaps
    rec.tokens = gaps + 1
    rec.gap_s = [0.02] * gaps
    rec.gap_t = [t0 + 0.05 + 0.02 * (i + 1) for i in range(gaps)]
    return rec


def lines(path: Path) -> list[bytes]:
    """The file's lines; fails if the last one is not terminated (half a row)."""
    data = path.read_bytes()
    assert data.endswith(b"\n"), f"{path} ends in half a line: {data[-80:]!r}"
    return data.splitlines()
