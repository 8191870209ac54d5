"""Agentic sessions on the load: each step a stream, started when its parents have ended and
its tool (or think) time has passed, with the context its ancestors built (docs/workloads.md,
"Agentic sessions").

:func:`run_session` runs one session: a greenlet a step, each waiting on its parents' ends.
A step's prompt is the session's system prompt, then every ancestor's input and its reply *as
it streamed* (a reply cut short goes on cut short), then its own new input; sibling branches
(subagents) run at once, a join waits for all its parents. A step's ``scheduled_at`` is the
moment its dependencies allowed it (the last parent's end plus its wait), so its schedule lag
(``streams.csv``) is the generator's lateness alone, never the server's. A step that did not end
``ok`` ends its session (``--on-broken-step abort``: no later step is sent, and the session
counts as broken) or not (``continue``).

The Locust user is :class:`streamslo.loadgen.session_user.SessionUser`; nothing here needs
Locust (a test runs sessions over the in-memory transport).
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import gevent
import gevent.event

from streamslo.loadgen.streams import Connection, StreamSource, run_one_stream
from streamslo.stream.timing import StreamRecord, Wire
from streamslo.transport.common import ClientLimits
from streamslo.workload.prefix import TracePrompts
from streamslo.workload.requests import Turn
from streamslo.workload.sessions import Session, Step
from streamslo.workload.trace import TraceRequest

__all__ = ["SessionPlan", "StepText", "run_session"]


class StepText:
    """The text of a step's new input: its ``hash_ids`` blocks (shared with every step that
    names them: a prefix cache sees them), then text of its own to its length."""

    def __init__(self, prompts: TracePrompts) -> None:
        self._prompts = prompts

    def __call__(self, session: Session, step: Step) -> str:
        if step.text is not None:
            return step.text
        index = zlib.crc32(f"{session.id}\0{step.id}".encode())
        return self._prompts.prompt(
            TraceRequest(index, 0.0, step.input_tokens, step.output_tokens or 1, step.hash_ids)
        )


@dataclass(frozen=True)
class SessionPlan:
    """How a session's steps are sent (the run's options for sessions)."""

    protocol: Wire
    limits: ClientLimits
    text: Callable[[Session, Step], str]
    """A step's new input's text."""
    user_class: str = "SessionUser"
    abort_on_broken: bool = True
    scenario: str | None = None
    header: str = ""
    """A header naming the session on each of its connections (empty: none)."""
    tools: str = "auto"
    """What a tool step offers: ``auto``, ``none`` (``tool_choice: "none"``) or ``off``."""


class _SessionRun:
    """One session in flight: its steps' ends, replies, connections and records."""

    def __init__(
        self, source: StreamSource, session: Session, plan: SessionPlan, t0: float, arrived: bool
    ) -> None:
        self.source, self.session, self.plan = source, session, plan
        self.t0, self.arrived = t0, arrived
        self.epoch0 = time.time() - time.perf_counter()
        self.headers = {plan.header: session.id} if plan.header else None
        self.idle: list[Connection] = []
        self.ended = {s.id: gevent.event.Event() for s in session.steps}
        self.end_t: dict[str, float] = {}
        self.inputs = {s.id: plan.text(session, s) for s in session.steps}
        self.replies: dict[str, str] = {}
        self.broken = False
        self.records: list[StreamRecord] = []

    def step(self, step: Step) -> None:
        """One step's greenlet: wait for its parents and its wait, send it, hand its end on."""
        try:
            for p in step.parents:
                self.ended[p].wait()
            if self.broken and self.plan.abort_on_broken:
                return
            ready = max((self.end_t[p] for p in step.parents), default=self.t0) + step.wait_s
            delay = ready - time.perf_counter()
            if delay > 0:
                gevent.sleep(delay)
            rec, answer = self._send(step, ready)
            self.replies[step.id] = answer
            self.records.append(rec)
            if rec.outcome != "ok":
                self.broken = True
        finally:
            self.end_t[step.id] = time.perf_counter()
            self.ended[step.id].set()

    def _send(self, step: Step, ready: float) -> tuple[StreamRecord, str]:
        session, plan, source = self.session, self.plan, self.source
        history = [(self.inputs[a], self.replies.get(a, "")) for a in session.ancestors(step.id)]
        tools = plan.tools if step.tool and plan.tools != "off" else ""
        turn = Turn(self.inputs[step.id], step.output_tokens or source.request.max_tokens, tools)

        def tag(rec: StreamRecord) -> None:
            rec.session_id, rec.step_id = session.id, step.id
            rec.depth = session.depth(step.id)
            rec.wait_s = step.wait_s if step.parents else None
            rec.session_steps = len(session.steps)
            rec.parent_ids = ";".join(step.parents) or None

        idle = self.idle
        conn = (
            idle.pop()
            if idle
            else source.transport.open(plan.protocol, plan.limits, True, self.headers)
        )
        try:
            out = run_one_stream(
                source,
                plan.protocol,
                plan.user_class,
                plan.limits,
                conn,
                scheduled_at=self.epoch0 + ready if step.parents or self.arrived else None,
                turn=turn,
                history=history,
                collect_text=True,
                scenario=plan.scenario,
                tag=tag,
            )
        except BaseException:
            conn.close()  # the run stopped the step mid-stream: its connection is done
            raise
        idle.append(conn)
        return out


def run_session(
    source: StreamSource,
    session: Session,
    plan: SessionPlan,
    arrived_at: float | None = None,
) -> list[StreamRecord]:
    """Run every step of ``session`` as its dependencies allow; returns the records of the steps
    sent, in the order they ended.

    The session's steps share its connections: a step takes an idle one (the last step's, in a
    chain) or opens one, and gives it back when it ends, so a chain runs on one connection and
    each concurrent branch on its own, each with the plan's header naming the session (a router
    keeps the session on one replica). ``arrived_at``: when an arrival schedule had the session
    arrive (``perf_counter``): its root steps are scheduled then, and their schedule lag
    measured from it.
    """
    t0 = time.perf_counter() if arrived_at is None else arrived_at
    run = _SessionRun(source, session, plan, t0, arrived_at is not None)
    greenlets = [gevent.spawn(run.step, s) for s in session.steps]
    try:
        gevent.joinall(greenlets, raise_error=True)
    finally:
        gevent.killall([g for g in greenlets if not g.dead], block=True)
        for c in run.idle:
            c.close()
    return run.records
