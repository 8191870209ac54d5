"""The metric registry: every metric's name, kind, unit and meaning, and the goodput bounds, with
no numpy or pandas (reference: docs/metrics.md).

Thresholds, the SLO files, the options and the report's glossary read the registry alone; the
computation over a run's streams and gaps, one compute function per metric, is in
:mod:`streamslo.figures.metrics`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Literal

from streamslo.stream.outcome import OUTCOMES

__all__ = [
    "COUNTER_METRICS",
    "GAUGE_METRICS",
    "GOODPUT_KEYS",
    "METRICS",
    "RATE_METRICS",
    "SELECTOR_KEYS",
    "TOKEN_SELECTOR_VALUES",
    "TREND_METRICS",
    "GoodputBounds",
    "MetricKind",
    "MetricSpec",
    "metric_kind",
]

MetricKind = Literal["trend", "rate", "counter", "gauge"]


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One metric: what thresholds, the report and the live tab call it, and what it means."""

    name: str
    kind: MetricKind
    unit: str
    """``ms``, ``ratio``, ``count`` or ``per_s``."""
    description: str


def _outcome_rate(outcome: str) -> MetricSpec:
    return MetricSpec(
        f"{outcome}_rate",
        "rate",
        "ratio",
        f"requests that ended {outcome!r}, over all not cancelled",
    )


_SPECS: tuple[MetricSpec, ...] = (
    MetricSpec(
        "ttft_ms",
        "trend",
        "ms",
        "start of the request to the first token position, per stream that began",
    ),
    MetricSpec(
        "itl_ms",
        "trend",
        "ms",
        "every gap between consecutive token positions, pooled over streams (a failed stream adds its open last gap); itl_ms{token:answer}: only the gaps after each stream's first answer token",
    ),
    MetricSpec(
        "ttfo_ms",
        "trend",
        "ms",
        "start of the request to the first answer token (reasoning and tool-call tokens come before it), per stream that began and had one",
    ),
    MetricSpec(
        "ttftc_ms",
        "trend",
        "ms",
        "start of the request to the first tool-call token (time to first tool call), per stream that began and had one",
    ),
    MetricSpec(
        "tpot_ms", "trend", "ms", "(e2e - ttft) / (tokens - 1), per stream with at least two tokens"
    ),
    MetricSpec("e2e_ms", "trend", "ms", "start of the request to the end of the stream"),
    MetricSpec(
        "connect_ms",
        "trend",
        "ms",
        "time to establish the connection, for requests that opened one",
    ),
    MetricSpec("max_gap_ms", "trend", "ms", "the largest inter-token gap of each stream"),
    MetricSpec(
        "ttft_sched_ms", "trend", "ms", "open loop: ttft measured from the scheduled send time"
    ),
    MetricSpec(
        "e2e_sched_ms", "trend", "ms", "open loop: e2e measured from the scheduled send time"
    ),
    MetricSpec(
        "truncation_rate",
        "rate",
        "ratio",
        "streams that began and did not end ok, over streams that began",
    ),
    # http_5xx_rate is both a headline rate and an outcome rate: listed once.
    MetricSpec(
        "http_5xx_rate", "rate", "ratio", "requests that ended http_5xx, over all not cancelled"
    ),
    MetricSpec(
        "error_rate", "rate", "ratio", "requests that did not end ok, over all not cancelled"
    ),
    *(_outcome_rate(o) for o in OUTCOMES if o not in ("cancelled", "client_cancelled", "http_5xx")),
    MetricSpec("requests", "counter", "count", "every request of the run, cancelled ones included"),
    MetricSpec(
        "tokens", "counter", "count", "token positions received (usage under --coalesced-chunks)"
    ),
    MetricSpec("streams_began", "counter", "count", "streams that began and were not cancelled"),
    MetricSpec(
        "reasoning_tokens",
        "counter",
        "count",
        "token positions that carried reasoning (part of tokens)",
    ),
    MetricSpec(
        "tool_tokens",
        "counter",
        "count",
        "token positions that carried tool-call arguments (part of tokens)",
    ),
    MetricSpec(
        "unchecked_stop_rate",
        "rate",
        "ratio",
        "streams that ended ok with an ordinary stop this run could not check (no forced "
        "length, no matching reference reply), over streams that ended ok",
    ),
    MetricSpec(
        "goodput_fraction",
        "rate",
        "ratio",
        "requests that ended ok and met every goodput bound, over all not cancelled",
    ),
    MetricSpec(
        "goodput_per_s",
        "gauge",
        "per_s",
        "requests that ended ok and met every goodput bound, per second of the run",
    ),
    MetricSpec("requests_per_s", "gauge", "per_s", "requests not cancelled, per second of the run"),
    MetricSpec("tokens_per_s", "gauge", "per_s", "token positions received, per second of the run"),
    MetricSpec(
        "session_e2e_ms",
        "trend",
        "ms",
        "agentic sessions: a session's first step's start to its last step's end, per session "
        "that ended (whole or broken)",
    ),
    MetricSpec(
        "session_success_rate",
        "rate",
        "ratio",
        "agentic sessions: sessions whose every step ended ok, over sessions that ended",
    ),
    MetricSpec("sessions", "counter", "count", "agentic sessions that ended (whole or broken)"),
    MetricSpec(
        "session_goodput_per_s",
        "gauge",
        "per_s",
        "agentic sessions whose every step ended ok, per second of the run",
    ),
)

