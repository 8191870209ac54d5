"""Build results directories by hand (docs/results.md), to test SLO files and checks without a load run.

::

    from streamslo.verify.testing import stream_row, write_run

    write_run(tmp_path, [stream_row("a"), stream_row("b", outcome="truncated")],
              gaps={"a": [20.0, 21.0], "b": [20.0, 900.0]})
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["stream_row", "write_run"]

_FAILED_OPEN = frozenset({"truncated", "stalled", "timeout", "error_event", "malformed"})


def stream_row(stream_id: str, **fields: object) -> dict[str, object]:
    """One ``streams.csv`` row: a complete SSE stream of 10 tokens unless ``fields`` say otherwise.

    Args:
        stream_id: the stream's id.
        **fields: any column of ``streams.csv`` (docs/results.md).

    Returns:
        The row, every column present.

    Raises:
        ValueError: a field that is not a column.
    """
    from streamslo.results.columns import STREAM_COLUMNS
    from streamslo.stream.cause import default_cause
    from streamslo.stream.outcome import OUTCOMES, Outcome

    row: dict[str, Any] = {
        "stream_id": stream_id,
        "protocol": "sse",
        "user_class": "SSEUser",
        "started_at": 1_700_000_000.0,
        "scheduled_at": None,
        "status": 200,
        "outcome": "ok",
        "connect_ms": 1.0,
        "ttft_ms": 50.0,
        "e2e_ms": 500.0,
        "tokens": 10,
        "expected_tokens": 10,
        "usage_completion_tokens": 10,
        "finish_reason": "length",
        "max_gap_ms": None,
        "bytes": 1000,
        "error": "",
        "usage_prompt_tokens": None,
        "conversation_id": None,
        "turn": None,
        "scenario": None,
        "schedule_lag_ms": None,
        "cached_tokens": None,
        "ttfo_ms": 50.0,
        "reasoning_tokens": 0,
        "tool_tokens": 0,
        "ttftc_ms": None,
        "session_id": None,
        "step_id": None,
        "depth": None,
        "wait_ms": None,
        "session_steps": None,
        "parent_ids": None,
        "cause": None,
        "reference": None,
    }
    unknown = sorted(set(fields) - set(STREAM_COLUMNS))
    if unknown:
        raise ValueError(f"not columns of streams.csv: {', '.join(unknown)}")
    row.update(fields)
    if row["cause"] is None and row["outcome"] in OUTCOMES:
        # The cause an outcome takes when nothing more precise is said.
        row["cause"] = str(default_cause(Outcome(str(row["outcome"]))))
    return row


def write_run(
    directory: str | Path,
    streams: Sequence[Mapping[str, object]],
    gaps: Mapping[str, Sequence[float]] | None = None,
    *,
    run: Mapping[str, object] | None = None,
) -> Path:
    """Write ``run.json``, ``streams.csv`` and ``gaps.parquet`` (one file) into ``directory``.

    Args:
        directory: created if needed.
        streams: rows, e.g. from :func:`stream_row`; ``max_gap_ms`` is filled in from ``gaps``
            when None.
        gaps: stream id -> its gaps in ms, in order; a failed stream's last gap is written
            ``open``.
        run: ``run.json`` (default ``{"valid": true}``).

    Returns:
        The directory.
    """
    import pandas as pd

    from streamslo.results.columns import STREAM_COLUMNS
    from streamslo.results.layout import Layout

    layout = Layout(Path(directory))
    out = layout.root
    out.mkdir(parents=True, exist_ok=True)
    gaps = gaps or {}
    rows = []
    for s in streams:
        row = dict(s)
        g = gaps.get(str(row["stream_id"]))
        if row.get("max_gap_ms") is None and g:
            row["max_gap_ms"] = max(g)
        rows.append(row)
    pd.DataFrame(rows, columns=list(STREAM_COLUMNS)).to_csv(layout.streams_csv, index=False)
    outcome = {str(r["stream_id"]): r.get("outcome") for r in rows}
    recs = [
        {
            "stream_id": sid,
            "index": i + 1,
            "gap_ms": float(v),
            "t": float(i),
            "open": i == len(vals) - 1 and outcome.get(sid) in _FAILED_OPEN,
        }
        for sid, vals in gaps.items()
        for i, v in enumerate(vals)
    ]
    frame = pd.DataFrame(recs, columns=["stream_id", "index", "gap_ms", "t", "open"]).astype(
        {
            "stream_id": "string",
            "index": "int32",
            "gap_ms": "float64",
            "t": "float64",
            "open": "bool",
        }
    )
    frame.to_parquet(layout.gaps_dir, index=False)
    layout.run_json.write_text(json.dumps(dict(run) if run is not None else {"valid": True}))
    return out
