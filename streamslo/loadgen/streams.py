"""Where a process's streams come from: records, ids and clocks, the client's hang-ups, each
request's tracker, and the connection that carries it (the transport seam).

A :class:`StreamSource` is everything :func:`streamslo.loadgen.base.run_conversation` needs to run
streams; the process's :class:`~streamslo.loadgen.recorder.RunRecorder` owns one and hands every
finished stream on. Nothing here needs Locust: give a source a :class:`FixedTarget` and a
:class:`~streamslo.loadgen.memory.MemoryTransport` and the stream users' code runs in a plain
test, through the real exchange, tracker and dialect objects.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Protocol

from streamslo.errors import BadInputError, ProtocolError
from streamslo.loadgen.options import LoadOptions
from streamslo.options.cancel import CancelPlan
from streamslo.stream.chunkjson import loads_chunk
from streamslo.stream.dialects import EVENT_APIS, tracker_for
from streamslo.stream.timing import StreamExpectations, StreamRecord, Wire
from streamslo.stream.tracker import StreamTracker
from streamslo.transport.fetch import fetch
from streamslo.transport.sync import ClientLimits, SSEConnection, Target, WSConnection
from streamslo.workload.engines import adapt_request
from streamslo.workload.references import References
from streamslo.workload.requests import (
    WS_PATH,
    RequestOptions,
    Turn,
    Workload,
    build_body,
    first_model_id,
    first_model_owner,
)

__all__ = [
    "Connection",
    "FixedTarget",
    "SocketTransport",
    "StreamSource",
    "TargetResolver",
    "Transport",
    "run_conversation",
    "run_one_stream",
]

log = logging.getLogger(__name__)


# ------------------------------------------------------------------------- the transport seam
class Connection(Protocol):
    """One user's connection: one request at a time, read to its end into the tracker."""

    def request(self, body: bytes, tracker: StreamTracker) -> None:
        """Send one request body and read its stream to the end (never raises for what the
        server does; only cancellation propagates)."""

    def close(self) -> None:
        """Close it (a later request opens a new one)."""


class Transport(Protocol):
    """Opens the connections of one protocol for the stream users."""

    def open(
        self,
        protocol: Wire,
        limits: ClientLimits,
        keep_alive: bool,
        headers: Mapping[str, str] | None = None,
    ) -> Connection:
        """A connection for ``protocol`` (``sse`` or ``ws``); ``keep_alive`` False: one request
        and done; ``headers``: more headers on its every request (WebSocket: its handshake),
        such as a session's routing header."""


class _SSE:
    """An SSE connection to one path (the run's dialect's)."""

    def __init__(self, conn: SSEConnection, path: str) -> None:
        self._conn = conn
        self._path = path

    def request(self, body: bytes, tracker: StreamTracker) -> None:
        self._conn.request(self._path, body, tracker)

    def close(self) -> None:
        self._conn.close()


class _WS:
    """A WebSocket connection whose request frames are wrapped in the run's envelope."""

    def __init__(self, conn: WSConnection, wrap: Callable[[bytes], bytes]) -> None:
        self._conn = conn
        self._wrap = wrap

    def request(self, body: bytes, tracker: StreamTracker) -> None:
        self._conn.request(self._wrap(body), tracker)

    def close(self) -> None:
        self._conn.close()


class SocketTransport:
    """Real sockets (:mod:`streamslo.transport.sync`): the run's target, path and envelope."""

    def __init__(self, source: StreamSource) -> None:
        self._source = source

    def open(
        self,
        protocol: Wire,
        limits: ClientLimits,
        keep_alive: bool,
        headers: Mapping[str, str] | None = None,
    ) -> Connection:
        src = self._source
        target = src.target
        if headers:
            target = replace(target, headers={**target.headers, **headers})
        if protocol == Wire.WS:
            return _WS(WSConnection(target, WS_PATH, limits), src.opts.envelope.wrap)
        return _SSE(SSEConnection(target, limits, keep_alive), src.request.path)


# --------------------------------------------------------------------------- the target
def _first_model(target: Target) -> tuple[str | None, str | None]:
    """The first model of ``/v1/models`` and who serves it (``owned_by``: vLLM says ``vllm``);
    None for what the server does not say.

    Asked over the client's own transport: no redirect is followed (the API key never goes
    to another host), the answer is capped in size and time, and its JSON in depth.
    """
    url = f"{target.scheme}://{target.host_header}{target.prefix}/v1/models"
    try:
        status, body = fetch(target, "/v1/models")
        if status != 200:
            log.warning("could not list models at %s (HTTP %d); sending no model name", url, status)
            return None, None
        listing = loads_chunk(body.decode("utf-8", "replace"))
        return first_model_id(listing), first_model_owner(listing)
    except (OSError, ProtocolError, ValueError) as exc:
        log.warning("could not list models at %s (%s); sending no model name", url, exc)
    return None, None


