"""The report model: a tree of frozen dataclasses that every output is rendered from.

``report.json`` is :meth:`Report.to_dict`; ``report.html`` and ``report.md`` show the same
numbers. Latency distributions use the shared nested :class:`~streamslo.figures.metrics.LatencyStats`
(p50/p90/p95/p99/max/mean/count, milliseconds) instead of flat ``p99_ms`` fields. In a
single-run report the ``before`` side of every comparison is None.

::

    Report
    ├── runs: RunInfo ...            what ran, validity (generator saturation), throughput
    ├── warnings / invalid           banners shown up front
    ├── verdicts: VerdictRow ...     every SLO threshold, before / after / delta / verdict
    ├── rates: RateComparison ...    truncation, 5xx and error rates, with a CI on the delta
    ├── throughput: ScalarComparison ...
    ├── latency: LatencyComparison   TTFT, ITL, TPOT, E2E: LatencyStats, Difference per percentile
    ├── outcomes: OutcomeCount ...   by cause, overall and by protocol
    ├── failures: FailureGroup ...   the largest error groups per run and failure outcome
    ├── session_summary: SessionSummary ...  agentic runs: sessions, whole, e2e (near the top)
    ├── server: ServerSummary ...    server-side evidence per run, when present
    ├── bootstrap: BootstrapSettings
    └── glossary: GlossaryEntry ...  every metric shown: id, name, unit, meaning
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from streamslo.figures.metrics import LatencyStats

__all__ = [
    "BootstrapSettings",
    "Difference",
    "ErrorText",
    "FailureGroup",
    "GlossaryEntry",
    "LatencyComparison",
    "OutcomeCount",
    "RateComparison",
    "Report",
    "RunInfo",
    "ScalarComparison",
    "ServerSample",
    "ServerSummary",
    "SessionSummary",
    "TruthBanner",
    "VerdictRow",
]


@dataclass(frozen=True)
class RunInfo:
    """One run: what ran and whether its numbers can be trusted."""

    label: str
    """``before``, ``after`` or ``run``."""
    name: str
    """The bundled server's mode when known, else the directory's name."""
    path: str
    valid: bool
    """False when the load generator was saturated (its latencies measure the client)."""
    invalid_reason: str | None
    scenario: Any
    users: Any
    protocol: Any
    target: Any
    start: Any
    duration_s: float | None
    server_mode: Any
    generator: dict[str, Any]
    """run.json ``generator``'s scalar fields: peak_cpu_percent, cpu_busy_fraction, lag_p99_ms,
    processes."""
    requests: int
    streams_began: int
    tokens: int
    requests_per_s: float | None
    tokens_per_s: float | None


@dataclass(frozen=True)
class Difference:
    """``after - before`` of one statistic, with its bootstrap confidence interval."""

    stat: str
    """``p50``, ``p99``, ``rate``..."""
    before: float | None
    after: float | None
    delta: float | None
    ci_low: float | None
    ci_high: float | None
    resamples: int
    """Stream resamples the interval used (bounded for very large runs)."""
    significant: bool | None
    """True when the interval excludes 0: the change is real at the report's confidence."""
    change: str | None = None
    """``better`` or ``worse`` (a real change, judged by the metric's direction: lower latency
    and fewer failures are better), ``within noise``, or None (nothing to compare)."""


@dataclass(frozen=True)
class LatencyComparison:
    """One latency metric (ms) before and after."""

    metric: str
    before: LatencyStats | None
    after: LatencyStats
    differences: tuple[Difference, ...] = ()
    """One per percentile; empty in a single-run report."""


@dataclass(frozen=True)
class RateComparison:
    """A rate metric (docs/outcomes.md) before and after, with numerators and denominators."""

    metric: str
    before: float | None
    after: float | None
    before_counts: tuple[int, int] | None
    after_counts: tuple[int, int]
    difference: Difference | None


@dataclass(frozen=True)
class ScalarComparison:
    """A plain number (tokens/s, requests/s) before and after."""

    metric: str
    before: float | None
    after: float | None
    delta: float | None


@dataclass(frozen=True)
class OutcomeCount:
    """How many requests ended with one outcome, overall (``protocol="all"``) or per protocol."""

    outcome: str
    protocol: str
    before: int | None
    after: int


@dataclass(frozen=True)
class ErrorText:
    """One error group (streamslo.stream.error_groups): its most frequent exact text and how
    many streams ended in it."""

    error: str
    count: int
    cause: str = ""
    """The group's cause (empty where the results predate causes)."""
    texts: int = 1
    """Distinct exact texts in the group (those that differ only in their numbers)."""


@dataclass(frozen=True)
class FailureGroup:
    """The largest error groups of one run's failure outcome."""

    label: str
    """The run's label (``before``, ``after``, ``run``)."""
    name: str
    outcome: str
    count: int
    """Streams of the run that ended with ``outcome``."""
    errors: tuple[ErrorText, ...]
    """Most frequent first."""
    other: int
    """Streams of the outcome whose text is not among ``errors``."""
    source: str
    """Where they were counted: ``streams.csv``."""


