"""Agentic sessions run over the in-memory transport (no Locust, no sockets): dependencies,
tool time, context, fan-out and joins, and what a broken step does to its session."""

from __future__ import annotations

import json
import re

import gevent
import pytest

from streamslo.errors import BadInputError
from streamslo.loadgen.memory import MemoryTransport
from streamslo.loadgen.options import LoadOptions
from streamslo.loadgen.session_runner import SessionPlan, StepText, run_session
from streamslo.loadgen.streams import FixedTarget, StreamSource
from streamslo.stream.timing import StreamRecord
from streamslo.transport.common import Target
from streamslo.workload.prefix import TracePrompts
from streamslo.workload.sessions import (
    Session,
    SessionShape,
    Step,
    read_sessions,
    synthetic_sessions,
)

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"


def _chunk(text: str, finish: str | None = None, usage: int | None = None) -> bytes:
    obj: dict = {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]}
    if usage is not None:
        obj["usage"] = {"prompt_tokens": 3, "completion_tokens": usage}
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def replier(cut: set[str] | None = None):
    """Answers each step with 'reply-<its marker>' in 3 tokens; a step whose input holds a
    marker in ``cut`` gets a cut stream."""

    def answer(body: bytes):
        msgs = json.loads(body)["messages"]
        marker = re.search(r"<(\w+)>", msgs[-1]["content"]).group(1)
        words = ["reply", "-", marker]
        reads = [(0.0, HEAD)]
        for i, w in enumerate(words, 1):
            last = i == 3
            reads.append((0.01, _chunk(w, "length" if last else None, 3 if last else None)))
            if cut and marker in cut and i == 2:
                return reads
        reads.append((0.0, b"data: [DONE]\n\n"))
        return reads

    return answer


def text_of(session: Session, step: Step) -> str:
    return f"input <{step.id}>"


def run(session: Session, cut=None, abort=True):
    opts = LoadOptions.from_args(["--model", "m", "--max-tokens", "3"])
    ended: list[StreamRecord] = []
    transport = MemoryTransport(replier(cut), sleep=gevent.sleep)
    src = StreamSource(
        opts,
        FixedTarget(Target.from_url("http://127.0.0.1:9"), opts.request),
        ended.append,
        transport,
    )
    plan = SessionPlan("sse", opts.limits, text_of, abort_on_broken=abort, header="X-Session-ID")
    records = run_session(src, session, plan)
    return records, ended, transport


DIAMOND = Session(
    "d",
    (
        Step("plan"),
        Step("a", ("plan",), wait_s=0.05, tool=False),
        Step("b", ("plan",), wait_s=0.15),
        Step("join", ("a", "b")),
    ),
)


def test_steps_wait_for_their_parents_and_carry_the_context_they_built():
    records, ended, transport = run(DIAMOND)
    by_step = {r.step_id: r for r in records}
    assert set(by_step) == {"plan", "a", "b", "join"} and len(ended) == 4
    assert all(r.outcome == "ok" and r.session_id == "d" and r.session_steps == 4 for r in records)
    assert [by_step[s].depth for s in ("plan", "a", "b", "join")] == [1, 2, 2, 3]
    plan_end = by_step["plan"].started_at + by_step["plan"].e2e_s
    # Each branch starts its tool time after the plan ended; the join after the later branch.
    assert by_step["a"].scheduled_at == pytest.approx(plan_end + 0.05, abs=0.01)
    assert by_step["b"].scheduled_at == pytest.approx(plan_end + 0.15, abs=0.01)
    assert by_step["join"].started_at >= by_step["b"].started_at + by_step["b"].e2e_s - 0.005
    assert by_step["a"].wait_s == 0.05 and by_step["plan"].wait_s is None
    # The join's prompt: every ancestor's input and its reply as it streamed, then its own.
    join_body = json.loads(next(b for b in transport.sent if b"<join>" in b))
    contents = [(m["role"], m["content"]) for m in join_body["messages"]]
    assert contents == [
        ("user", "input <plan>"),
        ("assistant", "reply-plan"),
        ("user", "input <a>"),
        ("assistant", "reply-a"),
        ("user", "input <b>"),
        ("assistant", "reply-b"),
        ("user", "input <join>"),
    ]
    # A branch sees its own ancestors only, never its sibling.
    a_body = next(b for b in transport.sent if b"<a>" in b and b"<join>" not in b)
    assert b"<b>" not in a_body


