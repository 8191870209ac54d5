"""A finished stream is one event; what is done with it hangs on that event as listeners.

Locust's ``EventHook`` is the model (``add_listener``/``remove_listener``/``fire``): the process's
recorder (:class:`streamslo.loadgen.recorder.RunRecorder`) fires :class:`Hook` ``finished`` once
per stream that counts (the warm-up left out, every secret masked), and ``flushing`` every two
seconds and at the end of a test (``True``: the last flush). It wires the listeners that fit the
process (``docs/distributed.md``); each does one job:

====================  =======================================  ====================================
listener              on ``finished``                          on ``flushing``
====================  =======================================  ====================================
:class:`WriteRow`     a ``streams.csv`` row into the writer    (the writer's own ``flush``)
:class:`RelayRow`     a worker's row to its master             :class:`RelayFlush`: the final batch
windows               ``WindowAggregator.add``                 --
:class:`LocustStats`  Locust's ``stream`` and token entries    --
relay receiver        --                                       ``poll``: lost workers, relay.json
generator monitor     --                                       :class:`SaveFigures`
====================  =======================================  ====================================

Unlike Locust's ``fire``, which logs a listener's exception and goes on, :meth:`Hook.fire` lets
it propagate: the caller decides, as it did when the recorder called each consumer itself (the
periodic flush logs it and tries again in 2 s; the end of a test reports it to Locust).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Generic, TypeVar

from streamslo.options.redact import csv_safe
from streamslo.results.columns import SAFE_FIELDS
from streamslo.stream.error_groups import error_key, exact_text, group_label
from streamslo.stream.timing import StreamRecord, Wire

if TYPE_CHECKING:
    from streamslo.loadgen.monitor import GeneratorMonitor
    from streamslo.loadgen.relay import RelaySender
    from streamslo.results.writer import ResultsWriter

__all__ = [
    "TOKEN_ENTRIES",
    "Hook",
    "LocustStats",
    "RelayFlush",
    "RelayRow",
    "SaveFigures",
    "StreamFailure",
    "WriteRow",
    "csv_safe_record",
    "failure_text",
]

log = logging.getLogger(__name__)

T = TypeVar("T")


class Hook(Generic[T]):
    """An event with one typed argument: Locust's ``EventHook``, without its keyword arguments
    (``fire(**kwargs)`` is untyped) and without swallowing a listener's exception.

    Listeners run in the order they were added, after the owner's own (:meth:`set_own`), which
    the owner may replace at any time without dropping a listener someone else added.
    """

    def __init__(self) -> None:
        self._listeners: list[Callable[[T], object]] = []
        self._own = 0  # how many listeners at the front are the owner's

    def set_own(self, listeners: Sequence[Callable[[T], object]]) -> None:
        """Make ``listeners`` the owner's, in this order, ahead of every other listener (the
        owner's earlier ones are replaced; the others stay, in their order)."""
        self._listeners[: self._own] = list(listeners)
        self._own = len(listeners)

    def add_listener(self, listener: Callable[[T], object]) -> Callable[[T], object]:
        """Run ``listener`` on every :meth:`fire`, after those added before it.

        Returns:
            ``listener`` (so that it can be used as a decorator, as Locust's can).
        """
        self._listeners.append(listener)
        return listener

    def remove_listener(self, listener: Callable[[T], object]) -> None:
        """Stop running ``listener``.

        Raises:
            ValueError: it was not added.
        """
        index = self._listeners.index(listener)
        del self._listeners[index]
        if index < self._own:
            self._own -= 1

    def fire(self, value: T) -> None:
        """Hand ``value`` to every listener, in order; one that raises stops the rest."""
        # A copy, as Locust's: a listener may add or remove listeners while the event fires.
        for listener in self._listeners.copy():
            listener(value)

    def __len__(self) -> int:
        return len(self._listeners)


class StreamFailure(Exception):
    """A stream that did not end ``ok``, as Locust sees it: one failure of the error group
    (:mod:`streamslo.stream.error_groups`) of its outcome, cause and text with the numbers
    masked. Locust's statistics (:class:`streamslo.loadgen.locust_stats.StreamTotals`) count
    it in one row per group, shown as the group's most frequent exact text.

    Args:
        outcome: the stream's outcome.
        cause: its cause (empty: none).
        error: its exact error text.
    """

    def __init__(self, outcome: str, cause: str, error: str) -> None:
        self.key = error_key(outcome, cause, error)
        self.text = exact_text(error)
        super().__init__(failure_text(outcome, cause, error))


def failure_text(outcome: str, cause: str, error: str) -> str:
    """The one-line name of a failed stream's group, stable while the run goes: ``silent_truncation
    (positions_missing): N token positions arrived of N the server counted`` (``streams.csv``
    keeps the exact text; Locust's Failures tab shows the group's most frequent one)."""
    key = error_key(outcome, cause, error)
    return group_label(key.outcome, key.cause, key.text)


