"""The columns of ``streams.csv``, declared once (``docs/results.md``).

Each :class:`Column` says its name, its type, its unit, whether it is free text a spreadsheet
must not run as a formula, the results schema that added it, its line in the docs, and how a
:class:`~streamslo.stream.timing.StreamRecord` gives its value. The CSV row
(:func:`stream_row`), the header, the parser's types (:mod:`streamslo.results._streams_csv`),
the spreadsheet-safe fields (:mod:`streamslo.loadgen.listeners`) and the docs table
(``tests/test_docs.py`` reads it against :data:`COLUMNS`) all come from here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from streamslo.results.markup import markdown_table
from streamslo.stream.timing import StreamRecord

__all__ = [
    "COLUMNS",
    "FLOAT_COLUMNS",
    "INT_COLUMNS",
    "OPTIONAL_COLUMNS",
    "SAFE_FIELDS",
    "STREAM_COLUMNS",
    "TEXT_COLUMNS",
    "Column",
    "docs_table",
    "stream_row",
]

Kind = Literal["text", "int", "float"]


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000.0, 3)


@dataclass(frozen=True, slots=True)
class Column:
    """One column of ``streams.csv``."""

    name: str
    kind: Kind
    unit: str
    """As the docs table shows it (``ms``, ``count``, ``text``...)."""
    doc: str
    """The docs table's meaning (``docs/results.md``, without the schema note)."""
    value: Callable[[StreamRecord], object]
    """The cell's value for a record (None: empty)."""
    schema: int = 1
    """The results schema that added it: an older directory reads it as empty."""
    safe: bool = False
    """Free text that may come from a server or a user: made spreadsheet-safe when written."""


def _tokens(r: StreamRecord) -> int:
    return r.reported_tokens if r.reported_tokens is not None else r.tokens


def _lag(r: StreamRecord) -> float | None:
    if r.scheduled_at is None:
        return None
    return round((r.started_at - r.scheduled_at) * 1000.0, 3)


