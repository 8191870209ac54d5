"""Server-side evidence collected during a run: the target's Prometheus metrics and, for the
bundled server, its processes over time.

- ``server/metrics.jsonl``: ``/metrics`` at the start, every two seconds and at the end, one
  JSON line a scrape (:meth:`ServerEvidence.scrape_once`), parsed by ``prometheus_client``. The bundled
  server's are found by themselves (``/healthz`` says it is the bundled server); any other
  server's when ``--metrics-url`` names them (vLLM's ``/metrics``, say).
- ``server/resources.jsonl``: the server's processes, one line a scrape: ``rss_bytes``,
  ``open_files``, ``threads``, ``processes`` (psutil on the PIDs of the bundled server's
  ``/debug/workers``, when it runs on this machine: the Gunicorn master and every worker), and
  ``worker_restarts``. For another server, the ``process_resident_memory_bytes`` and
  ``process_open_fds`` of its metrics, when it exports them.
- At the end, the bundled server's ``/debug/stalls`` and ``/debug/workers``.

Paths come from :class:`streamslo.results.layout.Layout`. A scrape that cannot be written (a full disk)
is skipped; the thread goes on. :mod:`streamslo.figures.drift` turns the series into leak verdicts.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import math
import ssl
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from streamslo.results.layout import Layout
from streamslo.results.writer import append_lines
from streamslo.transport.common import make_ssl_context

__all__ = [
    "ServerEvidence",
    "json_value",
    "parse_prometheus",
    "parse_prometheus_typed",
    "process_resources",
    "sample_key",
]

_BUNDLED = "streamslo-target"

log = logging.getLogger(__name__)


def _label_value(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def sample_key(name: str, labels: dict[str, str]) -> str:
    """``name{k="v",...}`` with the labels sorted and escaped as in the text format: one key
    per series, the same whatever order the server wrote the labels in."""
    if not labels:
        return name
    inner = ",".join(f'{k}="{_label_value(v)}"' for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}}"


def _families(text: str) -> Iterator[Any]:
    """``prometheus_client``'s parser over the whole text; when one line breaks it (a server
    that writes the format loosely), over each line alone, the broken lines skipped."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        yield from list(text_string_to_metric_families(text))
        return
    except (ValueError, IndexError, TypeError):
        pass
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        try:
            yield from list(text_string_to_metric_families(line + "\n"))
        except (ValueError, IndexError, TypeError):
            continue


def parse_prometheus_typed(text: str) -> tuple[dict[str, float], dict[str, str]]:
    """Prometheus text format -> ``({"name{labels}": value}, {sample name: family type})``.

    Parsed by ``prometheus_client``'s parser: a sample's own timestamp is not taken for its
    value, label values may hold spaces, quotes and braces, and ``NaN``, ``+Inf`` and ``-Inf``
    are floats. Types are the families' ``# TYPE`` (``counter``, ``gauge``, ``histogram``,
    ``summary``; ``unknown`` without one), keyed by the sample's name (``x_bucket`` ->
    ``histogram``). The parser names a counter's samples ``*_total`` even where the server
    wrote the bare name.
    """
    values: dict[str, float] = {}
    types: dict[str, str] = {}
    for family in _families(text):
        typ = "unknown" if family.type == "untyped" else str(family.type)
        for sample in family.samples:
            values[sample_key(sample.name, dict(sample.labels))] = float(sample.value)
            types.setdefault(sample.name, typ)
    return values, types


def parse_prometheus(text: str) -> dict[str, float]:
    """Prometheus text format -> ``{"name{labels}": value}`` (:func:`parse_prometheus_typed`)."""
    return parse_prometheus_typed(text)[0]


def json_value(v: float) -> float | str:
    """A sample's value as strict JSON takes it: NaN and the infinities as the text format
    writes them (``"NaN"``, ``"+Inf"``, ``"-Inf"``), every other value as a number."""
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return v


def process_resources(pids: list[int]) -> dict[str, float] | None:
    """RSS, open files and threads summed over ``pids`` and their children (psutil); None when
    none of them exists here."""
    import psutil

    seen: dict[int, Any] = {}
    for pid in pids:
        try:
            p = psutil.Process(pid)
            seen[p.pid] = p
            for c in p.children(recursive=True):
                seen[c.pid] = c
        except psutil.Error:
            continue
    if not seen:
        return None
    rss = files = threads = 0.0
    alive = 0
    for p in seen.values():
        try:
            with p.oneshot():
                rss += p.memory_info().rss
                threads += p.num_threads()
                files += p.num_fds()
            alive += 1
        except psutil.Error:
            continue
    if not alive:
        return None
    return {"rss_bytes": rss, "open_files": files, "threads": threads, "processes": float(alive)}