def test_a_chain_runs_on_one_connection_and_each_branch_on_its_own():
    both = Session("d", (Step("p"), Step("a", ("p",)), Step("b", ("p",)), Step("j", ("a", "b"))))
    _, _, transport = run(both)
    # p, then a and b at once (two connections), then the join on one given back.
    assert transport.opened == [{"X-Session-ID": "d"}] * 2
    # DIAMOND's a ends before b's tool time does: b goes on a's connection.
    _, _, transport = run(DIAMOND)
    assert transport.opened == [{"X-Session-ID": "d"}]
    chain = Session("c", (Step("1"), Step("2", ("1",)), Step("3", ("2",))))
    _, _, transport = run(chain)
    assert transport.opened == [{"X-Session-ID": "c"}]


def test_siblings_run_at_once():
    records, _, _ = run(DIAMOND)
    by_step = {r.step_id: r for r in records}
    a, b = by_step["a"], by_step["b"]
    # b was sent before a ended: a started first (less tool time) and both were open together.
    assert a.started_at < b.started_at < a.started_at + a.e2e_s + 0.2


def test_a_broken_step_aborts_its_session_and_says_so():
    records, ended, transport = run(DIAMOND, cut={"a"})
    by_step = {r.step_id: r for r in records}
    assert by_step["a"].outcome == "truncated"
    assert "join" not in by_step  # never sent
    assert all(b"<join>" not in b for b in transport.sent)
    assert len(ended) == len(records) < 4  # the session counts as broken: fewer rows than steps


def test_continue_sends_the_rest_with_the_cut_reply():
    records, _, transport = run(DIAMOND, cut={"a"}, abort=False)
    assert {r.step_id for r in records} == {"plan", "a", "b", "join"}
    join_body = json.loads(next(b for b in transport.sent if b"<join>" in b))
    assert {"role": "assistant", "content": "reply-"} in join_body["messages"]


def test_the_session_file_is_checked_line_by_line(tmp_path):
    f = tmp_path / "s.jsonl"
    f.write_text(
        '{"session": "s1", "step": "p", "input_tokens": 40, "output_tokens": 8, "hash_ids": [1, 2]}\n'
        '{"session": "s1", "step": "c", "parents": ["p"], "wait_s": 0.4, "tool": true}\n'
        '{"session": 2, "step": 1, "at_s": 3}\n'
    )
    s1, s2 = read_sessions(f)
    assert s1.step("c").parents == ("p",) and s1.step("c").wait_s == 0.4 and s1.step("c").tool
    assert s1.step("p").hash_ids == (1, 2) and s1.step("p").output_tokens == 8
    assert s2.id == "2" and s2.at_s == 3.0 and s2.steps[0].id == "1"
    f.write_text('{"session": "s1", "step": "c", "parents": ["later"]}\n')
    with pytest.raises(BadInputError, match=r"s\.jsonl:1: parent 'later' is not an earlier step"):
        read_sessions(f)
    f.write_text('{"session": "s1", "step": "a"}\n\n{"session": "s1", "step": "a"}\n')
    with pytest.raises(BadInputError, match=r"s\.jsonl:3: step 'a' comes twice"):
        read_sessions(f)
    f.write_text('{"session": "s1", "step": "a", "wait_s": -1}\n')
    with pytest.raises(BadInputError, match=r"s\.jsonl:1: wait_s cannot be negative"):
        read_sessions(f)