class TargetResolver:
    """The run's target and its request options with the model resolved (the first of
    ``/v1/models`` by default) and adapted to the engine that serves it (docs/servers.md).

    Args:
        host: the base URL (Locust's ``--host``), asked when first needed.
        opts: the process's options.
    """

    def __init__(self, host: Callable[[], str], opts: LoadOptions) -> None:
        self._host = host
        self.opts = opts
        self._target: Target | None = None
        self._request: RequestOptions | None = None
        self._lock = threading.Lock()

    @property
    def target(self) -> Target:
        if self._target is None:
            host = self._host()
            if not host:
                raise BadInputError("no --host given")
            self._target = Target.from_url(host, self.opts.headers.as_dict(), self.opts.insecure)
        return self._target

    @property
    def request(self) -> RequestOptions:
        """Request options with the model resolved and adapted to the engine."""
        if self._request is None:
            with self._lock:  # the first users arrive together: ask /v1/models once
                if self._request is None:
                    req = self.opts.request
                    owner: str | None = None
                    if req.model is None or req.token_ids == "auto":
                        model, owner = _first_model(self.target)
                        if req.model is None and model is not None:
                            req = replace(req, model=model)
                    # The engine's own per-chunk count (vLLM's token ids, llama.cpp's timings),
                    # and what its dialect ignores: docs/servers.md.
                    adapted = adapt_request(req, owner)
                    for note in adapted.notes:
                        log.warning("%s", note)
                    self._request = adapted.request
        return self._request


class FixedTarget:
    """A target and request options given as they are (no ``/v1/models``): for tests and for
    callers that resolved them already."""

    def __init__(self, target: Target, request: RequestOptions) -> None:
        self.target = target
        self.request = request


class _Resolves(Protocol):
    @property
    def target(self) -> Target: ...

    @property
    def request(self) -> RequestOptions: ...


# ------------------------------------------------------------------------------ the source
class StreamSource:
    """Everything a stream user needs to run streams, and where each finished one goes.

    Args:
        opts: the process's options.
        resolver: the target and request options (:class:`TargetResolver`, :class:`FixedTarget`).
        finished: called with each finished stream (the recorder queues it).
        transport: opens connections (default: real sockets).
        worker_index: this process's index among Locust's workers (seeds the hang-ups).
    """

    def __init__(
        self,
        opts: LoadOptions,
        resolver: _Resolves,
        finished: Callable[[StreamRecord], None],
        transport: Transport | None = None,
        worker_index: Callable[[], int] = lambda: 0,
    ) -> None:
        self.opts = opts
        self.resolver = resolver
        self.workload = Workload(opts)
        self.references = References.from_json(opts.reference_replies)
        """The idle server's reply to each prompt (``--reference replies``; empty: none)."""
        self.transport: Transport = transport or SocketTransport(self)
        self.tag = f"p{id(self) & 0xFFFFFF:06x}"
        """The start of this process's stream ids (the results writer's tag)."""
        self.in_flight = 0
        """Streams started and not yet finished."""
        self.first_request_t: float | None = None
        """perf_counter() when this process started its first request (the load's start)."""
        self.load_over = False
        """The load's time is up (``--load-time``): users start no new stream."""
        self._finished = finished
        self._worker_index = worker_index
        self._seq = itertools.count(1)
        self._conversations = itertools.count(1)
        self._cancel_plan: CancelPlan | None = None

    @property
    def target(self) -> Target:
        return self.resolver.target

    @property
    def request(self) -> RequestOptions:
        return self.resolver.request

    def new_record(
        self, protocol: Wire, user_class: str, scheduled_at: float | None = None
    ) -> StreamRecord:
        """A fresh record whose clock starts now."""
        self.in_flight += 1
        if self.first_request_t is None:
            self.first_request_t = time.perf_counter()
        return StreamRecord(
            stream_id=f"{self.tag}-{next(self._seq)}",
            protocol=protocol,
            user_class=user_class,
            started_at=time.time(),
            t0=time.perf_counter(),
            scheduled_at=scheduled_at,
        )

    def tracker(
        self,
        protocol: Wire,
        rec: StreamRecord,
        expect: StreamExpectations,
        limits: ClientLimits,
        collect_text: bool,
    ) -> StreamTracker:
        """The tracker for the run's dialect and this protocol (chosen once per request), with
        ``--cancel-rate``'s hang-up drawn for it."""
        after_s, after_tokens = self._cancel_draw()
        if after_s is not None or after_tokens is not None:
            expect = replace(expect, cancel_after_s=after_s, cancel_after_tokens=after_tokens)
        dialect = self.request.dialect
        if dialect in EVENT_APIS:  # typed events: chosen here, once, off the chat path
            return tracker_for(dialect, rec, expect, limits.max_event_bytes, collect_text)
        if protocol == Wire.WS:
            return self.opts.envelope.tracker(rec, expect, limits.max_event_bytes, collect_text)
        return StreamTracker(rec, expect, limits.max_event_bytes, collect_text)

    def finish(self, rec: StreamRecord) -> None:
        """A stream ended (whatever its outcome): hand it on."""
        self.in_flight -= 1
        self._finished(rec)

    def new_conversation_id(self) -> str:
        """A conversation id unique across processes (multi-turn runs)."""
        return f"{self.tag}-c{next(self._conversations)}"

    def _cancel_draw(self) -> tuple[float | None, int | None]:
        """``--cancel-rate``: when the client hangs up on the next stream, (seconds, content
        chunks), or (None, None) to let it finish. Seeded by the run's seed and the process."""
        opts = self.opts
        if opts.cancel_rate <= 0:
            return None, None
        plan = self._cancel_plan
        if plan is None or plan.after.spec() != opts.cancel_after or plan.rate != opts.cancel_rate:
            seed = opts.seed * 1_000_003 + 7919 * self._worker_index() + 17
            plan = self._cancel_plan = CancelPlan(opts.cancel_rate, opts.cancel_after, seed)
        return plan.draw()


