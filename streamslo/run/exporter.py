"""``--prometheus-port``: the load generator's own metrics for a Prometheus scrape, so that a
dashboard can watch a soak.

Served by ``streamslo run`` / ``soak`` on ``127.0.0.1:PORT`` from the running totals it reads
(``live.json``) and the last closed window; Locust's processes are not touched. Metrics:

- ``streamslo_gen_streams_total{outcome}``: streams finished, by outcome;
- ``streamslo_gen_ttft_seconds``, ``streamslo_gen_itl_seconds``: histograms (cumulative
  buckets from the run's 1 % histograms);
- ``streamslo_gen_active_streams``, ``streamslo_gen_cpu_percent`` (the busiest process),
  ``streamslo_gen_lag_p99_seconds``, ``streamslo_gen_rss_bytes``: the last closed window;
- ``streamslo_budget_burn_rate{alert,span}``, ``streamslo_alerts_fired_total``: with a budget.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from streamslo.figures.windows import Group, GroupAggregate, counts_of, merge_groups

__all__ = ["BUCKETS_S", "ExporterSnapshot", "GeneratorExporter"]

#: Histogram bucket bounds, seconds.
BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


@dataclass(frozen=True)
class ExporterSnapshot:
    """What the exporter shows; replaced whole by the watch loop."""

    totals: Mapping[Group, GroupAggregate] = field(default_factory=dict)
    last_window: Mapping[str, Any] | None = None
    burns: Mapping[str, tuple[float | None, float | None]] = field(default_factory=dict)
    alerts_fired: int = 0


class _Collector(Collector):
    def __init__(self) -> None:
        self.snapshot = ExporterSnapshot()

    def collect(self) -> Iterator[Any]:
        snap = self.snapshot
        streams = CounterMetricFamily(
            "streamslo_gen_streams", "Streams finished, by outcome", labels=["outcome"]
        )
        counts, _ = counts_of(snap.totals)
        for o, n in counts.items():
            streams.add_metric([o], n)
        yield streams
        total = merge_groups(snap.totals.values())
        for name, key in (("ttft", "ttft_ms"), ("itl", "itl_ms")):
            h = total.trends.get(key)
            fam = HistogramMetricFamily(
                f"streamslo_gen_{name}_seconds",
                f"{name.upper()} of the streams (load generator's view)",
            )
            n = h.count if h is not None else 0
            buckets = [
                (f"{b:g}", h.count_le(b * 1000.0) if h is not None else 0) for b in BUCKETS_S
            ]
            fam.add_metric([], [*buckets, ("+Inf", n)], (h.sum / 1000.0) if h is not None else 0.0)
            yield fam
        last = snap.last_window or {}
        for name, col, scale, doc in (
            (
                "active_streams",
                "active_streams",
                1.0,
                "Streams open, time-averaged over the last window",
            ),
            (
                "cpu_percent",
                "gen_cpu_pct",
                1.0,
                "CPU of the busiest generator process (100 = one core)",
            ),
            ("lag_p99_seconds", "gen_lag_ms_p99", 0.001, "Greenlet lag p99 over the last window"),
            ("rss_bytes", "gen_rss_mb", 2.0**20, "Memory of the generator processes"),
        ):
            v = last.get(col)
            if v is not None:
                yield GaugeMetricFamily(f"streamslo_gen_{name}", doc, value=float(v) * scale)
        if snap.burns:
            burn = GaugeMetricFamily(
                "streamslo_budget_burn_rate", "Error budget burn rate", labels=["alert", "span"]
            )
            for alert, (bl, bs) in snap.burns.items():
                if bl is not None:
                    burn.add_metric([alert, "long"], bl)
                if bs is not None:
                    burn.add_metric([alert, "short"], bs)
            yield burn
            yield CounterMetricFamily(
                "streamslo_alerts_fired", "Burn-rate alerts fired", value=snap.alerts_fired
            )


class GeneratorExporter:
    """An HTTP endpoint on ``127.0.0.1:port`` (a daemon thread) serving the latest snapshot.

    Raises:
        OSError: the port cannot be bound (from :meth:`start`).
    """

    def __init__(self, port: int, host: str = "127.0.0.1") -> None:
        self.port = port
        self.host = host
        self._collector = _Collector()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self._collector)
        self._server: Any = None

    def start(self) -> None:
        from prometheus_client import start_http_server

        self._server, _thread = start_http_server(self.port, addr=self.host, registry=self.registry)

    def update(self, snapshot: ExporterSnapshot) -> None:
        """Replace what is shown (one assignment: a scrape sees the old or the new one)."""
        self._collector.snapshot = snapshot

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
