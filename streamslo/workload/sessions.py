"""Agentic sessions: steps that depend on each other, with tool (or think) time between them,
fan-out to subagent branches and joins, replayed from a JSON Lines file or made from flags
(docs/workloads.md, "Agentic sessions").

A **session** is a DAG of **steps**. A step is one streamed request whose prompt is the
session's context so far, that is the inputs and the replies (as they streamed) of its
ancestors, in the session's order, then its own new input. A step may start once every parent
has ended and its ``wait_s`` (the tool's run time, or the agent's think time) has passed after
the last of them; sibling branches run concurrently, and a step with several parents is a join.

The file format, one JSON object a line (docs/workloads.md)::

    {"session": "s1", "step": "plan", "input_tokens": 400, "output_tokens": 64}
    {"session": "s1", "step": "a", "parents": ["plan"], "wait_s": 0.8, "input_tokens": 120, "output_tokens": 48, "tool": true}
    {"session": "s1", "step": "b", "parents": ["plan"], "wait_s": 0.3, "input_tokens": 90, "output_tokens": 48}
    {"session": "s1", "step": "join", "parents": ["a", "b"], "input_tokens": 30, "output_tokens": 96}

Keys: ``session`` and ``step`` (strings or integers; a step's id is unique in its session),
``parents`` (ids of steps earlier in the file; none: a root), ``wait_s`` (seconds after the
parents ended, default 0), ``input_tokens`` (the step's new input: a tool's result, a user's
message; default 1), ``output_tokens`` (its ``max_tokens``), ``hash_ids`` (the prefix blocks of
its new input, as in a trace), ``input`` (its new input's text as recorded; default: text made
to ``input_tokens``), ``tool`` (the step is the kind that calls a tool: its time after it counts
as tool time), ``at_s`` (when the session arrives, on its first line; default: the schedule's). Nothing here does I/O but reading the file; nothing reads a clock.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from streamslo.errors import BadInputError
from streamslo.options.lengths import SecondsDist
from streamslo.options.run_options import RunOptions
from streamslo.workload.agent_traces import detect_session_format, read_otel, read_swe_agent

__all__ = [
    "Session",
    "SessionShape",
    "Step",
    "describe",
    "read_sessions",
    "session_source",
    "synthetic_sessions",
]


@dataclass(frozen=True, slots=True)
class Step:
    """One step of a session: one streamed request."""

    id: str
    parents: tuple[str, ...] = ()
    wait_s: float = 0.0
    """Seconds after the last parent ended before it may start (tool or think time)."""
    input_tokens: int = 1
    """Its own new input's length (tokens, or words without a tokenizer)."""
    output_tokens: int | None = None
    """Its ``max_tokens`` (None: the run's)."""
    hash_ids: tuple[int, ...] = ()
    tool: bool = False
    """The step calls a tool: the wait after it is tool time."""
    text: str | None = None
    """Its new input's text as recorded (None: text made to ``input_tokens``)."""


@dataclass(frozen=True, slots=True)
class Session:
    """A DAG of steps, in an order where every parent comes before its children."""

    id: str
    steps: tuple[Step, ...]
    at_s: float | None = None
    """When it arrives (seconds from the schedule's start), if the source says."""
    _index: Mapping[str, Step] = field(default_factory=dict, repr=False, compare=False)
    _depth: Mapping[str, int] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_index", {s.id: s for s in self.steps})
        depth: dict[str, int] = {}
        for s in self.steps:  # (parents come first: one pass, however long the chain)
            depth[s.id] = 1 + max((depth[p] for p in s.parents), default=0)
        object.__setattr__(self, "_depth", depth)

    def step(self, step_id: str) -> Step:
        return self._index[step_id]

    def depth(self, step_id: str) -> int:
        """1 for a root; one more than its deepest parent otherwise."""
        return self._depth[step_id]

    def ancestors(self, step_id: str) -> list[str]:
        """Every step the step's context holds (its ancestors), in the session's order."""
        seen: set[str] = set()
        todo = list(self._index[step_id].parents)
        while todo:
            p = todo.pop()
            if p not in seen:
                seen.add(p)
                todo.extend(self._index[p].parents)
        return [s.id for s in self.steps if s.id in seen]

    def children(self, step_id: str) -> list[str]:
        return [s.id for s in self.steps if step_id in s.parents]


