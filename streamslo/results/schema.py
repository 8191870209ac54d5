"""The shapes of ``run.json`` and ``summary.json``, as types (docs/results.md is the prose).

Every field is optional (``total=False``): a run.json grows as the run goes (``complete`` and
the end come at finalize), older formats lack newer fields, and a hand-made directory may hold
only a few. What the types buy is that a reader or writer spelling a field wrong, or treating a
number as text, is caught by mypy instead of by a user.
"""

from __future__ import annotations

from typing import Any, TypedDict

__all__ = [
    "Dropped",
    "LatencySummary",
    "RunJson",
    "ScenarioFigures",
    "SummaryJson",
    "TopError",
]


class TopError(TypedDict):
    """One error group of ``summary.json``'s ``top_errors`` (streamslo.stream.error_groups)."""

    error: str
    """The group's most frequent exact text."""
    count: int
    """Streams in the group."""
    cause: str | None
    """The group's cause (None where the results predate causes)."""
    texts: int
    """Distinct exact texts in the group."""


class Dropped(TypedDict):
    """Arrivals an arrival-rate scenario could not send (k6's ``dropped_iterations``)."""

    dropped_iterations: int
    dropped_iterations_by_scenario: dict[str, int]


class RunJson(TypedDict, total=False):
    """``DIR/run.json``: what ran, how it ended, and whether it was finalized."""

    # format and lifecycle
    schema_version: int
    complete: bool
    finalized_at: str
    finalized_by: str
    killed: bool
    interrupted: bool
    stop_signal: str | None
    locust_exit_code: int | None
    overran: bool
    aborted: list[dict[str, Any]] | None
    aborted_by_alert: dict[str, Any] | None
    tool_version: str
    locust_version: str
    # when
    start: str
    end: str
    start_epoch: float
    end_epoch: float
    # what was asked
    target: str
    scenario: str | None
    slo: str
    users: int
    spawn_rate: float
    duration_s: float | None
    warmup_s: float
    drain_s: float
    processes: int
    expect_workers: int | None
    protocol: str
    protocol_mix: dict[str, float]
    endpoint: str
    api: str
    max_tokens: int
    stall_timeout: float
    request_timeout: float
    request_rate: float | None
    workload: dict[str, Any]
    scenarios: list[dict[str, Any]] | None
    dropped_iterations: int
    dropped_iterations_by_scenario: dict[str, int]
    goodput: dict[str, float]
    window_s: float
    budget: dict[str, Any] | None
    metrics_url: str | None
    # the target
    server_mode: str | None
    server: dict[str, Any] | None
    # what the preflight learned of the server, and what the run could check
    contract: dict[str, Any] | None
    truth: dict[str, Any] | None
    forced_length: str
    # validity and the generator
    valid: bool
    invalid_reason: str | None
    peak_cpu_percent: float
    generator: dict[str, Any]
    generator_peak_cpu: float
    # distributed runs
    lost_workers: list[dict[str, Any]]
    relay: dict[str, Any]
    # what was written
    write_errors: int
    rows_unwritten: int
    gaps_unwritten: int
    writers: dict[str, Any]
    skipped_rows: int
    windows: dict[str, Any]
    alerts: list[dict[str, Any]] | None
    server_freed: dict[str, Any]
    preflight: list[dict[str, Any]] | None


class LatencySummary(TypedDict):
    """A trend's figures in ``summary.json`` (milliseconds; None without samples)."""

    p50: float | None
    p90: float | None
    p95: float | None
    p99: float | None
    max: float | None
    mean: float | None
    count: int


class ScenarioFigures(TypedDict):
    """One ``[scenarios.NAME]``'s headline figures in ``summary.json``'s ``scenarios``."""

    requests: int
    ok: int
    dropped_iterations: int
    truncation_rate: float | None
    error_rate: float | None
    requests_per_s: float | None
    ttft_ms: LatencySummary
    itl_ms: LatencySummary
    e2e_ms: LatencySummary


class SummaryJson(TypedDict, total=False):
    """``DIR/summary.json``: the headline figures of a finalized run."""

    requests: int
    """Rows of streams.csv: ``counted`` + ``cancelled``."""
    counted: int
    """Requests the load test did not stop itself: the denominator of ``http_5xx_rate``,
    ``error_rate`` and ``requests_per_s``."""
    cancelled: int
    """Requests the load test stopped itself (``cancelled`` and ``client_cancelled``)."""
    began: int
    """Counted requests whose stream began: ``truncation_rate``'s denominator."""
    outcomes: dict[str, int]
    server_hints: list[str]
    """One rule that explains most failures, and the flag the server needs (server_hints.py)."""
    finish_reasons: dict[str, int]
    """Every stop reason the streams ended with, and how many (most frequent first)."""
    unknown_finish_reasons: dict[str, int]
    """The stop reasons among them that no dialect documents (judged by their counts)."""
    truncation_rate: float | None
    http_5xx_rate: float | None
    error_rate: float | None
    ttft_ms: LatencySummary
    itl_ms: LatencySummary
    tpot_ms: LatencySummary
    e2e_ms: LatencySummary
    ttfo_ms: LatencySummary
    ttftc_ms: LatencySummary
    reasoning_tokens: int
    tool_tokens: int
    ttft_sched_ms: LatencySummary
    e2e_sched_ms: LatencySummary
    duration_s: float | None
    requests_per_s: float | None
    tokens_per_s: float | None
    goodput: dict[str, float]
    goodput_per_s: float | None
    goodput_fraction: float | None
    valid: bool
    invalid_reason: str | None
    windows: dict[str, Any]
    budget: dict[str, Any]
    drift: dict[str, dict[str, Any]]
    dropped_iterations: int
    dropped_iterations_by_scenario: dict[str, int]
    scenarios: dict[str, ScenarioFigures]
    schedule_lag_ms: LatencySummary
    client_cancelled: dict[str, Any]
    prefix_cache: dict[str, Any]
    sessions: dict[str, Any]
    session_goodput_per_s: float | None
    server_freed: dict[str, Any]
    top_errors: dict[str, list[TopError]]
    truth: dict[str, Any]
    """What the run could check (run.json's ``truth``), and the ok streams whose ordinary stop
    it could not check (``unchecked_stops``)."""
