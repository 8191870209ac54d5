"""Public agent traces read as sessions (docs/workloads.md, "Agent traces"): OpenTelemetry GenAI
spans and SWE-agent trajectories, from local files, nothing fetched.

**OpenTelemetry GenAI** (an OTLP/JSON export: ``{"resourceSpans": [{"scopeSpans": [{"spans":
[...]}]}]}``, a document or one a line, as the collector's file exporter writes): a trace is a
session; each span whose ``gen_ai.operation.name`` is a model call (``chat``,
``text_completion``, ``generate_content``) is a step, its lengths from
``gen_ai.usage.input_tokens`` and ``gen_ai.usage.output_tokens``. A step's agent is its nearest
``invoke_agent`` ancestor span (none: the trace's root agent). A step follows the agent's step
before it, and every step of a sub-agent that had ended by the time it started (a join); a
sub-agent's first step follows its parent agent's step that ended last before it started (a
fan-out). The wait is the time between the last parent's end and the step's start (the tool's
run, or the agent's own work); its new input is its input tokens less its first parent's
context (that parent's input and output tokens). A trace's first span is its arrival.

**SWE-agent trajectories** (``*.traj``; a directory of them, one session each): SWE-agent's
``trajectory`` list (each entry a model call: ``response``, then the tool's ``action`` run for
``execution_time`` seconds, giving ``observation``) is a chain: an entry's input is the
observation before it (the first's, the task), its output the response, its wait the tool's
time before it. mini-SWE-agent's ``messages`` (``trajectory_format: mini-swe-agent-*``) read the
same way, each assistant message a step, the user message before it its input (no tool times
are recorded: no wait). Lengths are words of the recorded text (a word is about a token).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from streamslo.errors import BadInputError

__all__ = ["detect_session_format", "read_otel", "read_swe_agent"]

#: ``gen_ai.operation.name`` values that are a call to a model.
MODEL_CALLS = frozenset({"chat", "text_completion", "generate_content"})


def _words(text: object) -> int:
    if isinstance(text, list):  # content parts
        text = " ".join(str(p.get("text", "")) for p in text if isinstance(p, dict))
    return max(1, len(str(text or "").split()))


def detect_session_format(path: Path) -> str:
    """``jsonl``, ``otel`` or ``swe-agent``, from the path and the start of its content."""
    if path.is_dir() or path.name.endswith((".traj", ".traj.json")):
        return "swe-agent"
    try:
        with open(path, encoding="utf-8") as f:
            head = f.read(4096)
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInputError(f"cannot read the session file {path} ({exc})") from None
    if '"resourceSpans"' in head:
        return "otel"
    if head.lstrip().startswith("{") and ('"trajectory"' in head or '"trajectory_format"' in head):
        return "swe-agent"
    return "jsonl"


# ------------------------------------------------------------------------- OpenTelemetry
def _attrs(span: Mapping[str, Any]) -> dict[str, object]:
    out: dict[str, object] = {}
    for a in span.get("attributes") or []:
        if not isinstance(a, dict) or not isinstance(a.get("key"), str):
            continue
        v = a.get("value") or {}
        for kind in ("stringValue", "intValue", "doubleValue", "boolValue"):
            if isinstance(v, dict) and kind in v:
                raw = v[kind]
                out[a["key"]] = int(raw) if kind == "intValue" else raw
                break
    return out


def _otel_spans(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every span of the file, with where it is (``file:line``)."""
    text = path.read_text(encoding="utf-8")
    docs: list[tuple[int, Any]] = []
    try:
        docs = [(1, json.loads(text))]
    except ValueError:
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    docs.append((n, json.loads(line)))
                except ValueError as exc:
                    raise BadInputError(f"{path}:{n}: not JSON ({exc})") from None
    for n, doc in docs:
        if not isinstance(doc, dict) or not isinstance(doc.get("resourceSpans"), list):
            raise BadInputError(f"{path}:{n}: not an OTLP/JSON export (no resourceSpans)")
        for rs in doc["resourceSpans"]:
            for ss in (rs or {}).get("scopeSpans") or []:
                for span in (ss or {}).get("spans") or []:
                    if isinstance(span, dict):
                        yield f"{path}:{n}", span


def read_otel(path: Path) -> list[dict[str, object]]:
    """The session file lines (the JSON Lines format's steps) of an OTLP/JSON GenAI export.

    Raises:
        BadInputError: not an export, or a model span without the times or token counts.
    """
    traces: dict[str, dict[str, dict[str, Any]]] = {}
    for where, span in _otel_spans(path):
        trace, sid = span.get("traceId"), span.get("spanId")
        if not isinstance(trace, str) or not isinstance(sid, str):
            raise BadInputError(f"{where}: a span without traceId and spanId")
        traces.setdefault(trace, {})[sid] = {**span, "_attrs": _attrs(span), "_where": where}
    starts = [
        int(s["startTimeUnixNano"]) for t in traces.values() for s in t.values()
        if "startTimeUnixNano" in s
    ]  # fmt: skip
    t0 = min(starts) if starts else 0
    rows: list[dict[str, object]] = []
    for trace_id, spans in traces.items():
        rows += _otel_trace(trace_id, spans, t0)
    if not rows:
        raise BadInputError(f"{path}: no model-call spans (gen_ai.operation.name chat, ...)")
    return rows


def _agent_of(span: dict[str, Any], spans: dict[str, dict[str, Any]]) -> str:
    """The span id of the nearest invoke_agent ancestor, or "" (the root agent)."""
    seen = 0
    parent = span.get("parentSpanId")
    while isinstance(parent, str) and parent in spans and seen < 1000:
        p = spans[parent]
        if p["_attrs"].get("gen_ai.operation.name") == "invoke_agent":
            return parent
        parent = p.get("parentSpanId")
        seen += 1
    return ""