def _is_local(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class ServerEvidence:
    """Scrapes the target while a run goes on (see the module's docstring).

    Args:
        host: the target's base URL.
        out: the results directory.
        insecure: https without certificate verification.
        interval: seconds between scrapes.
        metrics_url: the target's Prometheus metrics (default: the bundled server's
            ``/metrics``; for another server, none).
    """

    def __init__(
        self,
        host: str,
        out: Path,
        insecure: bool = False,
        interval: float = 2.0,
        metrics_url: str | None = None,
    ) -> None:
        self.base = host.rstrip("/")
        self.layout = Layout(Path(out))
        self.dir = self.layout.server_dir
        self.interval = interval
        self.metrics_url = metrics_url
        self.bundled = False
        self._ctx: ssl.SSLContext | None = make_ssl_context(insecure=True) if insecure else None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = time.time()
        self._failed = 0
        self._types: dict[str, str] = {}

    def _get(self, url: str, timeout: float = 3.0) -> bytes | None:
        try:
            with urllib.request.urlopen(url, timeout=timeout, context=self._ctx) as r:
                return bytes(r.read(8 << 20))
        except (OSError, ValueError):
            return None

    def probe(self) -> dict[str, object] | None:
        """``/healthz`` of the bundled server, or None for any other server."""
        raw = self._get(self.base + "/healthz")
        try:
            data = json.loads(raw) if raw else None
        except ValueError:
            return None
        if isinstance(data, dict) and data.get("server") == _BUNDLED:
            self.bundled = True
            if self.metrics_url is None:
                self.metrics_url = self.base + "/metrics"
            return data
        return None

    def start(self) -> None:
        """Start scraping (nothing to do for a server that is not the bundled one, without
        ``metrics_url``)."""
        if not (self.bundled or self.metrics_url):
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        self._t0 = time.time()
        self._thread = threading.Thread(target=self._loop, name="streamslo-evidence", daemon=True)
        self._thread.start()

    def _append(self, path: Path, obj: dict[str, Any]) -> None:
        try:
            if not path.exists():
                path.parent.mkdir(parents=True, exist_ok=True)
                path.touch()
            # Whole lines only: a full disk or a kill never leaves half a scrape.
            append_lines(path, (json.dumps(obj, allow_nan=False) + "\n").encode())
        except (OSError, ValueError) as exc:
            self._failed += 1
            if self._failed == 1:
                log.warning(
                    "streamslo: cannot write %s (%s); skipping scrapes until it can", path, exc
                )

    def _loop(self) -> None:
        # A scrape at once: the baseline every counter's increase over the run is taken from
        # (a server that ran before the run has lifetime totals in its counters).
        self.scrape_once()
        while not self._stop.wait(self.interval):
            self.scrape_once()

    def scrape_once(self) -> None:
        """One scrape of the metrics and, for the bundled server, of its processes.

        A line of ``metrics.jsonl``: ``t`` (seconds since :meth:`start`), ``epoch``,
        ``metrics`` (``{"name{labels}": value}``, NaN and infinities as the strings
        ``"NaN"``, ``"+Inf"``, ``"-Inf"``: strict JSON) and, when a sample name is seen for the
        first time, ``types`` (``{sample name: "counter" | "gauge" | ...}``).
        """
        now = time.time()
        t = round(now - self._t0, 3)
        metrics: dict[str, float] = {}
        if self.metrics_url:
            raw = self._get(self.metrics_url)
            if raw is not None:
                metrics, types = parse_prometheus_typed(raw.decode("utf-8", "replace"))
                line: dict[str, Any] = {
                    "t": t,
                    "epoch": round(now, 3),
                    "metrics": {k: json_value(v) for k, v in metrics.items()},
                }
                new = {k: v for k, v in types.items() if self._types.get(k) != v}
                if new:
                    line["types"] = new
                    self._types.update(new)
                self._append(self.layout.server_metrics, line)
        res: dict[str, Any] | None = None
        if self.bundled:
            res = self._bundled_resources()
        elif math.isfinite(metrics.get("process_resident_memory_bytes", math.nan)):
            res = {"rss_bytes": metrics["process_resident_memory_bytes"]}
            if math.isfinite(metrics.get("process_open_fds", math.nan)):
                res["open_files"] = metrics["process_open_fds"]
        if res:
            self._append(self.layout.server_resources, {"t": t, "epoch": round(now, 3), **res})

    def _bundled_resources(self) -> dict[str, Any] | None:
        raw = self._get(self.base + "/debug/workers")
        try:
            info = json.loads(raw) if raw else None
        except ValueError:
            info = None
        if not isinstance(info, dict):
            return None
        out: dict[str, Any] = {}
        if isinstance(info.get("worker_restarts_total"), int):
            out["worker_restarts"] = info["worker_restarts_total"]
        if _is_local(self.base):
            pid, ppid = info.get("pid"), info.get("ppid")
            # Under Gunicorn the master (the worker's parent) holds every worker; under uvicorn
            # the server is the process itself.
            root = ppid if info.get("server") == "gunicorn" else pid
            if isinstance(root, int):
                found = process_resources([root])
                if found:
                    out.update(found)
        return out or None

    def stop(self) -> None:
        """Stop scraping; save the bundled server's ``/debug/stalls`` and ``/debug/workers``."""
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join(timeout=10)
        # The last scrape: counters' increases run to the end of the drain.
        self.scrape_once()
        if not self.bundled:
            return
        for path, dest in (
            ("/debug/stalls", self.layout.server_stalls),
            ("/debug/workers", self.layout.server_workers),
        ):
            raw = self._get(self.base + path)
            if raw:
                try:
                    dest.write_bytes(raw)
                except OSError as exc:
                    log.warning("streamslo: cannot write %s (%s)", dest, exc)
