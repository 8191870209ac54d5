"""The report's session view, for agentic runs (``--sessions``; docs/report.md): a swim lane of
a few sessions (each step a bar from its start to its end, the tool time before it a thin line,
a broken step red), and by step depth the TTFT, the prefix cache's hit rate and its ceiling: the
share of the step's prompt its first parent had already seen (that parent's prompt and reply,
which the step's context starts with), what a cache that also keeps replies could serve.

The lane shows the broken sessions first, then the slowest whole ones (at most
:data:`LANE_SESSIONS`). Nothing here prints.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import pandas as pd

from streamslo.figures.session_figures import session_table
from streamslo.reports.load import LoadedRun
from streamslo.reports.render import fmt
from streamslo.results.markup import html_table, markdown_table

if TYPE_CHECKING:
    from streamslo.reports.charts import Chart
    from streamslo.reports.section import SectionInput

__all__ = [
    "LANE_SESSIONS",
    "SessionView",
    "SessionsSection",
    "session_names",
    "session_views",
    "sessions_html",
    "sessions_json",
    "sessions_markdown",
]

#: Sessions drawn in a run's swim lane.
LANE_SESSIONS = 6
_ROW_H, _LEFT, _WIDTH = 16, 150, 640


@dataclass(frozen=True)
class SessionView:
    """One run's session view."""

    label: str
    depth_rows: list[list[str]]
    """Header first: depth, steps, ok, TTFT p50 / p99, prompt tokens, cache hit rate."""
    lane: list[dict[str, Any]]
    """The drawn sessions: ``{"session", "name", "whole", "steps": [{"step", "depth",
    "start_ms", "end_ms", "wait_ms", "ok"}]}`` (``name``: :func:`session_names`)."""


def _ceiling(s: pd.DataFrame) -> pd.Series:
    """Per step, the share of its prompt its first parent had already seen: that parent's
    prompt and reply (a step's context starts with its first parent's, in the session's order),
    at most 1; NaN for a root, or where the server gave no usage."""
    if "parent_ids" not in s.columns:
        return pd.Series(np.nan, index=s.index)
    # As floats: a server that gives no usage leaves pandas' NA, which object division turns
    # into a ZeroDivisionError instead of a missing share.
    prompt = pd.to_numeric(s["usage_prompt_tokens"], errors="coerce").astype(float)
    seen = prompt + pd.to_numeric(s["usage_completion_tokens"], errors="coerce").astype(float)
    key = s["session_id"].astype(str) + "\0" + s["step_id"].astype(str)
    seen_by = dict(zip(key, seen, strict=True))
    first = s["parent_ids"].fillna("").astype(str).str.split(";").str[0]
    parent_seen = (s["session_id"].astype(str) + "\0" + first).map(seen_by).astype(float)
    share = (parent_seen / prompt.where(prompt > 0)).clip(upper=1.0)
    return share.where(first != "")


def _depth_rows(s: pd.DataFrame) -> list[list[str]]:
    rows = [
        [
            "depth",
            "steps",
            "ok",
            "TTFT p50 (ms)",
            "TTFT p99 (ms)",
            "prompt tokens",
            "cache hit",
            "shared context",
        ]
    ]
    s = s.assign(_ceiling=_ceiling(s))
    for depth, g in s.groupby("depth", sort=True):
        ttft = g["ttft_ms"].dropna().to_numpy(dtype=float)
        prompt = g["usage_prompt_tokens"].dropna().to_numpy(dtype=float)
        cached = g["cached_tokens"].dropna().to_numpy(dtype=float)
        hit = cached.sum() / prompt.sum() if len(cached) and prompt.sum() > 0 else None
        rows.append(
            [
                str(int(str(depth).split(".")[0])),
                str(len(g)),
                str(int((g["outcome"] == "ok").sum())),
                fmt(float(np.percentile(ttft, 50)) if len(ttft) else None),
                fmt(float(np.percentile(ttft, 99)) if len(ttft) else None),
                fmt(float(prompt.mean()) if len(prompt) else None, 0),
                "—" if hit is None else f"{hit:.1%}",
                "—" if g["_ceiling"].isna().all() else f"{float(g['_ceiling'].mean()):.1%}",
            ]
        )
    return rows


#: A synthetic session's id (``--sessions synthetic``): the process's tag, then ``s<n>``.
_SYNTHETIC = re.compile(r"^(\d+)-[0-9a-f]{6}-(s\d+)$")


def session_names(ids: Sequence[str]) -> dict[str, str]:
    """Each session's readable name: a session file's or trace's own id as it is; a synthetic
    session's ``s23``, with ``of process 671`` only where two processes each had an ``s23``."""
    short = {i: m.group(2) for i in ids if (m := _SYNTHETIC.match(i))}
    taken: dict[str, int] = {}
    for name in short.values():
        taken[name] = taken.get(name, 0) + 1
    out = {}
    for i in ids:
        name = short.get(i)
        if name is None:
            out[i] = i
        elif taken[name] > 1:
            m = _SYNTHETIC.match(i)
            out[i] = f"{name} of process {m.group(1) if m else '?'}"
        else:
            out[i] = name
    return out


