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

import gevent
import gevent.event

from streamslo.loadgen.streams import Connection, StreamSource, run_one_stream
from streamslo.stream.timing import StreamRecord
from streamslo.transport.common import ClientLimits
from streamslo.workload.prefix import TracePrompts
from streamslo.workload.requests import Turn
from streamslo.workload.sessions import Session, Step
from streamslo.workload.trace import TraceRequest

__all__ = ["StepText", "run_session"]


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


def run_session(
    source: StreamSource,
    session: Session,
    protocol: str,
    limits: ClientLimits,
    text: Callable[[Session, Step], str],
    user_class: str = "SessionUser",
    abort_on_broken: bool = True,
    scenario: str | None = None,
    header: str = "",
    arrived_at: float | None = None,
    tools: str = "auto",
) -> list[StreamRecord]:
    """Run every step of ``session`` as its dependencies allow; returns the records of the steps
    sent, in the order they ended.

    The session's steps share its connections: a step takes an idle one (the last step's, in a
    chain) or opens one, and gives it back when it ends, so a chain runs on one connection and
    each concurrent branch on its own. ``header``: a header naming the session on each of them
    (its value the session's id), so a router can keep the session on one replica.
    ``arrived_at``: when an arrival schedule had the session arrive (``perf_counter``): its root
    steps are scheduled then, and their schedule lag measured from it. ``tools``: what a tool
    step offers (``auto``, ``none``: the tool with ``tool_choice: "none"``, ``off``: nothing).
    """
    t0 = time.perf_counter() if arrived_at is None else arrived_at
    headers = {header: session.id} if header else None
    idle: list[Connection] = []
    epoch0 = time.time() - t0
    ended = {s.id: gevent.event.Event() for s in session.steps}
    end_t: dict[str, float] = {}
    inputs = {s.id: text(session, s) for s in session.steps}
    replies: dict[str, str] = {}
    broken = [False]
    records: list[StreamRecord] = []

    def step_run(step: Step) -> None:
        try:
            for p in step.parents:
                ended[p].wait()
            if broken[0] and abort_on_broken:
                return
            ready = max((end_t[p] for p in step.parents), default=t0) + step.wait_s
            delay = ready - time.perf_counter()
            if delay > 0:
                gevent.sleep(delay)
            history = [(inputs[a], replies.get(a, "")) for a in session.ancestors(step.id)]
            turn = Turn(
                inputs[step.id],
                step.output_tokens or source.request.max_tokens,
                tools=tools if step.tool and tools != "off" else "",
            )

            def tag(rec: StreamRecord) -> None:
                rec.session_id, rec.step_id = session.id, step.id
                rec.depth = session.depth(step.id)
                rec.wait_s = step.wait_s if step.parents else None
                rec.session_steps = len(session.steps)

            conn = idle.pop() if idle else source.transport.open(protocol, limits, True, headers)
            try:
                rec, answer = run_one_stream(
                    source,
                    protocol,
                    user_class,
                    limits,
                    conn,
                    scheduled_at=epoch0 + ready if step.parents or arrived_at else None,
                    turn=turn,
                    history=history,
                    collect_text=True,
                    scenario=scenario,
                    tag=tag,
                )
            except BaseException:
                conn.close()  # the run stopped the step mid-stream: its connection is done
                raise
            idle.append(conn)
            replies[step.id] = answer
            records.append(rec)
            if rec.outcome != "ok":
                broken[0] = True
        finally:
            end_t[step.id] = time.perf_counter()
            ended[step.id].set()

    greenlets = [gevent.spawn(step_run, s) for s in session.steps]
    try:
        gevent.joinall(greenlets, raise_error=True)
    finally:
        gevent.killall([g for g in greenlets if not g.dead], block=True)
        for c in idle:
            c.close()
    return records
