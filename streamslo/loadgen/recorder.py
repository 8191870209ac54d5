"""Per-process run state shared by every stream user: options, target, prompts, the stream ids
and clocks, and the wiring of what happens to each finished stream.

A finished stream is one event (:attr:`RunRecorder.finished`, :mod:`streamslo.loadgen.listeners`):
the recorder queues it, leaves out the warm-up, masks every secret in its text, and fires it; the
listeners it wired write it, relay it, add it to the windows and report it to Locust's statistics.

Where finished streams go depends on the process (``docs/distributed.md``): a local runner writes
the results directory itself; a Locust worker writes nothing and sends them to its master
(:mod:`streamslo.loadgen.relay`), on this host or another; the master writes what its workers
send.

Each stream is reported to Locust with named entries per protocol (``SSE``/``WS``):

- ``ttft``: time to first content chunk;
- ``itl``: one entry per stream with its mean inter-token gap, and ``max_gap`` with its
  largest (``--itl-events per-stream``, the default), or every gap (``per-gap``: exact in
  Locust's own percentiles, but a burst of events at each stream's end that costs the
  generator about 3 µs per token); the exact pooled ITL percentiles are in the results and
  the web UI's Stream SLOs tab either way;
- ``stream``: the whole stream; a failure named by its outcome (``truncated: ...``).

Cancelled streams (the run stopped them) are written to the results but not reported as
failures; a stream the client hung up on (``client_cancelled``) reports its ``ttft`` and ``itl``
but no ``stream`` entry; streams that started in the warm-up are left out of everything.

Error text comes from the server: before a stream is recorded anywhere, every secret (the API
key, secret header values) is masked in it, and a ``streams.csv`` text cell that a spreadsheet
would run as a formula is neutralized (see ``docs/security.md``).
"""

from __future__ import annotations

import gc
import logging
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gevent

from streamslo.figures.windows import WindowAggregator
from streamslo.loadgen.listeners import (
    Hook,
    LocustStats,
    RelayFlush,
    RelayRow,
    SaveFigures,
    StreamFailure,
    WriteRow,
)
from streamslo.loadgen.locust_stats import trim_locust_stats
from streamslo.loadgen.monitor import GeneratorMonitor
from streamslo.loadgen.options import LoadOptions
from streamslo.loadgen.streams import StreamSource, TargetResolver
from streamslo.options.redact import Redactor, install_log_redaction
from streamslo.options.run_options import OPTIONS
from streamslo.results.layout import Layout
from streamslo.results.writer import ResultsWriter, ensure_streams_header, new_tag, warm_pyarrow
from streamslo.stream.cause import default_cause
from streamslo.stream.outcome import Outcome
from streamslo.stream.timing import StreamRecord
from streamslo.workload.requests import Workload

if TYPE_CHECKING:
    from locust.runners import MasterRunner, WorkerRunner

if TYPE_CHECKING:
    from streamslo.loadgen.relay import RelayReceiver, RelaySender

__all__ = ["RunRecorder", "StreamFailure", "claim_run_start", "get_recorder"]

# StreamFailure lives with the listener that raises it (listeners.LocustStats); named here too,
# where Locust users have always found it.

log = logging.getLogger(__name__)

_RECORDER_ATTR = "_streamslo_recorder"


def claim_run_start(directory: Path) -> float:
    """The run's start in epoch seconds, agreed by every process writing to ``directory``:
    the first process to get here writes it, the others read it."""
    directory.mkdir(parents=True, exist_ok=True)
    marker = Layout(directory).run_start_marker
    import os

    try:
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        for _ in range(50):
            text = marker.read_text().strip()
            if text:
                return float(text)
            time.sleep(0.01)
        return time.time()
    now = time.time()
    try:
        os.write(fd, repr(now).encode())
    finally:
        os.close(fd)
    return now