# ------------------------------------------------------------------------------ streams
def run_one_stream(
    source: StreamSource,
    protocol: Wire,
    user_class: str,
    limits: ClientLimits,
    conn: Connection | None = None,
    scheduled_at: float | None = None,
    turn: Turn | None = None,
    history: Sequence[tuple[str, str]] = (),
    conversation: tuple[str, int] | None = None,
    collect_text: bool = False,
    scenario: str | None = None,
    tag: Callable[[StreamRecord], None] | None = None,
) -> tuple[StreamRecord, str]:
    """Run one request to its end and hand it on (also when the run cancels it).

    Args:
        source: the process's source of streams (:attr:`RunRecorder.source`).
        protocol: ``sse`` or ``ws``.
        user_class: the label for ``streams.csv``.
        limits: timeouts and read behaviour.
        conn: the user's connection of this protocol (kept between requests); None: a
            connection of its own, closed after it.
        scheduled_at: open loop: when the arrival process scheduled this request.
        turn: the user message and ``max_tokens`` (default: the workload's next single turn).
        history: the conversation's earlier (user, assistant) exchanges.
        conversation: (conversation id, turn number) of a multi-turn run.
        collect_text: keep the answer's text (the next turn sends it back).
        scenario: the ``[scenarios.NAME]`` the stream belongs to (its ``scenario`` column).
        tag: fills in more of the record before the request is sent (a session's step).

    Returns:
        The record, and the answer's text (empty unless ``collect_text``).
    """
    req = source.request
    if turn is None:
        turn = source.workload.next().turns[0]
    body = build_body(
        req, turn.prompt, history=history, max_tokens=turn.max_tokens, tools=turn.tools
    )
    rec = source.new_record(protocol, user_class, scheduled_at)
    rec.scenario = scenario
    if conversation is not None:
        rec.conversation_id, rec.turn = conversation
    if tag is not None:
        tag(rec)
    expect = req.expectations(turn.max_tokens)
    if source.references and not history:
        reference = source.references.get(turn.prompt)
        if reference is not None:
            expect = replace(expect, reference=reference)
            collect_text = True
    tracker = source.tracker(protocol, rec, expect, limits, collect_text)
    try:
        if conn is not None:
            conn.request(body, tracker)
        else:
            own = source.transport.open(protocol, limits, keep_alive=False)
            try:
                own.request(body, tracker)
            finally:
                own.close()
    finally:
        source.finish(rec)
    return rec, "".join(tracker.text or ())


def run_conversation(
    source: StreamSource,
    protocol: Wire,
    user_class: str,
    limits: ClientLimits,
    conn: Connection | None = None,
    scheduled_at: float | None = None,
    scenario: str | None = None,
    workload: Workload | None = None,
) -> list[StreamRecord]:
    """Run the workload's next conversation: one request, or ``--turns`` requests one after
    another, each carrying the earlier turns and the answers as they streamed. A turn that
    does not end ``ok`` ends the conversation (its history would be wrong).

    ``scenario`` tags every stream; ``workload`` (a scenario's own lengths) replaces the run's.

    Returns:
        The record of each turn sent.
    """
    plan = (workload or source.workload).next()
    if len(plan.turns) == 1:
        return [
            run_one_stream(
                source,
                protocol,
                user_class,
                limits,
                conn,
                scheduled_at,
                plan.turns[0],
                scenario=scenario,
            )[0]
        ]
    cid = source.new_conversation_id()
    history: list[tuple[str, str]] = []
    records: list[StreamRecord] = []
    last = len(plan.turns)
    for i, turn in enumerate(plan.turns, 1):
        rec, answer = run_one_stream(
            source,
            protocol,
            user_class,
            limits,
            conn,
            scheduled_at if i == 1 else None,
            turn,
            history,
            (cid, i),
            collect_text=i < last,
            scenario=scenario,
        )
        records.append(rec)
        if rec.outcome != "ok":
            break
        history.append((turn.prompt, answer))
    return records
