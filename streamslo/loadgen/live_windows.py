"""Windows under Locust: each load-generating process aggregates its streams and samples into
window parts (:class:`streamslo.figures.windows.WindowAggregator`, owned by the recorder); the process
that writes the results (a local runner, or the master) merges them in a
:class:`~streamslo.figures.windows.WindowBook`, appends each closed window to ``windows.csv`` and
rewrites ``live.json`` every 2 s.

Workers send their parts with Locust's own report to the master (``report_to_master`` /
``worker_report``, every 3 s and once at the end), under their own key: this channel is
separate from any other. :func:`install` registers the listeners; the web UI tab reads
:func:`live_book`.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gevent
from locust.runners import STATE_STOPPED, WORKER_REPORT_INTERVAL, MasterRunner, WorkerRunner

from streamslo.figures.windows import WindowBook, WindowRow
from streamslo.loadgen.recorder import get_recorder
from streamslo.results.layout import Layout
from streamslo.runfiles.server_samples import latest_server_rss
from streamslo.runfiles.windows_csv import append_rows, write_live

if TYPE_CHECKING:
    from locust.env import Environment

__all__ = ["WindowsChannel", "install", "live_book"]

log = logging.getLogger(__name__)

#: The key of a worker's report that carries its window parts.
REPORT_KEY = "streamslo_windows"
#: Rewrite live.json at least this often (seconds).
_LIVE_EVERY_S = 2.0
_ATTR = "_streamslo_windows"


class WindowsChannel:
    """The windows of one Locust process: merging and writing where this process writes the
    results (local runner or master), nothing but sending on a worker."""

    def __init__(self, environment: Environment) -> None:
        self.env = environment
        self.book: WindowBook | None = None
        self._tick: gevent.Greenlet | None = None
        self._warned = False
        self._write_failed = False
        self._live_at = 0.0

    @property
    def _writes(self) -> bool:
        return not isinstance(self.env.runner, WorkerRunner)

    def start(self) -> None:
        """At test start: a fresh book (and its tick) where this process writes."""
        if not self._writes:
            return
        rec = get_recorder(self.env)
        if self.book is not None:  # a second run from the web UI: the first one's last windows
            self.tick(final=True)
        self.book = WindowBook(rec.opts.window, time.time)
        if self._tick is None:
            self._tick = gevent.spawn(self._loop, min(1.0, rec.opts.window / 2))

    def _loop(self, period: float) -> None:
        while True:
            gevent.sleep(period)
            try:
                self.tick()
            except Exception:  # a full disk (say) must not end the windows
                log.exception("streamslo: windows: tick failed")

    def _take_local(self) -> None:
        rec = get_recorder(self.env)
        if (
            self.book is not None
            and rec.aggregator is not None
            and not isinstance(self.env.runner, MasterRunner)
        ):
            self.book.merge(rec.aggregator.take(rec.ended.backlog_since(), wire=False))

    def merge(self, message: Any) -> None:
        """A worker's parts (master)."""
        if self.book is None:
            return
        try:
            self.book.merge(message)
        except ValueError as exc:
            if not self._warned:
                log.warning("streamslo: windows: a report was left out (%s)", exc)
                self._warned = True

    def tick(self, final: bool = False) -> None:
        """Merge this process's parts, write the windows that can be closed, rewrite live.json."""
        if self.book is None:
            return
        self._take_local()
        d = get_recorder(self.env).opts.results_dir
        layout = Layout(Path(d)) if d is not None else None
        rss = latest_server_rss(layout) if layout is not None else None
        rows = self.book.close_all(rss) if final else self.book.close_ready(rss)
        if layout is not None:
            self._write(layout, rows, final)

    def _write(self, layout: Layout, rows: list[WindowRow], final: bool = False) -> None:
        book = self.book
        assert book is not None
        try:
            if rows:
                append_rows(layout.windows_csv, rows)
            # live.json costs a few ms of this loop per group (JSON of every histogram): every
            # 2 s, at each window and at the end, not at every tick.
            now = time.monotonic()
            if rows or final or now - self._live_at >= _LIVE_EVERY_S:
                self._live_at = now
                write_live(
                    layout.live_json,
                    now=time.time(),
                    window_s=book.window_s,
                    totals=book.totals,
                    last_window=book.last_row.values if book.last_row else None,
                    rows_written=book.rows_written,
                    late_parts=book.late_parts,
                )
            self._write_failed = False
        except OSError as exc:
            # The rows are lost from windows.csv; finalize rebuilds them from streams.csv.
            if not self._write_failed:
                log.warning(
                    "streamslo: cannot write %s (%s); finalize will rebuild it",
                    layout.windows_csv,
                    exc,
                )
            self._write_failed = True

    def wait_for_workers(self, since: float, timeout: float = WORKER_REPORT_INTERVAL + 1.5) -> None:
        """Master: wait (yielding to Locust's message loop) until every worker that reported
        during the run has reported again after ``since``, at most ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while (
            self.book is not None and self.book.silent_since(since) and time.monotonic() < deadline
        ):
            gevent.sleep(0.1)

    def stop(self) -> None:
        """The end: every window is written (a worker's last parts have come by now)."""
        if self._tick is not None:
            self._tick.kill(block=False)
            self._tick = None
        self.tick(final=True)


def _channel(environment: Environment) -> WindowsChannel:
    ch = getattr(environment, _ATTR, None)
    if ch is None:
        ch = WindowsChannel(environment)
        setattr(environment, _ATTR, ch)
    return ch


def live_book(environment: Environment) -> WindowBook | None:
    """The running window book of this process (local runner or master), or None."""
    return _channel(environment).book


def install(events: Any, env_holder: dict[str, Environment]) -> None:
    """Register the windows' listeners on Locust's events (from :func:`streamslo.loadgen.hooks.install`).

    Args:
        events: ``locust.events``.
        env_holder: where the hooks keep the environment (``report_to_master`` gets none).
    """

    def _start(environment: Any, **_: Any) -> None:
        _channel(environment).start()

    def _to_master(client_id: str, data: dict[str, Any], **_: Any) -> None:
        env = env_holder.get("env")
        rec = get_recorder(env) if env is not None else None
        if rec is not None and rec.aggregator is not None:
            data[REPORT_KEY] = rec.aggregator.take(rec.ended.backlog_since())

    def _from_worker(client_id: str, data: dict[str, Any], **_: Any) -> None:
        env = env_holder.get("env")
        if env is not None and REPORT_KEY in data:
            _channel(env).merge(data[REPORT_KEY])

    def _stop(environment: Any, **_: Any) -> None:
        # A local runner's streams are all recorded by now (the recorder drains first). A
        # master closes its windows at quitting. When its workers were told to stop (a web UI
        # stop, a shape's end), test_stop fires once they say so, before their next report:
        # wait for one more report from each. When the master quits directly (--run-time),
        # its workers stop their users only at the quit, and Locust waits 0.5 s for their
        # last reports: streams of a longer drain reach windows.csv at finalize (rebuilt).
        runner = environment.runner
        if isinstance(runner, MasterRunner):
            if not runner.clients.all:
                _channel(environment).wait_for_workers(time.time())
        else:
            get_recorder(environment).ended.drain()
            _channel(environment).stop()

    def _quitting(environment: Any, **_: Any) -> None:
        # Locust fires quitting in reverse order: this runs after a master's quit has waited
        # for its workers' final reports, and before the hooks finalize a plain Locust run. A
        # local runner stopped by a signal quits *before* it stops its users: its test_stop,
        # which comes after, closes the windows then.
        runner = environment.runner
        if isinstance(runner, MasterRunner) or getattr(runner, "state", None) == STATE_STOPPED:
            get_recorder(environment).ended.drain()
            _channel(environment).stop()

    events.test_start.add_listener(_start)
    events.test_stop.add_listener(_stop)
    events.report_to_master.add_listener(_to_master)
    events.worker_report.add_listener(_from_worker)
    events.quitting.add_listener(_quitting)
