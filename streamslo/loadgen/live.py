"""Live SLO figures for the web UI: outcome counts and an ITL histogram, mergeable across
Locust workers (sent with ``report_to_master``, so every key survives msgpack).

The histogram has 1 ms buckets below 1 s and 64 buckets per doubling above: the live p99 is
within about 1 % of the exact one that ``streamslo verify`` later computes from the gaps.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from streamslo.stream.outcome import OUTCOMES, began
from streamslo.stream.timing import StreamRecord

__all__ = ["LiveStats"]


def _bucket(ms: float) -> int:
    if ms < 1000.0:
        return int(ms)
    return 1000 + int(math.log2(ms / 1000.0) * 64)


def _bucket_value(b: int) -> float:
    if b < 1000:
        return b + 0.5
    return 1000.0 * 2 ** ((b - 1000 + 0.5) / 64)


class LiveStats:
    """Running counts for one process (or, on the master, for all workers)."""

    def __init__(self) -> None:
        self.outcomes: dict[str, int] = dict.fromkeys(OUTCOMES, 0)
        self.began = 0
        self.began_failed = 0
        self.itl: Counter[int] = Counter()
        self.ttft: Counter[int] = Counter()

    def add(self, rec: StreamRecord) -> None:
        outcome = rec.outcome or "cancelled"
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1
        if outcome == "cancelled" or not began(rec.status, outcome):
            return
        self.began += 1
        if outcome != "ok":
            self.began_failed += 1
        # Counter.update counts a list in C: a stream's ~100 gaps cost microseconds.
        self.itl.update([int(g * 1000.0) if g < 1.0 else _bucket(g * 1000.0) for g in rec.gap_s])
        if rec.ttft_s is not None:
            self.ttft[_bucket(rec.ttft_s * 1000.0)] += 1

    def to_wire(self) -> dict[str, Any]:
        """A msgpack-safe snapshot (histogram keys as strings)."""
        return {
            "outcomes": dict(self.outcomes),
            "began": self.began,
            "began_failed": self.began_failed,
            "itl": {str(k): v for k, v in self.itl.items()},
            "ttft": {str(k): v for k, v in self.ttft.items()},
        }

    def merge_wire(self, data: dict[str, Any]) -> None:
        for k, v in data.get("outcomes", {}).items():
            self.outcomes[k] = self.outcomes.get(k, 0) + int(v)
        self.began += int(data.get("began", 0))
        self.began_failed += int(data.get("began_failed", 0))
        for name in ("itl", "ttft"):
            hist = getattr(self, name)
            for k, v in data.get(name, {}).items():
                hist[int(k)] = hist.get(int(k), 0) + int(v)

    def reset(self) -> None:
        self.__init__()  # type: ignore[misc]

    @staticmethod
    def quantile(hist: dict[int, int], q: float) -> float | None:
        total = sum(hist.values())
        if not total:
            return None
        rank = q * (total - 1)
        seen = 0
        for b in sorted(hist):
            seen += hist[b]
            if seen > rank:
                return _bucket_value(b)
        return _bucket_value(max(hist))

    def rows(self) -> list[dict[str, Any]]:
        """Rows for the web UI's streamslo tab."""
        counted = sum(v for k, v in self.outcomes.items() if k != "cancelled")
        rate = None if not self.began else self.began_failed / self.began
        fivexx = None if not counted else self.outcomes.get("http_5xx", 0) / counted
        itl50, itl99 = self.quantile(self.itl, 0.5), self.quantile(self.itl, 0.99)
        ttft95 = self.quantile(self.ttft, 0.95)

        def fmt(v: float | None, pct: bool = False) -> str:
            if v is None:
                return "no data"
            return f"{v * 100:.3f} %" if pct else f"{v:.1f} ms"

        def verdict(v: float | None, bound: float) -> str:
            return "no data" if v is None else ("PASS" if v < bound else "FAIL")

        rows = [
            {"name": "truncation_rate", "value": fmt(rate, True), "slo": "rate<0.001", "status": verdict(rate, 0.001)},
            {"name": "http_5xx_rate", "value": fmt(fivexx, True), "slo": "rate<0.001", "status": verdict(fivexx, 0.001)},
            {"name": "itl_ms p(99)", "value": fmt(itl99), "slo": "p(99)<200", "status": verdict(itl99, 200.0)},
            {"name": "itl_ms p(50)", "value": fmt(itl50), "slo": "", "status": ""},
            {"name": "ttft_ms p(95)", "value": fmt(ttft95), "slo": "", "status": ""},
        ]
        for name in OUTCOMES:
            rows.append({"name": f"outcome: {name}", "value": str(self.outcomes.get(name, 0)), "slo": "", "status": ""})
        return rows
