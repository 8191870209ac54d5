"""Server-side evidence from the bundled target server, collected during a run.

When ``/healthz`` says the target is the bundled server, a thread scrapes ``/metrics`` every
two seconds into ``server/metrics.jsonl`` and, at the end, saves ``/debug/stalls`` and
``/debug/workers`` (paths from :class:`streamslo.results.Layout`). Against any other server it
does nothing. A scrape that cannot be written (a full disk) is skipped; the thread goes on.
"""

from __future__ import annotations

import json
import logging
import ssl
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from streamslo.results import Layout
from streamslo.results_writer import append_lines

__all__ = ["ServerEvidence", "parse_prometheus"]

_BUNDLED = "streamslo-target"

log = logging.getLogger("streamslo.evidence")


def parse_prometheus(text: str) -> dict[str, float]:
    """Prometheus text format -> ``{"name{labels}": value}`` (comments skipped)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, rest = line.rpartition(" ")
        if not name:
            continue
        try:
            out[name.strip()] = float(rest)
        except ValueError:
            continue
    return out


class ServerEvidence:
    """Scrapes the bundled server while a run goes on."""

    def __init__(self, host: str, out: Path, insecure: bool = False, interval: float = 2.0) -> None:
        self.base = host.rstrip("/")
        self.layout = Layout(Path(out))
        self.dir = self.layout.server_dir
        self.interval = interval
        self.bundled = False
        self._ctx: ssl.SSLContext | None = None
        if insecure:
            self._ctx = ssl.create_default_context()
            self._ctx.check_hostname = False
            self._ctx.verify_mode = ssl.CERT_NONE
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = time.time()

    def _get(self, path: str, timeout: float = 3.0) -> bytes | None:
        try:
            with urllib.request.urlopen(self.base + path, timeout=timeout, context=self._ctx) as r:
                return bytes(r.read(8 << 20))
        except (OSError, ValueError):
            return None

    def probe(self) -> dict[str, Any] | None:
        """``/healthz`` of the bundled server, or None for any other server."""
        raw = self._get("/healthz")
        try:
            data = json.loads(raw) if raw else None
        except ValueError:
            return None
        if isinstance(data, dict) and data.get("server") == _BUNDLED:
            self.bundled = True
            return data
        return None

    def start(self) -> None:
        if not self.bundled:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        self._t0 = time.time()
        self._thread = threading.Thread(target=self._loop, name="streamslo-evidence", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        failed = 0
        while not self._stop.wait(self.interval):
            raw = self._get("/metrics")
            if raw is None:
                continue
            line = {"t": round(time.time() - self._t0, 3), "metrics": parse_prometheus(raw.decode("utf-8", "replace"))}
            try:
                path = self.layout.server_metrics
                if not path.exists():
                    path.touch()
                # Whole lines only: a full disk or a kill never leaves half a scrape.
                append_lines(path, (json.dumps(line) + "\n").encode())
            except OSError as exc:
                failed += 1
                if failed == 1:
                    log.warning("streamslo: cannot write %s (%s); skipping scrapes until it can",
                                self.layout.server_metrics, exc)

    def stop(self) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join(timeout=10)
        for path, dest in (("/debug/stalls", self.layout.server_stalls), ("/debug/workers", self.layout.server_workers)):
            raw = self._get(path)
            if raw:
                try:
                    dest.write_bytes(raw)
                except OSError as exc:
                    log.warning("streamslo: cannot write %s (%s)", dest, exc)
