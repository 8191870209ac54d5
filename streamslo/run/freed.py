"""Did the server free the streams its clients hung up on? (``--cancel-rate``, ``docs/workloads.md``)

A server that keeps generating for a closed client (or never gives its slot back) leaks
capacity until it falls over. After a run with client cancellations, streamslo reads the
server's in-flight gauge from its Prometheus metrics (``--metrics-url``; the bundled server's
are found by themselves) until it is back at its value before the load, within a bound
(``--cancel-check``). The verdict (``run.json`` ``server_freed``) says whether it came back,
and ``streamslo run`` exits 99 when it did not.

Gauges read, the first one the server exports: :data:`IN_FLIGHT_GAUGES` (vLLM's
``vllm:num_requests_running``, the bundled server's ``streamslo_requests_running``, SGLang's and
TGI's), summed over their label sets.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable
from typing import Any

from streamslo.run.evidence import parse_prometheus

__all__ = ["IN_FLIGHT_GAUGES", "FreedCheck", "check_freed", "in_flight"]

#: In-flight request gauges, in the order they are looked for.
IN_FLIGHT_GAUGES = (
    "streamslo_requests_running",
    "vllm:num_requests_running",
    "sglang:num_running_reqs",
    "tgi_batch_current_size",
)


def in_flight(metrics: dict[str, float]) -> tuple[str, float] | None:
    """(gauge, value) of the first in-flight gauge in a scrape (summed over label sets)."""
    for name in IN_FLIGHT_GAUGES:
        values = [v for k, v in metrics.items() if k == name or k.startswith(name + "{")]
        if values:
            return name, float(sum(values))
    return None


def _scrape(url: str, timeout: float = 3.0) -> dict[str, float] | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return parse_prometheus(bytes(r.read(8 << 20)).decode("utf-8", "replace"))
    except (OSError, ValueError):
        return None


class FreedCheck:
    """The in-flight gauge before the load and after it.

    Args:
        url: the server's Prometheus metrics.
        scrape: reads ``url`` into ``{"name{labels}": value}`` (None when it cannot).
    """

    def __init__(
        self, url: str, scrape: Callable[[str], dict[str, float] | None] = _scrape
    ) -> None:
        self.url = url
        self._scrape = scrape
        self.baseline: tuple[str, float] | None = None

    def read(self) -> tuple[str, float] | None:
        m = self._scrape(self.url)
        return None if m is None else in_flight(m)

    def before(self) -> None:
        """Read the baseline (before any load)."""
        self.baseline = self.read()

    def after(self, bound_s: float, poll_s: float = 0.25) -> dict[str, object]:
        """Poll until the gauge is back at its baseline or ``bound_s`` passed: the verdict."""
        return check_freed(self, bound_s, poll_s)


def check_freed(check: FreedCheck, bound_s: float, poll_s: float = 0.25) -> dict[str, object]:
    """``run.json``'s ``server_freed``: ``passed`` (True, False, or None when the server
    exports no in-flight gauge), the gauge, its baseline, its last value, and how long it took."""
    base = check.baseline
    if base is None:
        return {
            "passed": None,
            "reason": f"no in-flight gauge at {check.url} "
            f"(looked for {', '.join(IN_FLIGHT_GAUGES)})",
            "metrics_url": check.url,
        }
    gauge, baseline = base
    t0 = time.monotonic()
    last: float | None = None
    while True:
        got = check.read()
        if got is not None:
            last = got[1]
            if last <= baseline:
                break
        if time.monotonic() - t0 >= bound_s:
            break
        time.sleep(poll_s)
    waited = round(time.monotonic() - t0, 3)
    passed = last is not None and last <= baseline
    out: dict[str, Any] = {
        "passed": passed,
        "gauge": gauge,
        "baseline": baseline,
        "last": last,
        "waited_s": waited,
        "bound_s": bound_s,
        "metrics_url": check.url,
    }
    if not passed:
        out["reason"] = (
            f"{gauge} stayed at {last:g} (baseline {baseline:g}) {bound_s:g} s after the run: "
            "the server did not free the streams its clients hung up on"
            if last is not None
            else f"{check.url} could not be read after the run"
        )
    return out
