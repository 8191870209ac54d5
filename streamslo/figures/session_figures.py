"""Agentic sessions judged whole (docs/metrics.md, "Sessions"): one row a session, from its
steps' rows in ``streams.csv``.

A session is **whole** when every one of its steps (``session_steps``) ended ``ok``; **broken**
when a step ended otherwise (a ``cancelled`` step aside: the run stopped it); a session that is
neither (the run ended before it did, between its steps or with steps cancelled) is in no
session figure. Its end-to-end time runs from its first step's start to its last step's end;
its tool time is the waits its steps had after their parents (``wait_ms``), summed; its time in
the server, the steps' own end-to-end times, summed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["session_summary", "session_table"]


def session_table(streams: pd.DataFrame) -> pd.DataFrame:
    """One row a session that ended (whole or broken): ``session_id``, ``steps`` (planned),
    ``sent``, ``ok`` (steps that ended ok), ``whole``, ``e2e_ms``, ``tool_ms``, ``server_ms``,
    ``max_depth``, ``context_tokens`` (the largest prompt a step sent, by ``usage``)."""
    import pandas as pd

    if "session_id" not in streams.columns:
        return pd.DataFrame()
    s = streams[streams["session_id"].notna()]
    if s.empty:
        return pd.DataFrame()
    end = s["started_at"] + s["e2e_ms"].fillna(0) / 1000.0
    frame = s.assign(_end=end, _ok=(s["outcome"] == "ok"), _cancelled=(s["outcome"] == "cancelled"))
    g = frame.groupby("session_id", sort=False)
    table = pd.DataFrame(
        {
            "steps": g["session_steps"].max(),
            "sent": g.size(),
            "ok": g["_ok"].sum(),
            "cancelled": g["_cancelled"].sum(),
            "e2e_ms": (g["_end"].max() - g["started_at"].min()) * 1000.0,
            "tool_ms": g["wait_ms"].sum(min_count=0),
            "server_ms": g["e2e_ms"].sum(min_count=0),
            "max_depth": g["depth"].max(),
            "context_tokens": g["usage_prompt_tokens"].max(),
        }
    )
    broken = (table["sent"] - table["ok"] - table["cancelled"]) > 0
    whole = (table["ok"] == table["steps"]) & ~broken
    table["whole"] = whole
    table = table[whole | broken].reset_index()
    return table


def session_summary(streams: pd.DataFrame) -> dict[str, object] | None:
    """``summary.json``'s ``sessions``; None for a run without sessions."""
    table = session_table(streams)
    if table.empty:
        return None
    n = len(table)
    whole = int(table["whole"].sum())
    e2e = table["e2e_ms"].to_numpy(dtype=float)
    tool = float(table["tool_ms"].sum())
    server = float(table["server_ms"].sum())
    return {
        "sessions": n,
        "whole": whole,
        "success_rate": whole / n,
        "e2e_ms": {
            "p50": float(np.percentile(e2e, 50)),
            "p99": float(np.percentile(e2e, 99)),
            "max": float(e2e.max()),
        },
        "steps_mean": float(table["sent"].mean()),
        # A broken session's later steps that were never sent (--on-broken-step abort).
        "steps_not_sent": int(
            (table["steps"] - table["sent"]).clip(lower=0)[~table["whole"]].sum()
        ),
        "max_depth": int(table["max_depth"].max()),
        "max_context_tokens": (
            None if table["context_tokens"].isna().all() else int(table["context_tokens"].max())
        ),
        "tool_share": tool / (tool + server) if tool + server > 0 else None,
    }