@dataclass(frozen=True)
class SessionSummary:
    """One run's agentic sessions judged whole (``summary.json``'s ``sessions``)."""

    label: str
    name: str
    sessions: int
    """Sessions that ended, whole or broken (one the run stopped between its steps is in
    neither)."""
    whole: int
    """Sessions every step of which ended ``ok``."""
    success_rate: float | None
    """``whole`` / ``sessions`` (``session_success_rate``)."""
    e2e_p50_ms: float | None
    e2e_p99_ms: float | None
    e2e_max_ms: float | None
    """``session_e2e_ms``: a session's first step's start to its last step's end."""
    steps_mean: float | None
    """Steps sent per session."""
    steps_not_sent: int
    """Later steps of broken sessions that were never sent (``--on-broken-step abort``)."""
    max_depth: int | None
    tool_share: float | None
    """Tool (or think) time's share of the sessions' time."""


@dataclass(frozen=True)
class GlossaryEntry:
    """One metric the report shows, explained (from the metric registry)."""

    metric: str
    name: str
    unit: str
    meaning: str


@dataclass(frozen=True)
class VerdictRow:
    """One SLO threshold checked on both runs."""

    metric: str
    expression: str
    before: float | None
    after: float | None
    delta: float | None
    before_passed: bool | None
    after_passed: bool
    verdict: str
    """``fixed``, ``pass``, ``regressed``, ``fail`` (single run: ``pass`` / ``fail``)."""
    message: str
    """The after run's message from the thresholds engine."""


@dataclass(frozen=True)
class ServerSample:
    """One of the server's own series over the run (:mod:`streamslo.reports.server_series`):
    a counter's increase over the run or a gauge's peak, with its first, last, lowest and
    highest scraped values."""

    sample: str
    """``name{labels}`` as scraped."""
    kind: str
    """``increase`` (counters: the rises between the run's scrapes, resets counted; never the
    lifetime total) or ``peak`` (gauges: the largest scraped value)."""
    value: float
    title: str = ""
    """What it shows, for the series that matter for streaming (``vLLM running requests``);
    empty for the others."""
    first: float | None = None
    last: float | None = None
    low: float | None = None
    high: float | None = None
    per_s: float | None = None
    """Counters: the increase per second of the scrapes' span (CPU seconds per second: cores)."""


@dataclass(frozen=True)
class ServerSummary:
    """Server-side evidence of one run (empty when the target exposed none)."""

    label: str
    present: bool
    samples: tuple[ServerSample, ...] = ()
    stall_causes: dict[str, float] = field(default_factory=dict)
    """Event-loop stalls by cause (watchdog), counts."""
    worker_restarts: dict[str, float] = field(default_factory=dict)
    """Gunicorn worker exits/aborts during the run."""
    peak_write_backlog_bytes: float | None = None
    longest_stalls: tuple[tuple[float, str, str], ...] = ()
    """The longest recent watchdog stalls: (ms, cause, innermost frame)."""
    facts: tuple[tuple[str, str], ...] = ()
    """Scalar fields of stalls.json / workers.json, as (key, value) text."""
    notes: tuple[str, ...] = ()
    more_moved: int = 0
    """Other series that moved beyond those listed in ``samples`` (all are in the run's
    ``server/metrics.jsonl``)."""


@dataclass(frozen=True)
class BootstrapSettings:
    """How the confidence intervals were computed."""

    unit: str
    """What one draw resamples: whole streams."""
    resamples: int
    """Requested resamples (large runs may use fewer; each Difference says how many)."""
    confidence: float
    seed: int


@dataclass(frozen=True)
class TruthBanner:
    """What one run could check, in one sentence."""

    text: str
    sees_all: bool
    """It could check all three (shown plain; otherwise as a warning)."""


@dataclass(frozen=True)
class Report:
    """Everything the report says; rendered to HTML, Markdown and JSON."""

    mode: str
    """``single`` or ``compare``."""
    generated_at: str
    tool_version: str
    slo_source: str
    runs: tuple[RunInfo, ...]
    warnings: tuple[str, ...]
    """Ways the runs differ (shown as a banner)."""
    invalid: tuple[str, ...]
    """One line per run whose figures cannot be taken as they are: not finalized, killed,
    damaged rows, write errors, or invalid (shown as banners, first)."""
    verdicts: tuple[VerdictRow, ...]
    passed: bool
    """Whether the after run (the only run, alone) met every threshold."""
    rates: tuple[RateComparison, ...]
    throughput: tuple[ScalarComparison, ...]
    latency: tuple[LatencyComparison, ...]
    outcomes: tuple[OutcomeCount, ...]
    server: tuple[ServerSummary, ...]
    bootstrap: BootstrapSettings
    failures: tuple[FailureGroup, ...] = ()
    """Top error texts per run and failure outcome (empty when every request ended ok)."""
    truth: tuple[TruthBanner, ...] = ()
    """One per run: what it could check (a cut stream, a silent stop, a lost chunk) and what
    it could not (shown as a banner, after the validity banners)."""
    glossary: tuple[GlossaryEntry, ...] = ()
    """Every metric the report shows."""
    session_summary: tuple[SessionSummary, ...] = ()
    """One per run that ran agentic sessions (shown near the top)."""

    @property
    def after(self) -> RunInfo:
        """The after run (the only run of a single-run report)."""
        return self.runs[-1]

    @property
    def before(self) -> RunInfo | None:
        """The before run, or None in a single-run report."""
        return self.runs[0] if len(self.runs) > 1 else None

    def to_dict(self) -> dict[str, object]:
        """Plain JSON-ready data (tuples become lists)."""
        return dataclasses.asdict(self)
