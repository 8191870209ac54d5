"""Locust's own statistics: its totals count streams, and they stay bounded over a long run.

**Streams, not timings.** A stream is one request to Locust (its ``stream`` entry); its token
timings (``token ttft``, ``token itl``, ``token max_gap``:
:data:`streamslo.loadgen.listeners.TOKEN_ENTRIES`) are entries of their own, which never fail.
Locust adds every entry to its total (``Aggregated``), and the web UI's header (RPS,
Failures), its charts, ``--csv`` and ``--html`` read that total: with the timings in it, a run
where 40 % of streams failed read 10 % failures at four times the stream rate.
:func:`count_streams_only` keeps the timings out of the total; their own rows are unchanged.
A worker's total travels to its master as it is, so a master's total counts streams too.

**Bounded.** Locust keeps, for each of its entries (``SSE stream``, ``WS token ttft``... and
the aggregate), a ``{second: count}`` dict of requests and one of failures, one key per second of the run, for
ever: about 2.4 MiB an hour at the suite's nine entries (measured: bench/RESULTS.md). It reads
them only for its *current* rates (``current_rps``, ``current_fail_per_sec``: the last 12
seconds); totals and percentiles come from other fields. :func:`trim_locust_stats` drops the
seconds older than :data:`KEEP_S`.

Its chart history (``stats.history``, one point every 5 s: 0.7 MiB an hour) feeds the web UI's
charts and the ``--html`` report; when neither exists (``streamslo run`` / ``soak``: headless,
no HTML report) nothing reads it, and only its last :data:`HISTORY_KEEP` points are kept.
"""

from __future__ import annotations

from locust.env import Environment
from locust.stats import RequestStats

from streamslo.loadgen.listeners import TOKEN_ENTRIES

__all__ = ["HISTORY_KEEP", "KEEP_S", "StreamTotals", "count_streams_only", "trim_locust_stats"]

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


class StreamTotals(RequestStats):
    """Locust's :class:`~locust.stats.RequestStats` whose total (``Aggregated``) leaves out the
    token timing entries: they are logged in their own rows only."""

    def log_request(self, method: str, name: str, response_time: int, content_length: int) -> None:
        if name in TOKEN_ENTRIES:
            self.entries[(name, method)].log(response_time, content_length)
        else:
            super().log_request(method, name, response_time, content_length)

    def log_error(self, method: str, name: str, error: Exception | str | None) -> None:
        if name in TOKEN_ENTRIES:  # never fired (a timing does not fail): kept out all the same
            self.entries[(name, method)].log_error(error)
        else:
            super().log_error(method, name, error)


def count_streams_only(environment: Environment) -> None:
    """Make ``environment``'s statistics count streams in their total (:class:`StreamTotals`).

    The object stays the same (its class changes): Locust's runner, its web UI, its CSV writer and
    a master's listener for its workers' reports all hold it already. Call it at Locust's
    ``init``, before any request.
    """
    stats = getattr(environment, "stats", None)
    if type(stats) is RequestStats:
        stats.__class__ = StreamTotals
