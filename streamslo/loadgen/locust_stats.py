"""Keeping Locust's own statistics bounded over a long run, with every figure it reports
unchanged.

Locust keeps, for each of its entries (``SSE ttft``, ``WS stream``... and the aggregate), a
``{second: count}`` dict of requests and one of failures, one key per second of the run, for
ever: about 2.4 MiB an hour at the suite's nine entries (measured: bench/RESULTS.md). It reads
them only for its *current* rates (``current_rps``, ``current_fail_per_sec``: the last 12
seconds); totals and percentiles come from other fields. :func:`trim_locust_stats` drops the
seconds older than :data:`KEEP_S`.

Its chart history (``stats.history``, one point every 5 s: 0.7 MiB an hour) feeds the web UI's
charts and the ``--html`` report; when neither exists (``streamslo run`` / ``soak``: headless,
no HTML report) nothing reads it, and only its last :data:`HISTORY_KEEP` points are kept.
"""

from __future__ import annotations

__all__ = ["HISTORY_KEEP", "KEEP_S", "trim_locust_stats"]

#: Seconds of per-second counts kept (Locust reads the last 12).
KEEP_S = 60
#: Chart points kept when nothing will show them (an hour at Locust's 5 s).
HISTORY_KEEP = 720


def _trim_seconds(counts: dict[int, int], before: int) -> None:
    # Keys are seconds in the order they came (a worker's late report aside): stop at the
    # first one to keep, so each call costs what it drops.
    old = []
    for t in counts:
        if t >= before:
            break
        old.append(t)
    for t in old:
        del counts[t]


def trim_locust_stats(environment: object, now: float) -> None:
    """Drop the per-second counts older than :data:`KEEP_S` from every entry of Locust's
    statistics, and its chart history beyond :data:`HISTORY_KEEP` points when no web UI or
    HTML report will show it."""
    stats = getattr(environment, "stats", None)
    if stats is None:
        return
    before = int(now) - KEEP_S
    for entry in [*stats.entries.values(), stats.total]:
        _trim_seconds(entry.num_reqs_per_sec, before)
        _trim_seconds(entry.num_fail_per_sec, before)
    history = getattr(stats, "history", None)
    parsed = getattr(environment, "parsed_options", None)
    unread = getattr(environment, "web_ui", None) is None and not getattr(parsed, "html_file", None)
    if unread and isinstance(history, list) and len(history) > HISTORY_KEEP:
        del history[: len(history) - HISTORY_KEEP]