def _otel_trace(
    trace_id: str, spans: dict[str, dict[str, Any]], t0: int
) -> list[dict[str, object]]:
    calls = []
    for sid, s in spans.items():
        a = s["_attrs"]
        if a.get("gen_ai.operation.name") not in MODEL_CALLS:
            continue
        try:
            start, end = int(s["startTimeUnixNano"]), int(s["endTimeUnixNano"])
            inp, out = int(a["gen_ai.usage.input_tokens"]), int(a["gen_ai.usage.output_tokens"])
        except (KeyError, TypeError, ValueError):
            raise BadInputError(
                f"{s['_where']}: model span {sid} needs startTimeUnixNano, endTimeUnixNano, "
                "gen_ai.usage.input_tokens and gen_ai.usage.output_tokens"
            ) from None
        calls.append((start, end, sid, _agent_of(s, spans), inp, out))
    calls.sort()
    rows: list[dict[str, object]] = []
    last_of: dict[str, tuple[int, str]] = {}  # agent -> (end, step) of its latest step
    info: dict[str, tuple[int, int, int]] = {}  # step -> (end, input, output)
    parent_agent = {
        sid: _agent_of(s, spans) for sid, s in spans.items()
        if s["_attrs"].get("gen_ai.operation.name") == "invoke_agent"
    }  # fmt: skip
    for start, end, sid, agent, inp, out in calls:
        parents: list[str] = []
        if agent in last_of:
            parents.append(last_of[agent][1])
        else:  # a sub-agent's first step: after the step its parent agent had last ended
            up = last_of.get(parent_agent.get(agent, ""))
            ended = [(e, st) for st, (e, _, _) in info.items() if e <= start]
            if up is not None and up[0] <= start:
                parents.append(up[1])
            elif ended:
                parents.append(max(ended)[1])
        # A join: the latest step of each sub-agent of this agent that ended before it began.
        for other, (e, st) in last_of.items():
            if (
                other != agent
                and parent_agent.get(other) == agent
                and e <= start
                and st not in parents
            ):
                parents.append(st)
        ready = max((info[p][0] for p in parents), default=start)
        ctx = info[parents[0]][1] + info[parents[0]][2] if parents else 0
        row: dict[str, object] = {
            "session": trace_id,
            "step": sid,
            "parents": parents,
            "wait_s": max(0.0, (start - ready) / 1e9),
            "input_tokens": max(1, inp - ctx),
            "output_tokens": max(1, out),
            "tool": False,
        }
        if not rows:
            row["at_s"] = (start - t0) / 1e9
        rows.append(row)
        info[sid] = (end, inp, out)
        last_of[agent] = (end, sid)
    return rows


# ------------------------------------------------------------------------------ SWE-agent
def read_swe_agent(path: Path) -> list[dict[str, object]]:
    """The session file lines of a SWE-agent (or mini-SWE-agent) trajectory, or of every
    trajectory in a directory (each a session, named by its file).

    Raises:
        BadInputError: a file that is not a trajectory (named).
    """
    files = (
        sorted(p for p in path.iterdir() if p.name.endswith((".traj", ".traj.json")))
        if path.is_dir()
        else [path]
    )
    if not files:
        raise BadInputError(f"{path}: no *.traj or *.traj.json files")
    rows: list[dict[str, object]] = []
    for f in files:
        try:
            doc = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise BadInputError(f"{f}: not a trajectory ({exc})") from None
        if not isinstance(doc, dict):
            raise BadInputError(f"{f}: not a trajectory (a JSON object)")
        name = f.name.removesuffix(".json").removesuffix(".traj")
        if isinstance(doc.get("trajectory"), list):
            rows += _swe_trajectory(name, doc, f)
        elif isinstance(doc.get("messages"), list):
            rows += _mini_messages(name, doc["messages"], f)
        else:
            raise BadInputError(f"{f}: not a trajectory (no 'trajectory' or 'messages')")
    return rows


def _swe_trajectory(name: str, doc: dict[str, Any], f: Path) -> list[dict[str, object]]:
    history = doc.get("history") or []
    task = next(
        (m.get("content") for m in history if isinstance(m, dict) and m.get("role") == "user"),
        "",
    )
    rows: list[dict[str, object]] = []
    before: object = task
    wait = 0.0
    for i, entry in enumerate(doc["trajectory"], 1):
        if not isinstance(entry, dict):
            raise BadInputError(f"{f}: trajectory entry {i} is not an object")
        rows.append(
            {
                "session": name,
                "step": str(i),
                "parents": [str(i - 1)] if i > 1 else [],
                "wait_s": wait,
                "input_tokens": _words(before),
                "output_tokens": _words(entry.get("response") or entry.get("thought")),
                "tool": bool(entry.get("action")),
            }
        )
        before = entry.get("observation")
        t = entry.get("execution_time")
        wait = float(t) if isinstance(t, (int, float)) and t >= 0 else 0.0
    return rows


def _mini_messages(name: str, messages: list[Any], f: Path) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    pending: list[object] = []
    for m in messages:
        if not isinstance(m, dict):
            raise BadInputError(f"{f}: a message is not an object")
        if m.get("role") == "assistant":
            n = len(rows) + 1
            rows.append(
                {
                    "session": name,
                    "step": str(n),
                    "parents": [str(n - 1)] if n > 1 else [],
                    "input_tokens": sum(_words(p) for p in pending) if pending else 1,
                    "output_tokens": _words(m.get("content")),
                    "tool": True,  # each answer runs a command
                }
            )
            pending = []
        else:
            pending.append(m.get("content"))
    return rows
