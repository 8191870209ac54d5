"""The web UI's "Stream SLOs" tab: the run's active SLO checked on the running totals, and
whether the run is valid so far.

The active SLO is the one the run is judged by: ``--slo FILE`` (an SLO file, or the scenario
whose thresholds ``streamslo run`` uses), else the incidents' default. Its thresholds are
checked on the merged window totals (:func:`streamslo.slo.live_eval.evaluate_live`: rates exact,
percentiles within 1 %), never on the whole results; then come the last closed window's
figures and the outcome counts. A master shows every worker's streams.

Validity (docs/results.md, ``valid``) is judged live by the rule the finished run is judged by
(:func:`streamslo.runfiles.finalize.judge_generators`), on the generator monitors' figures so
far: this process's, and on a master every worker's. An invalid run says so in the tab's first
row, in a banner above the web UI (:data:`BANNER_HTML`), and after Locust's end-of-run tables.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from streamslo.errors import BadInputError
from streamslo.figures.windows import counts_of
from streamslo.loadgen.live_windows import live_book
from streamslo.loadgen.recorder import get_recorder
from streamslo.slo.live_eval import evaluate_live, threshold_label, totals_to_wire
from streamslo.slo.thresholds import DEFAULT_SLO, SLO
from streamslo.stream.outcome import OUTCOMES

if TYPE_CHECKING:
    from collections.abc import Mapping

    from streamslo.figures.windows import Group, GroupAggregate

if TYPE_CHECKING:
    from locust.env import Environment

__all__ = [
    "BANNER_HTML",
    "TAB_STRUCTURE",
    "Validity",
    "active_slo",
    "invalid_line",
    "live_payload",
    "live_rows",
    "live_validity",
    "slo_rows",
    "tab_rows",
    "validity_row",
]

log = logging.getLogger(__name__)


@lru_cache(maxsize=8)
def _load(path: str) -> SLO:
    from streamslo.slo.budget import read_slo_file

    try:
        slo, _ = read_slo_file(path)
    except BadInputError as exc:
        log.error("streamslo: the web UI checks the default SLO: %s", exc)
        return DEFAULT_SLO
    return slo or DEFAULT_SLO


def active_slo(environment: Environment) -> SLO:
    """The SLO this run is judged by (``--slo``, else the default)."""
    path = get_recorder(environment).opts.slo_source
    return _load(path) if path else DEFAULT_SLO


def _fmt(metric_key: str, v: float | None) -> str:
    if v is None:
        return "no data"
    if metric_key.split("{")[0].endswith("_rate"):
        return f"{v * 100:.3f} %"
    if metric_key.split("{")[0].endswith("_ms"):
        return f"{v:.1f} ms"
    return f"{v:g}"


def slo_rows(
    slo: SLO, totals: Mapping[Group, GroupAggregate], elapsed_s: float
) -> list[dict[str, str]]:
    """One row per threshold: name, value, SLO expression, PASS / FAIL / no data / checked
    at the end (a metric the totals cannot give); the failing ones first, each group in the
    SLO's order (a person reads the first screen)."""
    rows = []
    for th in slo.thresholds:
        res = evaluate_live(th, totals, elapsed_s)
        if res is None:
            rows.append(
                {
                    "name": threshold_label(th),
                    "value": "—",
                    "slo": th.expression,
                    "status": "checked at the end",
                }
            )
            continue
        status = "no data" if res.observed is None else ("PASS" if res.passed else "FAIL")
        rows.append(
            {
                "name": threshold_label(th),
                "value": _fmt(th.metric_key, res.observed),
                "slo": th.expression,
                "status": status,
            }
        )
    rows.sort(key=lambda row: row["status"] != "FAIL")  # stable: the SLO's order within each
    return rows


@dataclass(frozen=True)
class Validity:
    """Whether the run's load generator measured the server so far."""

    valid: bool
    reason: str | None
    """Why not (every process that broke the rule), or None."""
    processes: int
    """Generator processes judged (0: none has figures yet)."""


def live_validity(environment: Environment) -> Validity:
    """The run so far judged by the validity rule: this process's generator figures and, on a
    master, every worker's (valid while no process has figures)."""
    from streamslo.runfiles.finalize import judge_generators

    rec = get_recorder(environment)
    procs: list[dict[str, object]] = []
    if rec.monitor is not None:
        procs.append(rec.monitor.figures())
    if rec.receiver is not None:
        procs += [
            {**st.figures, "worker": cid}
            for cid, st in rec.receiver.workers.items()
            if st.figures is not None
        ]
    judged = judge_generators(procs)
    reason = judged["invalid_reason"]
    return Validity(bool(judged["valid"]), None if reason is None else str(reason), len(procs))