def csv_safe_record(rec: StreamRecord) -> StreamRecord:
    """``rec``, or a copy whose text cells cannot start a spreadsheet formula."""
    changes: dict[str, str] = {}
    for name in SAFE_FIELDS:  # (scenario names too: they come from the user's file)
        value = getattr(rec, name)
        if value and isinstance(value, str):
            safe = csv_safe(value)
            if safe is not value:
                changes[name] = safe
    return replace(rec, **changes) if changes else rec  # type: ignore[arg-type]


class WriteRow:
    """A finished stream's ``streams.csv`` row (and its gaps) into this process's results
    writer: a local runner, or a master's own streams."""

    def __init__(self, writer: ResultsWriter) -> None:
        self.writer = writer

    def __call__(self, rec: StreamRecord) -> None:
        self.writer.add(csv_safe_record(rec))


class RelayRow:
    """A worker's finished stream, on its way to the master (which writes it)."""

    def __init__(self, sender: RelaySender) -> None:
        self.sender = sender

    def __call__(self, rec: StreamRecord) -> None:
        self.sender.add(csv_safe_record(rec))


class RelayFlush:
    """A worker at the end of a test: Locust's statistics first, then the final batch (the
    sender's own loop sends the others every second).

    Args:
        sender: the worker's channel to its master.
        report_stats: sends Locust's statistics to the master now.
    """

    def __init__(self, sender: RelaySender, report_stats: Callable[[], None]) -> None:
        self.sender = sender
        self.report_stats = report_stats

    def __call__(self, final: bool) -> None:
        if not final:
            return
        if self.sender.running:
            # A headless master stops listening half a second after it tells its workers to
            # quit: a worker slower than that (a saturated one) would otherwise leave its last
            # streams out of Locust's own totals.
            self.report_stats()
        self.sender.flush(final=True)


class SaveFigures:
    """The generator monitor's figures to ``procs/<tag>.json`` at every flush."""

    def __init__(self, monitor: GeneratorMonitor) -> None:
        self.monitor = monitor

    def __call__(self, final: bool) -> None:
        self.monitor.save()


#: Locust entries that time a stream's tokens: measurements of the ``stream`` entry's requests,
#: not requests of their own. Locust's total (``Aggregated``, the web UI's header and charts,
#: ``--csv``) leaves them out (:func:`streamslo.loadgen.locust_stats.count_streams_only`); their
#: names sort after ``stream``, so the table shows the requests first.
TTFT_ENTRY, ITL_ENTRY, MAX_GAP_ENTRY = "token ttft", "token itl", "token max_gap"
TOKEN_ENTRIES = frozenset((TTFT_ENTRY, ITL_ENTRY, MAX_GAP_ENTRY))


class LocustStats:
    """A finished stream reported to Locust's statistics as named entries per protocol
    (``SSE``/``WS``): ``stream``, one request, a failure named by its outcome; and its token
    timings (:data:`TOKEN_ENTRIES`, never failures): ``token ttft``; ``token itl`` and
    ``token max_gap`` per stream, or ``token itl`` per gap, or none (``--itl-events``).

    A stream the run cancelled is not reported; one the client hung up on
    (``client_cancelled``) reports its token timings but no ``stream`` entry.

    Args:
        fire: Locust's ``events.request.fire``.
        itl_events: ``per-stream``, ``per-gap`` or ``off``.
    """

    def __init__(self, fire: Callable[..., object], itl_events: str) -> None:
        self.fire = fire
        self.itl_events = itl_events

    def _entry(self, kind: str, name: str, ms: float) -> None:
        self.fire(
            request_type=kind,
            name=name,
            response_time=ms,
            response_length=0,
            exception=None,
            context={},
        )

    def __call__(self, rec: StreamRecord) -> None:
        kind = "WS" if rec.protocol == Wire.WS else "SSE"
        outcome = rec.outcome
        if outcome == "cancelled":
            return
        if rec.ttft_s is not None:
            self._entry(kind, TTFT_ENTRY, rec.ttft_s * 1000.0)
        mode = self.itl_events
        if rec.gap_s and mode != "off":
            if mode == "per-gap":
                for g in rec.gap_s:
                    self._entry(kind, ITL_ENTRY, g * 1000.0)
            else:
                self._entry(kind, ITL_ENTRY, sum(rec.gap_s) / len(rec.gap_s) * 1000.0)
                self._entry(kind, MAX_GAP_ENTRY, max(rec.gap_s) * 1000.0)
        if outcome == "client_cancelled":
            return  # hung up on purpose: its TTFT and gaps count, its cut-short stream neither way
        exc = (
            None
            if outcome == "ok"
            else StreamFailure(str(outcome), str(rec.cause or ""), rec.error)
        )
        self.fire(
            request_type=kind,
            name="stream",
            response_time=(rec.e2e_s or 0.0) * 1000.0,
            response_length=rec.bytes,
            exception=exc,
            context={},
        )