#: Every metric by name, in a stable order (trends, rates, counters).
METRICS: Mapping[str, MetricSpec] = {m.name: m for m in _SPECS}
TREND_METRICS = tuple(m.name for m in _SPECS if m.kind == "trend")
RATE_METRICS = tuple(m.name for m in _SPECS if m.kind == "rate")
COUNTER_METRICS = tuple(m.name for m in _SPECS if m.kind == "counter")
GAUGE_METRICS = tuple(m.name for m in _SPECS if m.kind == "gauge")

#: Goodput bound names as vLLM's ``--goodput`` writes them, and the metric each bounds.
GOODPUT_KEYS: Mapping[str, str] = {
    "ttft": "ttft_ms",
    "tpot": "tpot_ms",
    "e2el": "e2e_ms",
    "ttfo": "ttfo_ms",
}


@dataclass(frozen=True, slots=True)
class GoodputBounds:
    """Per-request bounds, in milliseconds; None where a bound is not set."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None
    ttfo_ms: float | None = None
    """Time to the first answer token (a stream with none fails this bound)."""

    @property
    def any(self) -> bool:
        """Whether any bound is set (goodput is measured only then)."""
        return any(v is not None for v in (self.ttft_ms, self.tpot_ms, self.e2e_ms, self.ttfo_ms))

    def as_dict(self) -> dict[str, float]:
        """The bounds that are set, by metric name (``run.json``'s ``goodput``)."""
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def parse(cls, items: Sequence[str] | str) -> GoodputBounds:
        """Parse vLLM's syntax: ``["ttft:500", "tpot:50", "e2el:2000"]`` (or one string of them,
        space or comma separated); the metric names (``ttft_ms:500``) are accepted too.

        Raises:
            ValueError: an unknown key, a value that is not a positive number, a key twice.
        """
        parts = (
            items.replace(",", " ").split()
            if isinstance(items, str)
            else [p for item in items for p in item.replace(",", " ").split()]
        )
        values: dict[str, float] = {}
        names = {**GOODPUT_KEYS, **{v: v for v in GOODPUT_KEYS.values()}}
        for part in parts:
            key, sep, raw = part.partition(":")
            name = names.get(key.strip())
            if not sep or name is None:
                raise ValueError(
                    f"bad goodput bound {part!r}: expected KEY:MILLISECONDS with KEY one of "
                    f"{', '.join(GOODPUT_KEYS)} (e.g. ttft:500 tpot:50 e2el:2000)"
                )
            try:
                value = float(raw)
            except ValueError:
                value = float("nan")
            if not (value > 0 and math.isfinite(value)):
                raise ValueError(
                    f"bad goodput bound {part!r}: expected a positive number of milliseconds"
                )
            if name in values:
                raise ValueError(f"goodput bound {key!r} given twice")
            values[name] = value
        return cls(**values)

    @classmethod
    def from_run(cls, run: Mapping[str, object]) -> GoodputBounds:
        """The bounds a run recorded in ``run.json`` (none when it recorded none)."""
        raw = run.get("goodput")
        if not isinstance(raw, Mapping):
            return cls()
        fields = {"ttft_ms", "tpot_ms", "e2e_ms", "ttfo_ms"}
        return cls(
            **{k: float(v) for k, v in raw.items() if k in fields and isinstance(v, (int, float))}
        )


#: Columns of streams.csv a threshold selector may filter on (k6 tags style).
SELECTOR_KEYS = ("protocol", "user_class", "outcome", "status", "scenario", "token")
#: ``token:VALUE`` selects gaps, not streams: ``itl_ms{token:answer}`` keeps each stream's gaps
#: after its first answer token (a reasoning model's answer alone).
TOKEN_SELECTOR_VALUES = ("answer",)


def metric_kind(name: str) -> MetricKind | None:
    """``"trend"``, ``"rate"``, ``"counter"``, ``"gauge"``, or None for an unknown metric."""
    spec = METRICS.get(name)
    return None if spec is None else spec.kind
