"""Words for the report: each metric's name, unit and meaning, whether lower is better, the
outcomes' meanings, and plain text for run.json values a reader should not see as Python.

Metric meanings come from the metric registry (:data:`streamslo.figures.metrics.METRICS`), so the
glossary says what ``verify`` and the thresholds mean by the same id. Nothing here computes a
figure or prints.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from streamslo.figures.metrics import METRICS

__all__ = [
    "HIGHER_IS_BETTER",
    "OUTCOME_MEANINGS",
    "base_metric",
    "change_word",
    "glossary_terms",
    "higher_is_better",
    "metric_label",
    "metric_unit",
    "protocol_text",
]

#: Short human names of the metrics the report shows most (others: their id).
_LABELS: Mapping[str, str] = {
    "ttft_ms": "Time to first token",
    "itl_ms": "Inter-token latency",
    "tpot_ms": "Time per output token",
    "e2e_ms": "End-to-end latency",
    "connect_ms": "Connect time",
    "max_gap_ms": "Longest gap per stream",
    "truncation_rate": "Truncation rate",
    "http_5xx_rate": "HTTP 5xx rate",
    "connect_error_rate": "Connection error rate",
    "error_rate": "Error rate",
    "tokens_per_s": "Tokens per second",
    "requests_per_s": "Requests per second",
    "goodput_per_s": "Goodput",
    "goodput_fraction": "Goodput share",
}

_UNITS: Mapping[str, str] = {"ms": "ms", "ratio": "%", "count": "", "per_s": "/s"}

#: Metrics where a larger value is the better one (every other shown metric: lower is better).
HIGHER_IS_BETTER: frozenset[str] = frozenset(
    {
        "tokens_per_s",
        "requests_per_s",
        "goodput_per_s",
        "goodput_fraction",
        "tokens",
        "requests",
        "streams_began",
    }
)

#: One line per stream outcome (docs/outcomes.md).
OUTCOME_MEANINGS: Mapping[str, str] = {
    "ok": "ended normally: terminal marker seen, no error, token count consistent",
    "truncated": "the transport ended before the terminal marker",
    "silent_truncation": "the terminal marker came, but content is missing",
    "error_event": "an error object arrived inside the stream",
    "malformed": "not valid HTTP / SSE / JSON / WebSocket, or counts that do not add up",
    "stalled": "no progress for the stall timeout",
    "timeout": "the whole request ran past its deadline while still streaming",
    "http_4xx": "a 4xx answer before the stream began",
    "http_5xx": "a 5xx answer before the stream began",
    "connect_error": "no connection: refused, unreachable, TLS failure or reset before any answer",
    "cancelled": "stopped by the load test at the end of the run (in no rate)",
    "client_cancelled": "cancelled on purpose by the client (--cancel-rate; in no rate)",
}


def base_metric(metric: str) -> str:
    """``ttft_ms{protocol:ws}`` -> ``ttft_ms``."""
    return metric.split("{", 1)[0].strip()


def metric_label(metric: str) -> str:
    """The metric's short human name (its id when it has none)."""
    return _LABELS.get(base_metric(metric), base_metric(metric))


def metric_unit(metric: str) -> str:
    """``ms``, ``%``, ``/s`` or ``""`` (a count or unknown)."""
    spec = METRICS.get(base_metric(metric))
    return "" if spec is None else _UNITS.get(spec.unit, spec.unit)


def higher_is_better(metric: str) -> bool:
    """Whether a larger value of ``metric`` is the better one (latency and failure rates: no)."""
    return base_metric(metric) in HIGHER_IS_BETTER


def change_word(metric: str, delta: float | None, significant: bool | None) -> str | None:
    """``better`` / ``worse`` for a real change by the metric's direction, ``within noise``
    for one whose interval holds 0, ``no change`` for the same value on both sides, None when
    there is nothing to judge."""
    if delta is None or significant is None:
        return None
    if delta == 0:
        return "no change"
    if not significant:
        return "within noise"
    return "better" if (delta > 0) == higher_is_better(metric) else "worse"


def glossary_terms(metrics: Iterable[str]) -> tuple[tuple[str, str, str, str], ...]:
    """``(id, name, unit, meaning)`` of every distinct metric in ``metrics``, in first-seen
    order; ids that are not in the registry are left out."""
    seen: dict[str, tuple[str, str, str, str]] = {}
    for m in metrics:
        base = base_metric(m)
        spec = METRICS.get(base)
        if spec is None or base in seen:
            continue
        unit = {"ratio": "% of requests", "per_s": "per second", "count": "count"}.get(
            spec.unit, spec.unit
        )
        seen[base] = (base, metric_label(base), unit, spec.description)
    return tuple(seen.values())


def _share(v: Any) -> str:
    return f"{v * 100:.0f} %" if isinstance(v, (int, float)) and not isinstance(v, bool) else str(v)


def protocol_text(protocol: object, mix: object = None) -> str:
    """``SSE``; a mix as ``SSE 70 %, WS 30 %``; other shares of the mix (``slow_readers``) as
    ``slow readers 10 %`` when not zero. Never a Python dict."""
    if isinstance(mix, Mapping) and mix:
        protos = [(str(k), v) for k, v in mix.items() if str(k) in ("sse", "ws") and v]
        extras = [(str(k), v) for k, v in mix.items() if str(k) not in ("sse", "ws") and v]
        if len(protos) == 1:
            parts = [protos[0][0].upper()]
        else:
            parts = [f"{k.upper()} {_share(v)}" for k, v in protos] or [protocol_text(protocol)]
        parts += [f"{k.replace('_', ' ')} {_share(v)}" for k, v in extras]
        return ", ".join(parts)
    if protocol is None or protocol == "":
        return "—"
    return str(protocol).upper() if str(protocol) in ("sse", "ws") else str(protocol)