class FinishedStreams:
    """The streams that ended, on their way to the listeners: queued as they end, left out in
    the warm-up, their secrets masked, then fired on :attr:`finished` by one background
    greenlet that yields between streams (when hundreds end at once, their bookkeeping
    interleaves with the reads of the streams still running instead of delaying them all)."""

    def __init__(self, warmup_ends: Callable[[], float], redact: Callable[[str], str]) -> None:
        self.finished: Hook[StreamRecord] = Hook()
        """A stream that counts has finished (the warm-up left out, its secrets masked)."""
        self.redact = redact
        self._warmup_ends = warmup_ends
        self._queue: deque[StreamRecord] = deque()
        self._drainer: gevent.Greenlet | None = None

    def add(self, rec: StreamRecord) -> None:
        """A stream ended (whatever its outcome)."""
        if rec.outcome is None:  # defensive: a transport bug must not lose the row
            rec.outcome = Outcome.CANCELLED
            rec.cause = default_cause(Outcome.CANCELLED)
            rec.error = rec.error or "ended without an outcome"
        if rec.started_at < self._warmup_ends():
            return
        self._queue.append(rec)
        if self._drainer is None or self._drainer.dead:
            self._drainer = gevent.spawn(self._drain_slowly)

    def _drain_slowly(self) -> None:
        queue = self._queue
        while queue:
            self._fire(queue.popleft())
            # Let the loop poll for reads before the next one (a bare switch would not);
            # a long queue is worked off without pauses so it cannot grow without bound.
            gevent.sleep(0.001 if len(queue) < 100 else 0)

    def backlog_since(self) -> float | None:
        """When the oldest stream finished but not yet recorded ended (epoch), or None: the
        window aggregator's watermark stays before it."""
        if not self._queue:
            return None
        rec = self._queue[0]
        return rec.started_at + (rec.e2e_s or 0.0)

    def drain(self) -> None:
        """Record every queued stream now (end of the run)."""
        while self._queue:
            self._fire(self._queue.popleft())

    def _fire(self, rec: StreamRecord) -> None:
        # Server text may echo a key: mask it before the row, the live figures or Locust's
        # failure message (cut to 80 characters, after masking) can keep it.
        if rec.error:
            rec.error = self.redact(rec.error)
        if rec.finish_reason:
            rec.finish_reason = self.redact(rec.finish_reason)
        self.finished.fire(rec)


