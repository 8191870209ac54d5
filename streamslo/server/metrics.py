"""Prometheus metrics of one server process (``/metrics``).

Each Gunicorn worker keeps its own registry; the compare job runs one worker, so a scrape sees
the whole server. Worker restarts are counted by the Gunicorn master into a state file
(:mod:`streamslo.server.workerstate`) and read back at scrape time by :class:`RestartCollector`.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import REGISTRY, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from streamslo.server import workerstate

__all__ = [
    "ACTIVE_STREAMS",
    "CONNECTIONS_REFUSED",
    "ENGINE_BATCH",
    "ENGINE_STEP",
    "HTTP_5XX",
    "LOOP_LAG",
    "LOOP_STALLS",
    "OUTCOMES",
    "PREFIX_CACHE_HITS",
    "PREFIX_CACHE_QUERIES",
    "REQUESTS",
    "REQUESTS_RUNNING",
    "REQUEST_LATENCY",
    "TOKENS",
    "WRITE_BACKLOG",
    "RestartCollector",
    "install_restart_collector",
]

_LAT = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)

ACTIVE_STREAMS = Gauge("streamslo_active_streams", "Streams being written now", ["transport"])
REQUESTS_RUNNING = Gauge(
    "streamslo_requests_running",
    "Streams admitted and not yet released (vLLM's num_requests_running): a stream whose client "
    "left must leave this gauge",
)
PREFIX_CACHE_QUERIES = Counter(
    "streamslo_prefix_cache_queries", "Prompt tokens looked up in the prefix cache"
)
PREFIX_CACHE_HITS = Counter(
    "streamslo_prefix_cache_hits", "Prompt tokens served from the prefix cache"
)
TOKENS = Counter("streamslo_tokens", "Content tokens written to clients")
OUTCOMES = Counter("streamslo_stream_outcomes", "How streams ended (server's view)", ["outcome"])
REQUESTS = Counter("streamslo_requests", "Requests by endpoint and status", ["endpoint", "status"])
CONNECTIONS_REFUSED = Counter(
    "streamslo_connections_refused",
    "Connections refused before the app saw a request, by reason "
    "(over_capacity, head_timeout, bad_http)",
    ["reason"],
)
HTTP_5XX = Counter("streamslo_http_5xx", "5xx responses by endpoint", ["endpoint"])
REQUEST_LATENCY = Histogram(
    "streamslo_request_seconds", "Request start to last byte", ["endpoint"], buckets=_LAT
)
LOOP_LAG = Histogram(
    "streamslo_event_loop_lag_seconds",
    "Heartbeat lateness of the event loop",
    buckets=(0.001, 0.005, 0.01, 0.02, 0.04, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
LOOP_STALLS = Counter("streamslo_loop_stalls", "Event-loop stalls (> 40 ms) by cause", ["cause"])
WRITE_BACKLOG = Gauge(
    "streamslo_write_backlog_bytes",
    "Bytes generated but not yet accepted by the transport (buffers plus blocked writes)",
)
ENGINE_STEP = Histogram(
    "streamslo_engine_step_seconds",
    "Compute time of one decode step",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28),
)
ENGINE_BATCH = Histogram(
    "streamslo_engine_batch_size",
    "Streams decoded per step",
    buckets=(0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
)


class RestartCollector(Collector):
    """Exposes ``streamslo_worker_restarts_total`` from the Gunicorn state file."""

    def __init__(self, path: str | None) -> None:
        self.path = path

    def collect(self) -> Iterator[CounterMetricFamily]:
        state = workerstate.read(self.path)
        yield CounterMetricFamily(
            "streamslo_worker_restarts",
            "Gunicorn workers that died mid-service (timeout kill, crash)",
            value=state.get("restarts", 0),
        )
        yield CounterMetricFamily(
            "streamslo_worker_aborts",
            "Gunicorn workers killed by the master's --timeout (SIGABRT)",
            value=state.get("aborts", 0),
        )


_installed: list[RestartCollector] = []


def install_restart_collector(path: str | None) -> None:
    """Register (once per process) the restart collector for ``path``."""
    if _installed:
        _installed[0].path = path
        return
    col = RestartCollector(path)
    REGISTRY.register(col)
    _installed.append(col)