#: The rule, as the tab shows it.
_RULE = (
    "each generator process above 90 % of a core for at most 10 % of the run, greenlet lag "
    "p99 ≤ 20 ms"
)


def invalid_line(v: Validity, so_far: bool = True) -> str:
    """What a person reads of an invalid run (empty for a valid one)."""
    if v.valid:
        return ""
    return (
        f"INVALID RUN{' so far' if so_far else ''}: {v.reason}: its latencies measure the load "
        "generator, not the server (fewer users, or more processes)"
    )


def validity_row(v: Validity) -> dict[str, str]:
    """The tab's row for the run's validity."""
    if v.processes == 0:
        value, status = "not judged yet", ""
    elif v.valid:
        value, status = "valid so far", "PASS"
    else:
        value, status = f"INVALID so far: {v.reason}", "FAIL"
    return {"name": "run validity (load generator)", "value": value, "slo": _RULE, "status": status}


def live_rows(environment: Environment, validity: Validity | None = None) -> list[dict[str, str]]:
    """Rows for the web UI's Stream SLOs tab: the run's validity first (``validity``, else
    judged now), then the thresholds (failing ones first), the last window and the outcome
    counts."""
    import time

    book = live_book(environment)
    totals = book.totals if book is not None else {}
    rec = get_recorder(environment)
    rows = [validity_row(validity or live_validity(environment))]
    rows += slo_rows(active_slo(environment), totals, max(0.0, time.time() - rec.run_start))
    last = book.last_row if book is not None else None
    if last is not None:
        for col in ("itl_ms_p99", "ttft_ms_p95", "active_streams", "gen_cpu_pct"):
            v = last[col]
            rows.append(
                {
                    "name": f"last window: {col}",
                    "value": "—" if v is None else f"{v:g}",
                    "slo": "",
                    "status": "",
                }
            )
    counts, _ = counts_of(totals)
    rows += [
        {"name": f"outcome: {o}", "value": str(counts.get(o, 0)), "slo": "", "status": ""}
        for o in OUTCOMES
    ]
    return rows


#: The tab's columns. Locust's web UI sorts a table by its rows' ``name`` unless a column head
#: is clicked: the metric is shown from ``metric``, and ``name`` holds the rows' own order.
TAB_STRUCTURE = [
    {"key": "metric", "title": "Metric"},
    {"key": "value", "title": "Value"},
    {"key": "slo", "title": "SLO"},
    {"key": "status", "title": "Status"},
]


def tab_rows(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    """:func:`live_rows` as the web UI's tab shows them, in their order (failing thresholds
    first): each row's ``name`` is its place (``"000"``, ``"001"``...), the metric in ``metric``."""
    return [{**row, "metric": row["name"], "name": f"{i:03d}"} for i, row in enumerate(rows)]


def live_payload(environment: Environment) -> dict[str, object]:
    """``/streamslo/live``: the rows, the last window and the raw totals."""
    book = live_book(environment)
    v = live_validity(environment)
    return {
        "validity": {"valid": v.valid, "reason": v.reason, "line": invalid_line(v)},
        "rows": live_rows(environment, v),
        "last_window": book.last_row.values if book is not None and book.last_row else None,
        "totals": totals_to_wire(book.totals) if book is not None else [],
    }


#: Put before Locust's page (its root element): a red banner above the web UI while the run is
#: invalid, from ``/streamslo/live`` every 2 s (Locust's own pages poll at that pace).
BANNER_HTML = """<div id="streamslo-invalid" role="alert" style="display:none;background:#c0392b;
color:#fff;padding:10px 16px;font:600 15px/1.4 system-ui,sans-serif;text-align:center"></div>
<script>
(function () {
  var el = document.getElementById("streamslo-invalid");
  function show(d) {
    var line = d && d.validity && d.validity.line;
    el.textContent = line ? "\u26a0 " + line : "";
    el.style.display = line ? "block" : "none";
  }
  function poll() {
    fetch("./streamslo/live").then(function (r) { return r.json(); }).then(show, function () {});
  }
  poll();
  setInterval(poll, 2000);
})();
</script>
"""