class RunRecorder:
    """One per Locust process, created at init and started at test start: the process's
    lifecycle (options, the results writer, the monitor, the relay, the flushes) around its
    :attr:`source` of streams and its queue of :attr:`ended` ones."""

    def __init__(self, environment: Any, opts: LoadOptions) -> None:
        self.env = environment
        self.opts = opts
        self.aggregator: WindowAggregator | None = None
        """This process's window parts (``windows.csv``), while it generates load."""
        self.writer: ResultsWriter | None = None
        self.monitor: GeneratorMonitor | None = None
        self.run_start: float = time.time()
        self._flusher: gevent.Greenlet | None = None
        self.sender: RelaySender | None = None
        """A worker's channel to its master (set at init by the relay)."""
        self.receiver: RelayReceiver | None = None
        """A master's intake of its workers' streams (set at init by the relay)."""
        from locust.runners import WorkerRunner

        self._is_worker = isinstance(environment.runner, WorkerRunner)
        # This process's own secret options, before a master's (see refresh_options).
        self._own_secrets = {
            o.locust_dest: getattr(environment.parsed_options, o.locust_dest, None)
            for o in OPTIONS
            if o.secret and o.locust_dest
        }
        redact: Redactor = opts.redactor()
        install_log_redaction(redact)
        self.ended = FinishedStreams(lambda: self.run_start + self.opts.warmup, redact)
        """The streams that ended, on their way to the listeners."""
        self.finished: Hook[StreamRecord] = self.ended.finished
        """A stream that counts has finished (the warm-up left out, its secrets masked)."""
        self.source = StreamSource(
            opts,
            TargetResolver(lambda: self.env.host or "", opts),
            self.ended.add,
            worker_index=lambda: int(
                getattr(getattr(self.env, "runner", None), "worker_index", 0) or 0
            ),
        )
        """Where this process's streams come from (records, trackers, connections)."""
        self.flushing: Hook[bool] = Hook()
        """Every 2 s, and at the end of a test (``True``): write or send what finished."""
        self._wire()
        if opts.results_dir is not None and not self._is_worker:
            ensure_streams_header(opts.results_dir)
            # Now, not at test start: Locust's --run-time clock runs from the start, and this
            # import took seconds on a busy machine (a master's load started that late).
            warm_pyarrow()

    # ---------------------------------------------------------------- setup
    def refresh_options(self) -> None:
        """Re-read the options: a worker receives the master's at test start, and the web
        UI's start form may have changed them since init.

        A worker keeps its own credentials (``--header-file``, ``--api-key-env``, ``--header``)
        where the master sends none: ``streamslo run`` never puts them on the master's command
        line, so a worker on another machine brings its own.
        """
        parsed = self.env.parsed_options
        if self._is_worker:
            for dest, own in self._own_secrets.items():
                if own and not getattr(parsed, dest, None):
                    setattr(parsed, dest, own)
        opts = LoadOptions.from_parsed(parsed)
        if opts != self.opts:
            self.opts = opts
            self.ended.redact = opts.redactor()
            install_log_redaction(self.ended.redact)
            source = self.source
            source.opts = opts
            source.resolver = TargetResolver(lambda: self.env.host or "", opts)
            source.workload = Workload(opts)

    # ------------------------------------------------------------ distributed
    def attach_sender(self, runner: WorkerRunner) -> RelaySender:
        """This process is a Locust worker: its streams go to the master through ``runner``."""
        from streamslo.loadgen.relay import RelaySender

        self.source.tag = new_tag()
        self.sender = RelaySender(
            runner.send_message,
            self.source.tag,
            figures=lambda: self.monitor.figures() if self.monitor is not None else {},
            in_flight=lambda: self.source.in_flight,
        )
        self._wire()
        return self.sender

    def attach_receiver(self, runner: MasterRunner) -> RelayReceiver:
        """This process is a Locust master: it writes what its workers send."""
        from streamslo.loadgen.relay import RelayReceiver

        self.receiver = RelayReceiver(runner)
        self._wire()
        return self.receiver

    def finish_now(self) -> None:
        """A worker, asked by its master for its last streams: stop the users (they get the
        stop timeout; stopping sends the final batch), or, if none run, say so at once."""
        from locust.runners import STATE_INIT, STATE_RUNNING, STATE_SPAWNING, STATE_STOPPED

        state = self.env.runner.state
        if state in (STATE_SPAWNING, STATE_RUNNING):
            self.env.runner.stop()
        elif state in (STATE_INIT, STATE_STOPPED) and self.sender is not None:
            self.sender.flush(final=True)  # no users run here (or none ever did)
        # Stopping already (cleanup): the final batch comes when it has stopped.

    # ---------------------------------------------------------------- start/stop
    def on_test_start(self, generating: bool) -> None:
        """Called at test start on every process; ``generating``: this process runs users."""
        self.refresh_options()
        # A worker writes nothing, even when its master sent it a --results-dir: the master
        # writes the directory, on its own disk.
        d = None if self._is_worker else self.opts.results_dir
        self.run_start = claim_run_start(d) if d is not None else time.time()
        if d is not None and self.writer is None and (generating or self.receiver is not None):
            # Parquet writes go to a real OS thread (gevent's threadpool): pyarrow releases
            # the GIL while it writes, so the streams' greenlets keep running.
            self.writer = ResultsWriter(
                d, self.run_start, offload=gevent.get_hub().threadpool.spawn
            )
            if generating:
                self.source.tag = self.writer.tag
        if self.receiver is not None:
            self.receiver.start(self.writer, Layout(d) if d is not None else None)
        if generating:
            # Everything imported so far (locust, pandas, pyarrow...) is long-lived: move it out
            # of the collector's reach so a full collection mid-run does not pause every stream.
            gc.collect()
            gc.freeze()
            # Each token makes short-lived objects; Python's default (700, 10, 10) runs a
            # collection every few hundred tokens and a full one every few seconds, pausing
            # every stream. Measured with bench/bench_stream_users.py: lateness p99 at 400
            # streams 22 ms -> 14 ms with these thresholds.
            gc.set_threshold(50_000, 100, 1000)
            import os
            import socket

            tag = self.source.tag
            where = f"{socket.gethostname()}:{os.getpid()}:{tag}"
            self.aggregator = WindowAggregator(self.opts.window, where, time.time)
            self.monitor = GeneratorMonitor(d, tag, self.aggregator, lambda: self.source.in_flight)
            self.monitor.start()
        if self.sender is not None:
            self.sender.start()
        self._wire()
        if self._flusher is None and (
            self.writer is not None or self.monitor is not None or self.receiver is not None
        ):
            self._flusher = gevent.spawn(self._flush_loop)

    def _flush_loop(self) -> None:
        while True:
            gevent.sleep(2.0)
            try:
                self.flush()
                # Locust's per-second counts grow a key a second per entry for ever (its
                # reported figures read the last 12 s): keep the last minute.
                trim_locust_stats(self.env, time.time())
            except Exception:  # a full disk (say) must not end the periodic flush
                log.exception("streamslo: flush failed; retrying in 2 s")

    def _wire(self) -> None:
        """Hang this process's listeners on :attr:`finished` and :attr:`flushing`, in the order
        they must run (the receiver hands its workers' batches to the writer before it
        flushes); again whenever one comes or goes (init, the relay, each test start). The hooks
        themselves persist: a listener someone else added stays, after these."""
        finished: list[Callable[[StreamRecord], object]] = []
        flushing: list[Callable[[bool], object]] = []
        if self.sender is not None:  # a worker: the master writes its streams
            finished.append(RelayRow(self.sender))
            flushing.append(RelayFlush(self.sender, self._report_stats_now))
        elif self.writer is not None:
            finished.append(WriteRow(self.writer))
        if self.aggregator is not None:
            # A worker's window parts travel to its master (loadgen/live_windows.py).
            finished.append(self.aggregator.add)
        finished.append(LocustStats(self.env.events.request.fire, self.opts.itl_events))
        if self.receiver is not None:
            receiver = self.receiver
            flushing.append(lambda final: receiver.poll())
        if self.writer is not None:
            flushing.append(self.writer.flush)
        if self.monitor is not None:
            flushing.append(SaveFigures(self.monitor))
        self.finished.set_own(finished)
        self.flushing.set_own(flushing)

    def _report_stats_now(self) -> None:
        """A worker at the end of a test: send Locust's statistics (and the live figures that
        ride on them) now, ahead of the final batch (see :class:`RelayFlush`)."""
        runner = self.env.runner
        data: dict[str, Any] = {}
        try:
            self.env.events.report_to_master.fire(client_id=runner.client_id, data=data)
            runner.send_message("stats", data)
        except Exception as exc:  # Locust's RPC errors: its stats reporter tries again
            log.warning("streamslo: could not send the last statistics to the master (%s)", exc)

    def flush(self, wait: bool = False) -> None:
        """Write (or, on a worker, send) what finished; ``wait``: the end of a test."""
        if wait:
            self.ended.drain()
        self.flushing.fire(wait)

    def on_test_stop(self) -> None:
        """The end of a test: record every stream; a worker sends its final batch, a master
        waits for its workers' final batches, then everything is written."""
        if self._flusher is not None:
            self._flusher.kill(block=False)
            self._flusher = None
        if self.monitor is not None:
            self.monitor.stop()
        if self.receiver is not None:
            from streamslo.loadgen.relay import FINISH_GRACE_S

            self.receiver.await_final(
                float(getattr(self.env, "stop_timeout", 0) or 0) + FINISH_GRACE_S
            )
        self.flush(wait=True)


def get_recorder(environment: Any) -> RunRecorder:
    """The process's recorder (created by the locustfile's init hook)."""
    rec = getattr(environment, _RECORDER_ATTR, None)
    if rec is None:
        rec = RunRecorder(environment, LoadOptions.from_parsed(environment.parsed_options))
        setattr(environment, _RECORDER_ATTR, rec)
    return rec
