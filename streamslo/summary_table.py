"""The plain-text summary a run prints (the CLI prints it; nothing here prints)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from streamslo.stream.outcome import OUTCOMES

__all__ = ["format_summary"]


def _ms(v: Any) -> str:
    return "-" if v is None else f"{v:,.1f}"


def _rate(v: Any) -> str:
    return "no data" if v is None else f"{v * 100:.3f} %"


def format_summary(summary: dict[str, Any], checks: Sequence[Any], run: dict[str, Any]) -> str:
    """A table of outcomes, rates, latencies and threshold verdicts."""
    lines = []
    if not run.get("valid", True):
        lines.append(f"!! INVALID RUN: {run.get('invalid_reason')}")
    lines.append(f"requests {summary['requests']}   requests/s {_ms(summary.get('requests_per_s'))}   tokens/s {_ms(summary.get('tokens_per_s'))}")
    counts = summary["outcomes"]
    lines.append("outcomes  " + "  ".join(f"{o}={counts.get(o, 0)}" for o in OUTCOMES if counts.get(o, 0)))
    lines.append(
        f"rates     truncation {_rate(summary['truncation_rate'])}   5xx {_rate(summary['http_5xx_rate'])}   errors {_rate(summary['error_rate'])}"
    )
    lines.append(f"{'latency (ms)':<14}{'p50':>10}{'p90':>10}{'p95':>10}{'p99':>10}{'max':>10}{'count':>9}")
    for name in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms", "ttft_sched_ms", "e2e_sched_ms"):
        st = summary.get(name)
        if not st:
            continue
        lines.append(
            f"{name:<14}{_ms(st['p50']):>10}{_ms(st['p90']):>10}{_ms(st['p95']):>10}{_ms(st['p99']):>10}{_ms(st['max']):>10}{st['count']:>9}"
        )
    if checks:
        lines.append("thresholds")
        for c in checks:
            mark = "PASS" if c.passed else "FAIL"
            seen = "no data" if c.observed is None else f"{c.observed:.6g}"
            lines.append(f"  {mark}  {c.metric:<24} {c.expression:<16} observed {seen}")
    return "\n".join(lines)