#: Every column, in the file's order.
COLUMNS: tuple[Column, ...] = (
    Column(
        "stream_id",
        "text",
        "text",
        "unique across processes (`<pid>-<random>-<n>`)",
        lambda r: r.stream_id,
        safe=True,
    ),
    Column("protocol", "text", "`sse` or `ws`", "the transport", lambda r: r.protocol, safe=True),
    Column(
        "user_class",
        "text",
        "text",
        "the Locust user class that sent it",
        lambda r: r.user_class,
        safe=True,
    ),
    Column(
        "started_at",
        "float",
        "Unix epoch s",
        "when the request started",
        lambda r: round(r.started_at, 6),
    ),
    Column(
        "scheduled_at",
        "float",
        "Unix epoch s",
        "open-loop runs: when the arrival process scheduled it; empty otherwise",
        lambda r: None if r.scheduled_at is None else round(r.scheduled_at, 6),
    ),
    Column("status", "int", "HTTP status", "101 for an accepted WebSocket", lambda r: r.status),
    Column(
        "outcome",
        "text",
        "one of the outcomes",
        "`ok`, `truncated`, `silent_truncation`, `error_event`, `malformed`, `stalled`, "
        "`timeout`, `http_4xx`, `http_5xx`, `connect_error`, `cancelled`, `client_cancelled` "
        "([outcomes.md](outcomes.md))",
        lambda r: r.outcome,
        safe=True,
    ),
    Column(
        "connect_ms",
        "float",
        "ms",
        "start to connected; empty on a reused connection",
        lambda r: _ms(r.connect_s),
    ),
    Column("ttft_ms", "float", "ms", "start to the first token position", lambda r: _ms(r.ttft_s)),
    Column("e2e_ms", "float", "ms", "start to the end of the stream", lambda r: _ms(r.e2e_s)),
    Column(
        "tokens",
        "int",
        "count",
        "token positions that arrived; the server's count where it counted them itself, or "
        "where merged chunks explain the rest ([outcomes.md](outcomes.md#merged-chunks)), and "
        "under `--coalesced-chunks`",
        _tokens,
    ),
    Column(
        "expected_tokens",
        "int",
        "count",
        "what the request promised (`max_tokens` under a forced length)",
        lambda r: r.expected_tokens,
    ),
    Column(
        "usage_completion_tokens",
        "int",
        "count",
        "the server's `usage.completion_tokens` (the dialect's output tokens)",
        lambda r: r.usage_completion_tokens,
    ),
    Column(
        "finish_reason",
        "text",
        "text",
        "the stop reason the server gave (`finish_reason`, or the dialect's)",
        lambda r: r.finish_reason,
        safe=True,
    ),
    Column(
        "max_gap_ms",
        "float",
        "ms",
        "the largest inter-token gap of the stream",
        lambda r: _ms(r.max_gap_s),
    ),
    Column("bytes", "int", "bytes", "body bytes received", lambda r: r.bytes),
    Column(
        "error",
        "text",
        "text",
        "why the stream did not end `ok` (for WebSocket, the close code is in it)",
        lambda r: r.error,
        safe=True,
    ),
    Column(
        "usage_prompt_tokens",
        "int",
        "count",
        "the server's `usage.prompt_tokens`",
        lambda r: r.usage_prompt_tokens,
        schema=3,
    ),
    Column(
        "conversation_id",
        "text",
        "text",
        "the conversation the request belongs to (`--turns`, [workloads.md](workloads.md))",
        lambda r: r.conversation_id,
        schema=3,
        safe=True,
    ),
    Column(
        "turn",
        "int",
        "int",
        "the request's turn in its conversation, 1 for the first",
        lambda r: r.turn,
        schema=3,
    ),
    Column(
        "scenario",
        "text",
        "text",
        "the `[scenarios.NAME]` that sent it ([scenarios.md](scenarios.md)); empty outside "
        "scenarios",
        lambda r: r.scenario,
        schema=4,
        safe=True,
    ),
    Column(
        "schedule_lag_ms",
        "float",
        "ms",
        "scheduled streams (open loop, arrival-rate scenarios, `--trace`): `started_at − "
        "scheduled_at`, how late the generator started it; empty otherwise",
        _lag,
        schema=4,
    ),
    Column(
        "cached_tokens",
        "int",
        "count",
        "the server's `usage.prompt_tokens_details.cached_tokens` (prompt tokens served from "
        "its prefix cache); empty when the server does not say ([workloads.md](workloads.md))",
        lambda r: r.cached_tokens,
        schema=4,
    ),
    Column(
        "ttfo_ms",
        "float",
        "ms",
        "start to the first *answer* token (reasoning and tool-call tokens come before it); "
        "empty when none came",
        lambda r: _ms(r.ttfo_s),
        schema=5,
    ),
    Column(
        "reasoning_tokens",
        "int",
        "count",
        "token positions that carried reasoning (part of `tokens`)",
        lambda r: r.reasoning_tokens,
        schema=5,
    ),
    Column(
        "tool_tokens",
        "int",
        "count",
        "token positions that carried tool-call arguments (part of `tokens`)",
        lambda r: r.tool_tokens,
        schema=5,
    ),
    Column(
        "ttftc_ms",
        "float",
        "ms",
        "start to the first tool-call token (time to first tool call); empty without one",
        lambda r: _ms(r.ttftc_s),
        schema=5,
    ),
    Column(
        "session_id",
        "text",
        "text",
        "agentic sessions: the session the step belongs to ([workloads.md](workloads.md)); "
        "empty otherwise",
        lambda r: r.session_id,
        schema=6,
        safe=True,
    ),
    Column(
        "step_id",
        "text",
        "text",
        "agentic sessions: the step's id in its session",
        lambda r: r.step_id,
        schema=6,
        safe=True,
    ),
    Column(
        "depth",
        "int",
        "int",
        "agentic sessions: 1 for a root step, one more than its deepest parent otherwise",
        lambda r: r.depth,
        schema=6,
    ),
    Column(
        "wait_ms",
        "float",
        "ms",
        "agentic sessions: the tool (or think) time the step waited after its parents ended",
        lambda r: _ms(r.wait_s),
        schema=6,
    ),
    Column(
        "session_steps",
        "int",
        "count",
        "agentic sessions: the steps its session has, sent or not (a session is whole when "
        "all of them ended `ok`)",
        lambda r: r.session_steps,
        schema=6,
    ),
    Column(
        "parent_ids",
        "text",
        "text",
        "agentic sessions: the step's parents' ids, `;`-joined (empty: a root)",
        lambda r: r.parent_ids,
        schema=6,
        safe=True,
    ),
    Column(
        "cause",
        "text",
        "one of the causes",
        "why the stream ended as it did, beside its outcome: `complete`, `cut`, "
        "`no_terminal`, `stopped_early`, `positions_missing`, `reference_prefix`, "
        "`no_token`, `http_status`... ([outcomes.md](outcomes.md#causes))",
        lambda r: r.cause,
        schema=7,
        safe=True,
    ),
    Column(
        "reference",
        "text",
        "`match`, `prefix`, `diverged`",
        "runs with reference replies: the answer against its prompt's reference (`prefix`: "
        "an ordinary stop on a strict prefix of it, a silent truncation; `diverged`: another "
        "text, so this stream's silent stops could not be checked); empty otherwise "
        "([outcomes.md](outcomes.md#reference-replies))",
        lambda r: r.reference,
        schema=7,
        safe=True,
    ),
)

#: The column names, in order (the header).
STREAM_COLUMNS: tuple[str, ...] = tuple(c.name for c in COLUMNS)
#: Columns a results directory of schema 1 or 2 may lack (read as empty).
OPTIONAL_COLUMNS: tuple[str, ...] = tuple(c.name for c in COLUMNS if c.schema > 1)
TEXT_COLUMNS: tuple[str, ...] = tuple(c.name for c in COLUMNS if c.kind == "text")
INT_COLUMNS: tuple[str, ...] = tuple(c.name for c in COLUMNS if c.kind == "int")
FLOAT_COLUMNS: tuple[str, ...] = tuple(c.name for c in COLUMNS if c.kind == "float")
#: The record fields written as free text, made spreadsheet-safe before a row is written.
SAFE_FIELDS: tuple[str, ...] = tuple(c.name for c in COLUMNS if c.safe)


def stream_row(rec: StreamRecord) -> dict[str, object]:
    """The ``streams.csv`` row of ``rec`` (milliseconds, empty cells as None)."""
    return {c.name: c.value(rec) for c in COLUMNS}


def docs_table() -> str:
    """The ``streams.csv`` table of ``docs/results.md``, as Markdown (a test keeps the page
    equal to it)."""
    rows = [["column", "unit", "meaning"]]
    for c in COLUMNS:
        note = f" Schema {c.schema}: an older directory reads it as empty." if c.schema > 1 else ""
        rows.append([f"`{c.name}`", c.unit, f"{c.doc}.{note}"])
    return markdown_table(rows) + "\n"