@pytest.mark.parametrize(
    ("steps", "fanout", "depths"), [(8, 2, 5), (8, 1, 8), (1, 3, 1), (5, 3, 3)]
)
def test_synthetic_sessions_have_the_shape_asked(steps, fanout, depths):
    s = next(synthetic_sessions(SessionShape(steps=steps, fanout=fanout), seed=1))
    assert len(s.steps) == steps
    assert max(s.depth(x.id) for x in s.steps) == depths
    if steps >= 2 + fanout and fanout > 1:
        assert len(s.children("1")) == fanout
        join = [x for x in s.steps if len(x.parents) == fanout]
        assert len(join) == 1


def test_step_text_shares_the_blocks_it_names():
    from streamslo.workload.prompts import TextMeasure

    text = StepText(TracePrompts(TextMeasure(None), seed=3, block_tokens=16))
    s = Session(
        "x", (Step("1", input_tokens=40, hash_ids=(7,)), Step("2", input_tokens=40, hash_ids=(7,)))
    )
    one, two = text(s, s.steps[0]), text(s, s.steps[1])
    assert one.split()[:16] == two.split()[:16] and one != two
    assert len(one.split()) == 40


def test_greenlets_do_not_leak():
    """A broken root aborts the rest: every step's greenlet has ended when run_session returns."""
    spawned = []
    real_spawn = gevent.spawn

    def spawn(*args, **kwargs):
        g = real_spawn(*args, **kwargs)
        spawned.append(g)
        return g

    gevent.spawn = spawn
    try:
        run(DIAMOND, cut={"plan"})
    finally:
        gevent.spawn = real_spawn
    assert spawned and all(g.dead for g in spawned)


def test_a_long_chain_is_no_problem():
    """A trajectory of thousands of steps (a long agent run): depths in one pass."""
    steps = [Step("0")] + [Step(str(i), (str(i - 1),)) for i in range(1, 5000)]
    s = Session("long", tuple(steps))
    assert s.depth("4999") == 5000 and s.ancestors("3")[-1] == "2"


def test_a_session_the_drain_ran_out_on_is_neither_whole_nor_broken():
    """At the end of --duration no session starts; those in flight go on within --drain, and
    Locust kills a user still running when the drain runs out. Its session's streaming step is
    then ``cancelled``, its later steps are never sent, and it counts in no session figure."""
    import pandas as pd

    from streamslo.figures.session_figures import session_table

    slow = replier()

    def answer(body: bytes):
        reads = slow(body)
        if "<2>" in json.loads(body)["messages"][-1]["content"]:
            return [(t + 1.0 if i else t, b) for i, (t, b) in enumerate(reads)]  # slow tokens
        return reads

    chain = Session(
        "c", (Step("1"), Step("2", ("1",), wait_s=0.02), Step("3", ("2",), wait_s=0.02))
    )
    opts = LoadOptions.from_args(["--model", "m", "--max-tokens", "3"])
    ended: list[StreamRecord] = []
    src = StreamSource(
        opts,
        FixedTarget(Target.from_url("http://127.0.0.1:9"), opts.request),
        ended.append,
        MemoryTransport(answer, sleep=gevent.sleep),
    )
    plan = SessionPlan("sse", opts.limits, text_of)
    g = gevent.spawn(run_session, src, chain, plan)
    gevent.sleep(0.5)  # step 1 ended, step 2 is streaming
    g.kill(block=True)  # the drain ran out: Locust kills the user
    gevent.sleep(0.05)
    # (the recorder records a stream stopped mid-read as cancelled: FinishedStreams.add)
    for r in ended:
        r.outcome = r.outcome or "cancelled"
    assert [(r.step_id, r.outcome) for r in ended] == [("1", "ok"), ("2", "cancelled")]
    frame = pd.DataFrame(
        [
            {
                "session_id": r.session_id,
                "step_id": r.step_id,
                "session_steps": r.session_steps,
                "outcome": str(r.outcome),
                "started_at": r.started_at,
                "e2e_ms": (r.e2e_s or 0) * 1000,
                "wait_ms": None,
                "depth": r.depth,
                "usage_prompt_tokens": None,
            }
            for r in ended
        ]
    )
    assert session_table(frame).empty  # neither whole nor broken: in no session figure