def _lane(s: pd.DataFrame) -> list[dict[str, Any]]:
    table = session_table(s)
    if table.empty:
        return []
    names = session_names([str(x) for x in table["session_id"]])
    picked = pd.concat(
        [
            table[~table["whole"]].sort_values("e2e_ms", ascending=False),
            table[table["whole"]].sort_values("e2e_ms", ascending=False),
        ]
    ).head(LANE_SESSIONS)
    out = []
    row: Any
    for row in picked.itertuples():
        steps = s[s["session_id"] == row.session_id].sort_values("started_at")
        t0 = float(steps["started_at"].min())
        out.append(
            {
                "session": str(row.session_id),
                "name": names[str(row.session_id)],
                "whole": bool(row.whole),
                "steps": [
                    {
                        "step": str(st.step_id),
                        "depth": None if pd.isna(st.depth) else int(st.depth),
                        "start_ms": round((float(st.started_at) - t0) * 1000.0, 1),
                        "end_ms": round(
                            (float(st.started_at) - t0) * 1000.0 + float(st.e2e_ms or 0.0), 1
                        ),
                        "wait_ms": None if pd.isna(st.wait_ms) else float(st.wait_ms),
                        "ok": st.outcome == "ok",
                    }
                    for st in steps.itertuples()
                ],
            }
        )
    return out


def session_views(runs: Sequence[LoadedRun]) -> list[SessionView]:
    """A view per run that ran sessions (empty when none did)."""
    out = []
    for r in runs:
        s = r.data.streams
        if "session_id" not in s.columns or not s["session_id"].notna().any():
            continue
        s = s[s["session_id"].notna()]
        out.append(SessionView(f"{r.label} ({r.name})", _depth_rows(s), _lane(s)))
    return out


def _svg(lane: list[dict[str, Any]]) -> str:
    rows = sum(len(x["steps"]) + 1 for x in lane)
    span = max((st["end_ms"] for x in lane for st in x["steps"]), default=1.0) or 1.0
    scale = _WIDTH / span
    parts = [
        f'<svg class="lane" width="{_LEFT + _WIDTH + 10}" height="{rows * _ROW_H + 20}" '
        'xmlns="http://www.w3.org/2000/svg" role="img" aria-label="sessions swim lane">'
    ]
    y = 0
    for x in lane:
        mark = "" if x["whole"] else " (broken)"
        parts.append(
            f'<text x="2" y="{y + 12}" font-weight="bold" font-size="11">'
            f"{html.escape(str(x.get('name', x['session']))[:24])}{mark}</text>"
        )
        y += _ROW_H
        for st in x["steps"]:
            x0 = _LEFT + st["start_ms"] * scale
            w = max(1.0, (st["end_ms"] - st["start_ms"]) * scale)
            color = "#2e7d32" if st["ok"] else "#c62828"
            parts.append(
                f'<text x="10" y="{y + 12}" font-size="10">step {html.escape(st["step"][:14])}'
                f" (depth {st['depth']})</text>"
            )
            if st["wait_ms"]:
                wx = x0 - st["wait_ms"] * scale
                parts.append(
                    f'<line x1="{max(_LEFT, wx):.1f}" y1="{y + 8}" x2="{x0:.1f}" y2="{y + 8}" '
                    'stroke="#999" stroke-dasharray="3,2"><title>tool time</title></line>'
                )
            parts.append(
                f'<rect x="{x0:.1f}" y="{y + 3}" width="{w:.1f}" height="{_ROW_H - 6}" '
                f'fill="{color}"><title>{st["end_ms"] - st["start_ms"]:.0f} ms</title></rect>'
            )
            y += _ROW_H
    parts.append(
        f'<text x="{_LEFT}" y="{y + 14}" font-size="10">0 ms</text>'
        f'<text x="{_LEFT + _WIDTH - 60}" y="{y + 14}" font-size="10">{span:,.0f} ms</text></svg>'
    )
    return "".join(parts)


def sessions_html(views: Sequence[SessionView]) -> str:
    parts = []
    for v in views:
        parts.append(f"<h3>{html.escape(v.label)}</h3>")
        if v.lane:
            parts.append(
                '<p class="note">Steps as bars (green ok, red broken), the tool time before a '
                "step as a dashed line; broken sessions first, then the slowest whole ones.</p>"
            )
            parts.append(_svg(v.lane))
        parts.append("<h4>By step depth</h4>" + html_table(v.depth_rows))
    return "\n".join(parts)


def sessions_markdown(views: Sequence[SessionView]) -> str:
    out: list[str] = []
    for v in views:
        out += [f"### Sessions by step depth: {v.label}", "", markdown_table(v.depth_rows), ""]
    return "\n".join(out)


def sessions_json(views: Sequence[SessionView]) -> list[dict[str, object]]:
    return [{"run": v.label, "by_depth": v.depth_rows, "lane": v.lane} for v in views]


@dataclass(frozen=True)
class SessionsSection:
    """The swim lane and the table by step depth of each run with sessions (a report section;
    the session summary itself is near the top of the report, in its model)."""

    key: ClassVar[str] = "sessions"
    title: ClassVar[str] = "Agentic sessions"
    charts_first: ClassVar[bool] = False
    views: tuple[SessionView, ...]

    @classmethod
    def build(cls, inp: SectionInput) -> SessionsSection:
        return cls(tuple(session_views(inp.runs)))

    def charts(self) -> tuple[Chart, ...]:
        return ()

    def html(self) -> str:
        return sessions_html(self.views)

    def markdown(self) -> str:
        return sessions_markdown(self.views)

    def to_json(self) -> object:
        return sessions_json(self.views)