# ------------------------------------------------------------------------------- the file
def _ident(value: object, what: str, where: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)) or value == "":
        raise BadInputError(f"{where}: {what} must be a non-empty string or an integer")
    return str(value)


def _number(row: Mapping[str, object], key: str, where: str, default: float) -> float:
    value = row.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise BadInputError(f"{where}: {key} must be a number")
    if value < 0:
        raise BadInputError(f"{where}: {key} cannot be negative ({value:g})")
    return float(value)


def _whole(row: Mapping[str, object], key: str, where: str, default: int | None) -> int | None:
    value = row.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BadInputError(f"{where}: {key} must be a whole number of at least 1")
    return value


def _step(row: Mapping[str, object], where: str, known: set[str]) -> Step:
    step_id = _ident(row.get("step"), "step", where)
    if step_id in known:
        raise BadInputError(f"{where}: step {step_id!r} comes twice in its session")
    raw_parents = row.get("parents", [])
    if not isinstance(raw_parents, list):
        raise BadInputError(f"{where}: parents must be a list of step ids")
    parents = tuple(_ident(p, "a parent", where) for p in raw_parents)
    for p in parents:
        if p not in known:
            raise BadInputError(
                f"{where}: parent {p!r} is not an earlier step of its session "
                "(a parent's line comes before its children's)"
            )
    hash_ids = row.get("hash_ids", [])
    if not isinstance(hash_ids, list) or not all(
        isinstance(h, int) and not isinstance(h, bool) for h in hash_ids
    ):
        raise BadInputError(f"{where}: hash_ids must be a list of integers")
    tool = row.get("tool", False)
    if not isinstance(tool, bool):
        raise BadInputError(f"{where}: tool must be true or false")
    text = row.get("input")
    if text is not None and not isinstance(text, str):
        raise BadInputError(f"{where}: input must be text")
    return Step(
        id=step_id,
        parents=parents,
        wait_s=_number(row, "wait_s", where, 0.0),
        input_tokens=_whole(row, "input_tokens", where, 1) or 1,
        output_tokens=_whole(row, "output_tokens", where, None),
        hash_ids=tuple(hash_ids),
        tool=tool,
        text=text,
    )


def read_sessions(path: str | Path, fmt: str = "auto") -> list[Session]:
    """Every session of a session file (``jsonl``), an OpenTelemetry GenAI export (``otel``) or
    SWE-agent trajectories (``swe-agent``: a file or a directory of them), in the order their
    first steps come; ``auto`` tells the three apart (:mod:`streamslo.workload.agent_traces`).

    Raises:
        BadInputError: the file cannot be read, or a line or span is not a step (the message
            names the file and the line).
    """
    p = Path(path)
    if fmt == "auto":
        fmt = detect_session_format(p)
    if fmt == "otel":
        return _sessions(p, ((f"{p} (span)", row) for row in read_otel(p)))
    if fmt == "swe-agent":
        return _sessions(p, ((f"{p} (trajectory)", row) for row in read_swe_agent(p)))
    if fmt != "jsonl":
        raise BadInputError(f"unknown session format {fmt!r}: use auto, jsonl, otel or swe-agent")
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInputError(f"cannot read the session file {p} ({exc})") from None

    def rows() -> Iterator[tuple[str, object]]:
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            where = f"{p}:{n}"
            try:
                yield where, json.loads(line)
            except ValueError as exc:
                raise BadInputError(f"{where}: not JSON ({exc})") from None

    return _sessions(p, rows())


def _sessions(p: Path, rows: Iterable[tuple[str, object]]) -> list[Session]:
    order: list[str] = []
    steps: dict[str, list[Step]] = {}
    ids: dict[str, set[str]] = {}
    at: dict[str, float | None] = {}
    for where, row in rows:
        if not isinstance(row, dict):
            raise BadInputError(f"{where}: a line must be a JSON object (one step)")
        sid = _ident(row.get("session"), "session", where)
        if sid not in steps:
            order.append(sid)
            steps[sid], ids[sid] = [], set()
            at[sid] = _number(row, "at_s", where, 0.0) if "at_s" in row else None
        step = _step(row, where, ids[sid])
        ids[sid].add(step.id)
        steps[sid].append(step)
    if not order:
        raise BadInputError(f"{p}: no sessions (one JSON object a line, each a step)")
    return [Session(sid, tuple(steps[sid]), at[sid]) for sid in order]


