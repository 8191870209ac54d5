"""Distributed runs without a shared disk: workers send their finished streams to the master.

In Locust's distributed mode (``--processes N``, or a master and ``--worker`` processes on any
hosts) a worker writes no file. Every second it sends the streams that finished since its last
message, as one :class:`~streamslo.results.batch.RecordBatch` (``streams.csv`` rows already
formatted, gaps as columns of numbers), over Locust's own ZeroMQ connection, in a custom
message; the master appends them to the one results directory (``docs/distributed.md``).

Messages (every value survives msgpack):

- ``streamslo_records``, worker to master: ``tag`` (the worker's stream-id prefix), ``seq``
  (1, 2, ... per worker), ``batch``, ``final`` (the last of a test: its users have stopped),
  ``in_flight`` (streams open when it was sent), ``figures`` (the generator monitor's CPU and
  lag, every 2 s and in the final message), ``host``, ``sent_at`` (epoch s), ``oldest`` (epoch s
  when the batch's first stream was recorded: the master keeps each worker's longest wait).
- ``streamslo_ack``, master to worker: ``seq``, once the batch is in the master's writer. A
  worker keeps each batch until it is acknowledged and sends it again after 5 s without an
  acknowledgement (a connection that Locust reset drops what was queued on it); the master
  skips a ``seq`` it already has, so each stream is written once.
- ``streamslo_finish``, master to worker: stop your users now (they get ``--stop-timeout``) and
  send your final batch. A headless Locust master fires ``test_stop`` and tells its workers to
  quit only half a second before it stops listening; this message lets the master wait for the
  streams its workers are still draining.

What a worker that dies (SIGKILL, a lost host) loses: its streams in flight, and the streams
that finished in at most the last second (one flush interval) before it died. The master marks
it lost when Locust does (three missed heartbeats) and writes ``relay.json``: every worker's
batches, records and bytes, and ``lost_workers`` with when each was lost, when it was last
heard from, and how many streams it had in flight then. Its earlier streams are all written.

Why a custom message, not ``report_to_master``: Locust sends its stats report every 3 s
(``WORKER_REPORT_INTERVAL``), so records would reach the master up to 3 s late, and a final one
after the master's last look; a custom message has its own 1 s interval, its own
acknowledgement, and leaves the stats report small. ``bench/bench_relay.py`` measures the
message size and the master's cost per record.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import gevent

from streamslo.results.batch import RecordBatch
from streamslo.stream.timing import StreamRecord

if TYPE_CHECKING:
    from locust.env import Environment
    from locust.runners import MasterRunner, WorkerRunner

if TYPE_CHECKING:
    from streamslo.results.layout import Layout
    from streamslo.results.writer import ResultsWriter

__all__ = [
    "ACK",
    "FINISH",
    "RECORDS",
    "RelayReceiver",
    "RelaySender",
    "Relaying",
    "WorkerState",
    "install",
]

log = logging.getLogger(__name__)

RECORDS = "streamslo_records"
ACK = "streamslo_ack"
FINISH = "streamslo_finish"

#: A worker sends what finished at most this long ago (seconds).
SEND_INTERVAL_S = 1.0
#: A batch not acknowledged for this long is sent again.
RESEND_AFTER_S = 5.0
#: The generator monitor's figures travel this often (and in the final message).
FIGURES_EVERY_S = 2.0
#: The master waits this long past ``--stop-timeout`` for its workers' final batches.
FINISH_GRACE_S = 10.0
#: A worker that left (quit) without its final batch is waited for this long: it is on its way.
LEFT_GRACE_S = 3.0


class RelaySender:
    """A worker's side: batches finished streams and sends them to the master.

    Args:
        send: ``runner.send_message`` (the worker's connection to its master).
        tag: this worker's tag (the prefix of its stream ids).
        figures: the generator monitor's figures, or None.
        in_flight: how many streams are open now.
        resend_after: send a batch again when it was not acknowledged for this many seconds.
    """

    def __init__(
        self,
        send: Callable[[str, dict[str, object]], None],
        tag: str,
        figures: Callable[[], dict[str, object]] | None = None,
        in_flight: Callable[[], int] | None = None,
        resend_after: float = RESEND_AFTER_S,
    ) -> None:
        self._send = send
        self.tag = tag
        self.resend_after = resend_after
        self.figures = figures
        self.in_flight = in_flight or (lambda: 0)
        self.batch = RecordBatch()
        self._oldest: float | None = None  # when the batch's first stream was added
        self.host = socket.gethostname()
        self._seq = 0
        self._unacked: dict[int, tuple[float, dict[str, Any]]] = {}
        self._last_figures = float("-inf")
        self._loop: gevent.Greenlet | None = None
        self.running = False
        """Between test start and the final batch: figures travel, the loop sends."""
        self.records_sent = 0
        """Streams sent (first sends only)."""
        self.send_errors = 0

    @property
    def unacked(self) -> int:
        """Batches sent and not yet acknowledged."""
        return len(self._unacked)

    def add(self, rec: StreamRecord) -> None:
        """Queue one finished stream for the next message (its text cells safe to write)."""
        if self._oldest is None:
            self._oldest = time.time()
        self.batch.add(rec)

    def start(self) -> None:
        """A test started: send every ``SEND_INTERVAL_S`` from now on."""
        self.running = True
        if self._loop is None or self._loop.dead:
            self._loop = gevent.spawn(self._run)

    def _run(self) -> None:
        while True:
            gevent.sleep(SEND_INTERVAL_S)
            try:
                self.flush()
            except Exception:  # the loop must outlive one bad send
                log.exception("streamslo: sending records to the master failed; retrying")

    def flush(self, final: bool = False) -> None:
        """Send the queued streams (with the figures when due), and again what was not
        acknowledged in time.

        Args:
            final: the test's users have stopped: send even an empty batch, marked final.
        """
        now = time.monotonic()
        for seq, (sent, old) in list(
            self._unacked.items()
        ):  # before the new one: not resent at once
            if now - sent >= self.resend_after:
                self._unacked[seq] = (now, old)
                self._transmit(old)
        figures_due = (
            self.running
            and self.figures is not None
            and (final or now - self._last_figures >= FIGURES_EVERY_S)
        )
        if len(self.batch) or final or figures_due:
            batch, self.batch = self.batch, RecordBatch()
            oldest, self._oldest = self._oldest, None
            self._seq += 1
            msg: dict[str, Any] = {
                "tag": self.tag,
                "seq": self._seq,
                "final": final,
                "batch": batch.to_wire(),
                "in_flight": self.in_flight(),
                "figures": self.figures() if figures_due and self.figures is not None else None,
                "host": self.host,
                "sent_at": time.time(),
                "oldest": oldest,
            }
            if figures_due:
                self._last_figures = now
            self._unacked[self._seq] = (now, msg)
            self.records_sent += len(batch)
            self._transmit(msg)
            log.debug(
                "streamslo: worker %s sent batch %d: %d records (%d in all)%s",
                self.tag,
                self._seq,
                len(batch),
                self.records_sent,
                ", final" if final else "",
            )
        if final:
            self.running = False

    def _transmit(self, msg: dict[str, Any]) -> None:
        try:
            self._send(RECORDS, msg)
        except Exception as exc:  # Locust's RPC errors; kept and sent again later
            self.send_errors += 1
            log.warning(
                "streamslo: could not send batch %s to the master (%s); it is kept and sent again",
                msg["seq"],
                exc,
            )

    def on_ack(self, environment: Any = None, msg: Any = None, **_: Any) -> None:
        """The master has batch ``msg.data["seq"]``: forget it."""
        data = getattr(msg, "data", None)
        if isinstance(data, dict) and isinstance(data.get("seq"), int):
            self._unacked.pop(data["seq"], None)


@dataclass
class WorkerState:
    """What the master knows of one worker (a Locust client id)."""

    worker: str
    """Locust's client id of the worker (``<hostname>_<hex>``)."""
    host: str | None = None
    tag: str | None = None
    batches: int = 0
    records: int = 0
    gaps: int = 0
    bytes: int = 0
    duplicates: int = 0
    """Batches received again (an acknowledgement was late or lost): skipped."""
    rejected_records: int = 0
    """Records in batches that could not be read (a worker of another version?)."""
    first_seen: float | None = None
    last_seen: float | None = None
    in_flight: int | None = None
    """Streams open at its last message."""
    wait_ms_max: float | None = None
    """The longest a stream waited from being recorded on the worker to reaching the master
    (batching plus transport; across hosts, clock differences add to it)."""
    final: bool = False
    """Its last message was its final one: its users stopped and everything came."""
    lost_at: float | None = None
    """When the master saw it missing (no heartbeat) before its final message."""
    figures: dict[str, Any] | None = None
    last_seq: int = 0
    """The newest batch taken in: only it says whether the worker is final, and what is open."""
    seqs: set[int] = field(default_factory=set, repr=False)
    figures_dirty: bool = field(default=False, repr=False)

    def as_dict(self) -> dict[str, object]:
        """Its entry in ``relay.json``."""
        from streamslo.results.layout import iso_utc

        def iso(t: float | None) -> str | None:
            return None if t is None else iso_utc(t)

        return {
            "worker": self.worker,
            "host": self.host,
            "tag": self.tag,
            "batches": self.batches,
            "records": self.records,
            "gaps": self.gaps,
            "bytes": self.bytes,
            "duplicates": self.duplicates,
            "rejected_records": self.rejected_records,
            "first_seen": iso(self.first_seen),
            "last_seen": iso(self.last_seen),
            "in_flight": self.in_flight,
            "final": self.final,
            "lost_at": iso(self.lost_at),
            "wait_ms_max": None if self.wait_ms_max is None else round(self.wait_ms_max, 1),
        }


def _wire_size(batch: Any) -> int:
    if not isinstance(batch, dict):
        return 0
    gaps = batch.get("gaps") or {}
    size = len(batch.get("rows") or b"") + sum(
        len(v) for v in gaps.values() if isinstance(v, (bytes, bytearray))
    )
    return size + sum(len(i) for i in gaps.get("ids") or ())


class RelayReceiver:
    """The master's side: writes the workers' batches, acknowledges them, watches for lost
    workers, and keeps ``relay.json`` and each worker's ``procs/<tag>.json``.

    Args:
        runner: Locust's master runner.
    """

    def __init__(self, runner: MasterRunner) -> None:
        self.runner = runner
        self.workers: dict[str, WorkerState] = {}
        self.writer: ResultsWriter | None = None
        self.layout: Layout | None = None
        self.ingest_s = 0.0
        """CPU seconds this process spent taking batches in (decoding, queueing, and the row
        appends a batch sets off; the gap part files are written on another thread)."""
        self._dirty = False
        self._awaited = False
        self.refused: list[dict[str, object]] = []
        """Workers refused before load (another version, a clock too far off:
        :mod:`streamslo.loadgen.admission`), for ``relay.json``."""

    def refuse(self, entry: dict[str, object]) -> None:
        """A worker was refused: it is no worker of this run (``relay.json`` names it under
        ``refused_workers``)."""
        self.workers.pop(str(entry.get("worker")), None)
        self.refused.append(entry)
        self._dirty = True

    def start(self, writer: ResultsWriter | None, layout: Layout | None) -> None:
        """A test started: write what comes to ``writer`` (None: count it only)."""
        self.writer = writer
        self.layout = layout
        self._awaited = False
        for st in self.workers.values():  # a new test (web UI): its final batches are to come
            st.final = False

    def on_connect(self, client_id: str, **_: object) -> None:
        """A worker connected (Locust's ``worker_connect``)."""
        if client_id not in self.workers:
            self.workers[client_id] = WorkerState(client_id)
            self._dirty = True

    # ------------------------------------------------------------------ batches
    def on_records(self, environment: Any = None, msg: Any = None, **_: Any) -> None:
        """A worker's batch (Locust's custom-message handler: it runs in the master's message
        loop, so it only queues the batch for the writer and never waits)."""
        t = time.thread_time()  # CPU, not waiting: what a master spends per record
        cid, data = str(msg.node_id), msg.data
        if not isinstance(data, dict) or not isinstance(data.get("seq"), int):
            log.error(
                "streamslo: a records message from %s without a sequence number was ignored", cid
            )
            return
        st = self.workers.setdefault(cid, WorkerState(cid))
        seq = data["seq"]
        now = time.time()
        st.last_seen = now
        st.first_seen = st.first_seen or now
        if seq in st.seqs:
            st.duplicates += 1
            self._ack(cid, seq)
            return
        st.seqs.add(seq)
        st.batches += 1
        st.tag = str(data.get("tag") or st.tag)
        st.host = str(data.get("host") or st.host)
        try:
            batch = RecordBatch.from_wire(data.get("batch"))
        except ValueError as exc:
            n = (data.get("batch") or {}).get("n") if isinstance(data.get("batch"), dict) else None
            st.rejected_records += n if isinstance(n, int) else 0
            log.error(
                "streamslo: batch %d from worker %s could not be read (%s); its records are lost",
                seq,
                cid,
                exc,
            )
        else:
            if self.writer is not None:
                self.writer.ingest(batch)
            st.records += len(batch)
            st.gaps += len(batch.gaps)
            st.bytes += _wire_size(data.get("batch"))
        if isinstance(data.get("oldest"), (int, float)):
            wait = (now - data["oldest"]) * 1000.0
            st.wait_ms_max = wait if st.wait_ms_max is None else max(st.wait_ms_max, wait)
        if seq > st.last_seq:  # not an older batch sent again: it says how the worker is now
            st.last_seq = seq
            st.final = bool(data.get("final"))
            if isinstance(data.get("in_flight"), int):
                st.in_flight = data["in_flight"]
            if isinstance(data.get("figures"), dict):
                st.figures = data["figures"]
                st.figures_dirty = True
        if st.lost_at is not None:
            log.warning("streamslo: worker %s, marked lost, is sending again", cid)
            st.lost_at = None
        self._dirty = True
        self._ack(cid, seq)
        self.ingest_s += time.thread_time() - t

    def _ack(self, cid: str, seq: int) -> None:
        try:
            self.runner.send_message(ACK, {"seq": seq}, client_id=cid)
        except Exception as exc:  # the worker sends the batch again; it is skipped then
            log.warning(
                "streamslo: could not acknowledge batch %d of worker %s (%s)", seq, cid, exc
            )

    # ------------------------------------------------------------ lost workers
    def _state_of(self, cid: str) -> str | None:
        client = self.runner.clients.get(cid)
        return None if client is None else str(client.state)

    def poll(self) -> None:
        """Mark workers that Locust sees missing (before their final batch) as lost; save
        ``relay.json`` and the workers' figures when something changed."""
        from locust.runners import STATE_MISSING

        for cid, st in self.workers.items():
            if not st.final and st.lost_at is None and self._state_of(cid) == STATE_MISSING:
                st.lost_at = time.time()
                self._dirty = True
                log.error(
                    "streamslo: worker %s (%s) is lost: no heartbeat; its %s streams in flight "
                    "and those that ended after %s are not in the results",
                    cid,
                    st.host,
                    st.in_flight if st.in_flight is not None else "unknown",
                    _iso(st.last_seen),
                )
        self.save()

    def lost(self) -> list[dict[str, object]]:
        """``lost_workers``: each lost worker, when it was lost, last heard from, and its
        streams in flight then."""
        return [
            {
                "worker": st.worker,
                "host": st.host,
                "tag": st.tag,
                "at": _iso(st.lost_at),
                "last_seen": _iso(st.last_seen),
                "streams_in_flight": st.in_flight,
                "records": st.records,
            }
            for st in self.workers.values()
            if st.lost_at is not None and not st.final
        ]

    def await_final(self, timeout: float) -> None:
        """At the end of a test: ask every worker still running for its final batch, and wait
        until each has sent it, is lost, or ``timeout`` has passed.

        Does nothing when called from one of the runner's own greenlets (its message loop
        cannot take batches in while it waits), or a second time in one test.
        """
        import gevent.pool

        group = getattr(self.runner, "greenlet", None)
        if self._awaited or (isinstance(group, gevent.pool.Group) and gevent.getcurrent() in group):
            return
        self._awaited = (
            True  # once per test: a second call (quitting after test_stop) has nothing to wait for
        )
        from locust.runners import STATE_MISSING

        asked: set[str] = set()
        deadline = time.monotonic() + timeout
        left_at: dict[str, float] = {}
        while True:
            self.poll()
            waiting = []
            for cid, st in self.workers.items():
                state = self._state_of(cid)
                if st.final or st.lost_at is not None or state == STATE_MISSING:
                    continue
                if state is None:  # it left (quit): its final batch is right behind
                    if not st.batches:
                        continue
                    if time.monotonic() - left_at.setdefault(cid, time.monotonic()) > LEFT_GRACE_S:
                        continue
                elif cid not in asked:
                    asked.add(cid)
                    try:
                        self.runner.send_message(FINISH, {}, client_id=cid)
                    except Exception as exc:
                        log.warning(
                            "streamslo: could not ask worker %s for its last streams (%s)", cid, exc
                        )
                waiting.append(cid)
            if not waiting:
                return
            if time.monotonic() >= deadline:
                log.error(
                    "streamslo: %d workers did not send their last streams within %.0f s: %s",
                    len(waiting),
                    timeout,
                    ", ".join(waiting),
                )
                return
            gevent.sleep(0.05)

    # ------------------------------------------------------------------- files
    def save(self) -> None:
        """Write ``relay.json`` and the workers' ``procs/<tag>.json`` if they changed."""
        if self.layout is None:
            return
        from streamslo.results.layout import write_json

        try:
            for st in self.workers.values():
                if st.figures_dirty and st.figures is not None and st.tag:
                    self.layout.procs_dir.mkdir(parents=True, exist_ok=True)
                    write_json(
                        self.layout.proc_json(st.tag),
                        {**st.figures, "tag": st.tag, "worker": st.worker, "host": st.host},
                    )
                    st.figures_dirty = False
            if self._dirty:
                write_json(self.layout.relay_json, self.summary())
                self._dirty = False
        except OSError as exc:  # a full disk: tried again at the next poll
            log.warning("streamslo: could not write %s (%s)", self.layout.relay_json, exc)

    def summary(self) -> dict[str, object]:
        """``relay.json``: totals, every worker, and the lost ones."""
        ws = list(self.workers.values())
        records = sum(w.records for w in ws)
        return {
            "workers": len(ws),
            "batches": sum(w.batches for w in ws),
            "records": records,
            "bytes": sum(w.bytes for w in ws),
            "duplicates": sum(w.duplicates for w in ws),
            "rejected_records": sum(w.rejected_records for w in ws),
            "master_ingest_us_per_record": round(self.ingest_s / records * 1e6, 2)
            if records
            else None,
            "lost_workers": self.lost(),
            "refused_workers": list(self.refused),
            "per_worker": [w.as_dict() for w in ws],
        }


def _iso(t: float | None) -> str | None:
    from streamslo.results.layout import iso_utc

    return None if t is None else iso_utc(t)


class Relaying(Protocol):
    """What the relay needs of a process's recorder (:class:`streamslo.loadgen.recorder.RunRecorder`,
    which imports this module, not the other way round)."""

    def attach_receiver(self, runner: MasterRunner) -> RelayReceiver:
        """This process is a Locust master: it writes what its workers send."""
        ...

    def attach_sender(self, runner: WorkerRunner) -> RelaySender:
        """This process is a Locust worker: its streams go to the master through ``runner``."""
        ...

    def finish_now(self) -> None:
        """A worker, asked by its master for its last streams."""
        ...


def install(events: Any, get_recorder: Callable[[Environment], Relaying]) -> None:
    """Register the relay's listeners on Locust's events (called once by
    :func:`streamslo.loadgen.hooks.install`, with its ``get_recorder``): at init, the master
    takes batches in and the workers take acknowledgements and finish requests."""
    from locust.runners import MasterRunner, WorkerRunner

    def _init(environment: Any, runner: Any = None, **_: Any) -> None:
        if isinstance(runner, MasterRunner):
            receiver = get_recorder(environment).attach_receiver(runner)
            runner.register_message(RECORDS, receiver.on_records)
            environment.events.worker_connect.add_listener(receiver.on_connect)
        elif isinstance(runner, WorkerRunner):
            recorder = get_recorder(environment)
            sender = recorder.attach_sender(runner)
            runner.register_message(ACK, sender.on_ack)
            # Concurrent: stopping the users waits for them (--stop-timeout), and the worker's
            # message loop must go on meanwhile.
            runner.register_message(
                FINISH, lambda environment, msg, **_: recorder.finish_now(), concurrent=True
            )

    events.init.add_listener(_init)
