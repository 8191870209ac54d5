"""deploy/grafana-dashboard.json is a Grafana dashboard over exactly the metrics the
``--prometheus-port`` exporter serves (scraped from a real exporter)."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

from streamslo.run.exporter import ExporterSnapshot, GeneratorExporter
from streamslo.server.bundled import free_port

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana-dashboard.json"


def _served_names() -> set[str]:
    exporter = GeneratorExporter(free_port())
    exporter.start()
    try:
        exporter.update(
            ExporterSnapshot(
                last_window={
                    "active_streams": 3,
                    "gen_cpu_pct": 50.0,
                    "gen_lag_ms_p99": 2.0,
                    "gen_rss_mb": 100.0,
                },
                burns={"fast": (1.0, 2.0)},
                alerts_fired=1,
            )
        )
        with urllib.request.urlopen(f"http://127.0.0.1:{exporter.port}/metrics", timeout=5) as r:
            text = r.read().decode()
    finally:
        exporter.stop()
    names: set[str] = set()
    for name, kind in re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M):
        names |= (
            {f"{name}_bucket", f"{name}_sum", f"{name}_count"} if kind == "histogram" else {name}
        )
    return names


def test_the_dashboard_parses_and_queries_only_exported_metrics() -> None:
    doc = json.loads(DASHBOARD.read_text())
    assert doc["title"] and doc["panels"]
    exprs = [t["expr"] for p in doc["panels"] for t in p["targets"]]
    exprs += [v["definition"] for v in doc["templating"]["list"]]
    used = {m for e in exprs for m in re.findall(r"\bstreamslo_[a-z0-9_]+", e)}
    served = _served_names()
    assert used <= served, f"not exported: {sorted(used - served)}"
    # every exported family has a panel
    families = {re.sub(r"_(total|bucket|sum|count)$", "", n) for n in served}
    shown = {re.sub(r"_(total|bucket|sum|count)$", "", n) for n in used}
    assert families == shown, f"no panel for {sorted(families - shown)}"
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids))