# --------------------------------------------------------------------------- synthetic
_HALF_SECOND = SecondsDist("fixed", 0.5)


@dataclass(frozen=True, slots=True)
class SessionShape:
    """What synthetic sessions look like (``--session-*`` options)."""

    steps: int = 8
    """Steps a session (at least 1)."""
    fanout: int = 1
    """Subagent branches after the first step (1: a chain)."""
    tool_s: SecondsDist = _HALF_SECOND
    """Tool time between a step and the next."""
    input_tokens: int = 128
    """Each step's new input (the context grows by it and by each reply)."""
    output_tokens: int | None = None
    """Each step's ``max_tokens`` (None: the run's)."""
    system_blocks: int = 1
    """Prefix blocks every session shares at its start (a system prompt and tool schema)."""

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise ValueError(f"a session needs at least one step, not {self.steps}")
        if self.fanout < 1:
            raise ValueError(f"fan-out must be at least 1, not {self.fanout}")
        if self.input_tokens < 1:
            raise ValueError(f"input tokens must be at least 1, not {self.input_tokens}")


def _plan(shape: SessionShape) -> list[tuple[str, tuple[str, ...]]]:
    """The DAG of one synthetic session: (step id, parents). A root, then ``fanout`` branches
    of equal length, then a join and a chain after it with the steps that are left."""
    n, f = shape.steps, shape.fanout
    out: list[tuple[str, tuple[str, ...]]] = [("1", ())]
    if n == 1:
        return out
    branch = (n - 2) // f if f > 1 else 0
    k = 2
    if branch >= 1:
        ends = []
        for _ in range(f):
            parent = "1"
            for _step in range(branch):
                sid = str(k)
                out.append((sid, (parent,)))
                parent = sid
                k += 1
            ends.append(parent)
        out.append((str(k), tuple(ends)))  # the join
        k += 1
    while k <= n:
        out.append((str(k), (str(k - 1),)))
        k += 1
    return out


def synthetic_sessions(shape: SessionShape, seed: int, prefix: str = "") -> Iterator[Session]:
    """Sessions of ``shape``, one after another, without end (drawn from ``seed``; their ids
    ``{prefix}s1``, ``{prefix}s2``...)."""
    rng = random.Random(seed * 7_919 + 104_729)
    plan = _plan(shape)
    for n in range(1, 1 << 62):
        steps = []
        for sid, parents in plan:
            steps.append(
                Step(
                    id=sid,
                    parents=parents,
                    wait_s=shape.tool_s.sample(rng) if parents else 0.0,
                    input_tokens=shape.input_tokens,
                    output_tokens=shape.output_tokens,
                    # The root's input starts with the blocks every session shares.
                    hash_ids=tuple(range(shape.system_blocks)) if not parents else (),
                    tool=any(sid in p for _, p in plan),
                )
            )
        yield Session(f"{prefix}s{n}", tuple(steps))


def describe(sessions: Sequence[Session]) -> dict[str, object]:
    """For ``run.json``: how many sessions and steps, the widest fan-out, the deepest step."""
    steps = sum(len(s.steps) for s in sessions)
    depth = max((s.depth(st.id) for s in sessions for st in s.steps), default=0)
    fan = max((len(s.children(st.id)) for s in sessions for st in s.steps), default=0)
    return {"sessions": len(sessions), "steps": steps, "max_depth": depth, "max_fanout": fan}


def session_source(
    opts: RunOptions, index: int = 0, processes: int = 1, prefix: str = ""
) -> Iterator[Session]:
    """This process's sessions (``--sessions``): its share of a session file (a session whole,
    never split between processes: every ``processes``-th from ``index``), once; or synthetic
    sessions without end, seeded by the run's seed and the process, their ids starting with
    ``prefix`` (the process's tag: unique across processes).

    Raises:
        BadInputError: no ``--sessions``, or an unreadable session file (file and line named).
    """
    if not opts.sessions:
        raise BadInputError("no --sessions given")
    if opts.sessions == "synthetic":
        shape = SessionShape(
            steps=opts.session_steps,
            fanout=opts.session_fanout,
            tool_s=opts.tool_time,
            input_tokens=opts.session_input_tokens,
            output_tokens=None,
        )
        return synthetic_sessions(shape, opts.seed * 1_000_003 + index, prefix)
    sessions = read_sessions(opts.sessions, opts.session_format)
    return iter(sessions[index::processes])
