"""The stream user base class: one task, one stream at a time, measured by the shared core.

A user holds one stream open at a time (closed loop); hundreds of users hold hundreds of
streams. With ``--turns N`` each task is a conversation of N streams, one after another.
Subclasses only say which transport and whether they read slowly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, ClassVar

import gevent
from locust import User, task
from locust.exception import StopUser

from streamslo.loadgen.backoff import PACER, UserBackoff
from streamslo.loadgen.recorder import RunRecorder, get_recorder
from streamslo.stream.dialects import EVENT_APIS, tracker_for
from streamslo.stream.timing import StreamExpectations, StreamRecord
from streamslo.stream.tracker import StreamTracker
from streamslo.transport.sync import ClientLimits, SSEConnection, WSConnection, stream_sse
from streamslo.workload.requests import WS_PATH, Turn, Workload, build_body

if TYPE_CHECKING:
    from locust.env import Environment

__all__ = ["StreamUser", "run_conversation", "run_one_stream"]


def run_one_stream(
    recorder: RunRecorder,
    protocol: str,
    user_class: str,
    limits: ClientLimits,
    ws: WSConnection | None = None,
    scheduled_at: float | None = None,
    sse: SSEConnection | None = None,
    turn: Turn | None = None,
    history: Sequence[tuple[str, str]] = (),
    conversation: tuple[str, int] | None = None,
    collect_text: bool = False,
    scenario: str | None = None,
) -> tuple[StreamRecord, str]:
    """Run one request to its end and record it (also when the run cancels it).

    Args:
        recorder: the process's recorder.
        protocol: ``sse`` or ``ws``.
        user_class: the label for ``streams.csv``.
        limits: timeouts and read behaviour.
        ws: the WebSocket connection to use (``ws`` only; reused between requests).
        scheduled_at: open loop: when the arrival process scheduled this request.
        sse: the HTTP connection to use (``sse`` only; kept alive between requests).
        turn: the user message and ``max_tokens`` (default: the workload's next single turn).
        history: the conversation's earlier (user, assistant) exchanges.
        conversation: (conversation id, turn number) of a multi-turn run.
        collect_text: keep the answer's text (the next turn sends it back).
        scenario: the ``[scenarios.NAME]`` the stream belongs to (its ``scenario`` column).

    Returns:
        The record, and the answer's text (empty unless ``collect_text``).
    """
    req = recorder.request
    if turn is None:
        turn = recorder.workload.next().turns[0]
    body = build_body(req, turn.prompt, history=history, max_tokens=turn.max_tokens)
    rec = recorder.new_record(protocol, user_class, scheduled_at)
    rec.scenario = scenario
    if conversation is not None:
        rec.conversation_id, rec.turn = conversation
    expect = req.expectations(turn.max_tokens)
    after_s, after_tokens = recorder.cancel_draw()
    if after_s is not None or after_tokens is not None:
        expect = replace(expect, cancel_after_s=after_s, cancel_after_tokens=after_tokens)
    tracker = _tracker(recorder, protocol, rec, expect, limits, collect_text)
    try:
        _send(recorder, protocol, body, tracker, limits, ws, sse)
    finally:
        recorder.finish(rec)
    return rec, "".join(tracker.text or ())


def _tracker(
    recorder: RunRecorder,
    protocol: str,
    rec: StreamRecord,
    expect: StreamExpectations,
    limits: ClientLimits,
    collect_text: bool,
) -> StreamTracker:
    """The tracker for the run's dialect and this protocol (chosen once per request)."""
    dialect = recorder.request.dialect
    if dialect in EVENT_APIS:  # typed events: chosen here, once, off the chat path
        return tracker_for(dialect, rec, expect, limits.max_event_bytes, collect_text)
    if protocol == "ws":
        return recorder.opts.envelope.tracker(rec, expect, limits.max_event_bytes, collect_text)
    return StreamTracker(rec, expect, limits.max_event_bytes, collect_text)


def _send(
    recorder: RunRecorder,
    protocol: str,
    body: bytes,
    tracker: StreamTracker,
    limits: ClientLimits,
    ws: WSConnection | None,
    sse: SSEConnection | None,
) -> None:
    """Send one request and read its stream to the end over the user's connection (a new one
    when it has none)."""
    if protocol == "ws":
        conn = ws if ws is not None else WSConnection(recorder.target, WS_PATH, limits)
        try:
            conn.request(recorder.opts.envelope.wrap(body), tracker)
        finally:
            if ws is None:
                conn.close()
    elif sse is not None:
        sse.request(recorder.request.path, body, tracker)
    else:
        stream_sse(recorder.target, recorder.request.path, body, tracker, limits)


def run_conversation(
    recorder: RunRecorder,
    protocol: str,
    user_class: str,
    limits: ClientLimits,
    ws: WSConnection | None = None,
    scheduled_at: float | None = None,
    sse: SSEConnection | None = None,
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
    plan = (workload or recorder.workload).next()
    if len(plan.turns) == 1:
        return [
            run_one_stream(
                recorder,
                protocol,
                user_class,
                limits,
                ws,
                scheduled_at,
                sse,
                plan.turns[0],
                scenario=scenario,
            )[0]
        ]
    cid = recorder.new_conversation_id()
    history: list[tuple[str, str]] = []
    records: list[StreamRecord] = []
    last = len(plan.turns)
    for i, turn in enumerate(plan.turns, 1):
        rec, answer = run_one_stream(
            recorder,
            protocol,
            user_class,
            limits,
            ws,
            scheduled_at if i == 1 else None,
            sse,
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


class StreamUser(User):
    """Holds one stream at a time against an OpenAI-compatible streaming server."""

    abstract = True
    protocol: ClassVar[str] = "sse"
    """``sse`` or ``ws``."""
    slow: ClassVar[bool] = False
    """Read slowly, so the server feels back-pressure."""

    def __init__(self, environment: Environment) -> None:
        super().__init__(environment)
        self.recorder = get_recorder(environment)
        opts = self.recorder.opts
        self.limits = opts.slow_limits if self.slow else opts.limits
        self._think = opts.think_time
        self._ws: WSConnection | None = None
        self._sse: SSEConnection | None = None
        self._backoff = UserBackoff(PACER, gevent.sleep)

    def wait_time(self) -> float:
        return self._think

    @task
    def stream(self) -> None:
        if self.recorder.load_over:
            raise StopUser  # the load's time is up: no new stream while Locust stops the users
        if self.protocol == "ws" and self._ws is None:
            self._ws = WSConnection(self.recorder.target, WS_PATH, self.limits)
        if self.protocol == "sse" and self._sse is None:
            self._sse = SSEConnection(self.recorder.target, self.limits)
        self._backoff.before()  # while the server gives no answer: the process's pace
        if self.recorder.load_over:
            raise StopUser  # the load ended while this user waited for its slot
        records = run_conversation(
            self.recorder, self.protocol, type(self).__name__, self.limits, self._ws, sse=self._sse
        )
        self._backoff.after(records)

    def on_stop(self) -> None:
        for conn in (self._ws, self._sse):
            if conn is not None:
                conn.close()
        self._ws = self._sse = None
