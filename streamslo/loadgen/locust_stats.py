"""Locust's own statistics: its totals count streams, and they stay bounded over a long run.

**Streams, not timings.** A stream is one request to Locust (its ``stream`` entry); its token
timings (``token ttft``, ``token itl``, ``token max_gap``:
:data:`streamslo.loadgen.listeners.TOKEN_ENTRIES`) are entries of their own, which never fail.
Locust adds every entry to its total (``Aggregated``), and the web UI's header (RPS,
Failures), its charts, ``--csv`` and ``--html`` read that total: with the timings in it, a run
where 40 % of streams failed read 10 % failures at four times the stream rate.
:func:`count_streams_only` keeps the timings out of the total; their own rows are unchanged.
A worker's total travels to its master as it is, so a master's total counts streams too.

**Failures by group.** A failed stream is a :class:`~streamslo.loadgen.listeners.StreamFailure`;
Locust's Failures tab, its end-of-run error report and ``--csv`` keep one row per error group
(:mod:`streamslo.stream.error_groups`: the outcome, the cause, the text with its numbers masked),
the same groups as ``summary.json``'s ``top_errors`` and the report, each shown as the group's
most frequent exact text with the group's count. A master shows for each group the text its
workers reported most often.

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

import weakref
from collections.abc import Mapping

from locust.env import Environment
from locust.stats import RequestStats, StatsError

from streamslo.loadgen.listeners import TOKEN_ENTRIES, StreamFailure
from streamslo.stream.error_groups import ErrorTally, group_label, representative

__all__ = [
    "HISTORY_KEEP",
    "KEEP_S",
    "SHOWN_CHARS",
    "StreamTotals",
    "WorkerTexts",
    "count_streams_only",
    "shown_text",
    "trim_locust_stats",
]

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
        elif isinstance(error, StreamFailure):
            # One row per error group (its stable label is the row's key), shown as the
            # group's most frequent exact text so far.
            group = str(error)
            super().log_error(method, name, group)
            self.errors[StatsError.create_key(method, name, group)].error = shown_text(
                self, method, name, error
            )
        else:
            super().log_error(method, name, error)

    def reset_all(self) -> None:
        super().reset_all()
        _tally(self).clear()


#: Per statistics object: (method, name) -> the groups' exact texts so far.
_TALLIES: weakref.WeakKeyDictionary[RequestStats, dict[tuple[str, str], ErrorTally]] = (
    weakref.WeakKeyDictionary()
)


def _tally(stats: RequestStats) -> dict[tuple[str, str], ErrorTally]:
    tally = _TALLIES.get(stats)
    if tally is None:
        tally = _TALLIES[stats] = {}
    return tally


def shown_text(stats: RequestStats, method: str, name: str, failure: StreamFailure) -> str:
    """Count ``failure`` in its group; the group's line as Locust shows it: the outcome, the
    cause and the group's most frequent exact text."""
    tally = _tally(stats).setdefault((method, name), ErrorTally())
    key = failure.key
    tally.add(key.outcome, key.cause, failure.text)
    return group_label(key.outcome, key.cause, tally.view(key).text)[:SHOWN_CHARS]


#: A failure line in Locust's tables is cut here (the exact texts are in streams.csv).
SHOWN_CHARS = 200


class WorkerTexts:
    """A master's Locust statistics: each group shown as the text its workers reported most
    often (each worker reports its own most frequent; Locust keeps the first it received).

    Install with :meth:`install` at ``init`` on a master: it listens to ``worker_report`` after
    Locust's own listener, which merged the report into the statistics.
    """

    def __init__(self, stats: RequestStats) -> None:
        self.stats = stats
        self._seen: dict[str, dict[str, int]] = {}

    def __call__(self, client_id: str = "", data: Mapping[str, object] | None = None) -> None:
        errors = (data or {}).get("errors")
        for key, err in errors.items() if isinstance(errors, dict) else ():
            entry = self.stats.errors.get(key)
            if entry is None or not isinstance(err, dict):
                continue
            text, n = err.get("error"), err.get("occurrences")
            if not isinstance(text, str) or not isinstance(n, int):
                continue
            seen = self._seen.setdefault(key, {})
            seen[text] = seen.get(text, 0) + n
            entry.error = representative(seen)


def count_streams_only(environment: Environment) -> None:
    """Make ``environment``'s statistics count streams in their total (:class:`StreamTotals`).

    The object stays the same (its class changes): Locust's runner, its web UI, its CSV writer and
    a master's listener for its workers' reports all hold it already. Call it at Locust's
    ``init``, before any request.
    """
    stats = getattr(environment, "stats", None)
    if type(stats) is RequestStats:
        stats.__class__ = StreamTotals
