"""``windows.csv`` and ``live.json`` on disk: written as the run goes, read as it goes, and made
to agree with ``streams.csv`` when the run is finalized (``docs/results.md``).

- :func:`append_rows`: whole rows appended under a lock (a kill never leaves half a row).
- :func:`write_live` / :func:`read_live`: the running totals, rewritten atomically.
- :class:`WindowsTail`: reads the rows added since the last call (``streamslo run``'s watch
  loop), never the whole file twice.
- :func:`reconcile`: at finalize, every window whose ``requests`` differs from the streams of
  ``streams.csv`` that ended in it (a killed run's last windows, a late report, a row that
  could not be written) is rebuilt from ``streams.csv`` and ``gaps.parquet`` with the same
  histograms; the generator's columns are kept from the live row. Afterwards the sum of
  ``requests`` equals the rows of ``streams.csv``.
"""

from __future__ import annotations

import csv
import io
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streamslo.errors import ResultsError
from streamslo.figures.windows import (
    DEFAULT_WINDOW_S,
    WINDOW_COLUMNS,
    Group,
    GroupAggregate,
    WindowRow,
    row_from_groups,
)
from streamslo.results.layout import Layout, RunData, read_json, write_json
from streamslo.results.writer import append_lines
from streamslo.slo.live_eval import totals_from_wire, totals_to_wire
from streamslo.stream.outcome import EXCLUDED_OUTCOMES

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "LiveState",
    "WindowsTail",
    "aggregate_streams",
    "append_rows",
    "format_rows",
    "read_live",
    "read_windows",
    "reconcile",
    "write_live",
]

_INT_COLUMNS = frozenset(WINDOW_COLUMNS[2 : WINDOW_COLUMNS.index("tokens") + 1])


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(round(v, 6)) if math.isfinite(v) else ""
    return str(v)


def format_rows(rows: Iterable[Mapping[str, object]], header: bool = False) -> bytes:
    """CSV text of ``rows`` (column order of :data:`WINDOW_COLUMNS`), optionally with the header."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    if header:
        w.writerow(WINDOW_COLUMNS)
    for r in rows:
        w.writerow([_cell(r.get(c)) for c in WINDOW_COLUMNS])
    return buf.getvalue().encode()


def append_rows(path: Path, rows: Iterable[WindowRow]) -> None:
    """Append rows to ``windows.csv``, creating it with its header first when needed.

    Raises:
        OSError: the file cannot be written (nothing half-written is left).
    """
    data = format_rows(r.values for r in rows)
    if not data:
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        pass
    else:
        os.close(fd)
        append_lines(path, format_rows((), header=True))
    append_lines(path, data)


def _parse(row: Mapping[str, str]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for c in WINDOW_COLUMNS:
        text = (row.get(c) or "").strip()
        if not text:
            out[c] = None
        elif c in _INT_COLUMNS:
            out[c] = int(float(text))
        else:
            out[c] = float(text)
    return out


def read_windows(path: Path) -> list[dict[str, float | None]]:
    """Every row of a ``windows.csv`` (empty cells as None); [] when there is none.

    Raises:
        ValueError: a row that does not parse (the message names the file and line).
    """
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    out = []
    for n, row in enumerate(csv.DictReader(io.StringIO(text)), start=2):
        try:
            out.append(_parse(row))
        except ValueError as exc:
            raise ValueError(f"{path}:{n}: {exc}") from None
    return out


class WindowsTail:
    """The rows appended to a ``windows.csv`` since the last :meth:`read` (whole lines only)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._header: list[str] | None = None

    def read(self) -> list[dict[str, float | None]]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return []
        end = data.rfind(b"\n") + 1
        if end == 0:
            return []
        self._offset += end
        lines = data[:end].decode("utf-8", "replace").splitlines()
        if self._header is None:
            self._header, lines = next(csv.reader([lines[0]])), lines[1:]
        rows = []
        for values in csv.reader(lines):
            try:
                rows.append(_parse(dict(zip(self._header, values, strict=False))))
            except ValueError:
                continue  # a damaged row is the finalize's to rebuild
        return rows


@dataclass(frozen=True)
class LiveState:
    """``live.json``: the running totals of a run."""

    updated_epoch: float
    window_s: float
    totals: dict[Group, GroupAggregate]
    last_window: dict[str, Any] | None
    rows_written: int


def write_live(
    path: Path,
    *,
    now: float,
    window_s: float,
    totals: Mapping[Group, GroupAggregate],
    last_window: Mapping[str, object] | None,
    rows_written: int,
    late_parts: int,
) -> None:
    """Rewrite ``live.json`` atomically."""
    write_json(
        path,
        {
            "updated_epoch": now,
            "window_s": window_s,
            "rows_written": rows_written,
            "late_parts": late_parts,
            "last_window": dict(last_window) if last_window else None,
            "totals": totals_to_wire(totals),
        },
    )


def read_live(path: Path) -> LiveState | None:
    """``live.json``, or None when it is absent or unreadable (a run that just started)."""
    if not path.exists():
        return None
    try:
        doc = read_json(path)
        return LiveState(
            float(doc["updated_epoch"]),
            float(doc["window_s"]),
            totals_from_wire(doc["totals"]),
            doc.get("last_window"),
            int(doc.get("rows_written", 0)),
        )
    except (ResultsError, KeyError, TypeError, ValueError):
        return None


# ------------------------------------------------------------------------ finalize
def aggregate_streams(
    streams: pd.DataFrame, gaps: pd.DataFrame, window_s: float
) -> dict[int, dict[Group, GroupAggregate]]:
    """The groups of every window, from ``streams.csv`` and ``gaps.parquet`` frames (the same
    rule and populations as the live aggregation)."""
    import numpy as np

    out: dict[int, dict[Group, GroupAggregate]] = {}
    if len(streams) == 0:
        return out
    end = streams["started_at"].astype(float) + streams["e2e_ms"].astype(float).fillna(0.0) / 1000.0
    keys = np.floor(end.to_numpy(dtype=float) / window_s)
    by_stream: dict[str, Any] = {}
    if len(gaps):
        ordered = gaps.sort_values(["stream_id", "index"])
        for sid, g in ordered.groupby("stream_id", sort=False):
            by_stream[str(sid)] = g["gap_ms"].to_numpy(dtype=float)

    frame = streams[list(_AGGREGATE_COLUMNS)].astype(object)
    frame = frame.where(streams[list(_AGGREGATE_COLUMNS)].notna(), None)
    for k, rec in zip(keys, frame.itertuples(index=False, name=None), strict=True):
        if not math.isnan(k):
            _add_stream(out.setdefault(int(k), {}), rec, by_stream)
    return out


#: The streams.csv columns a window's figures read, in :func:`_add_stream`'s order.
_AGGREGATE_COLUMNS = (
    "stream_id",
    "protocol",
    "user_class",
    "outcome",
    "status",
    "started_at",
    "scheduled_at",
    "connect_ms",
    "ttft_ms",
    "e2e_ms",
    "tokens",
    "max_gap_ms",
)


def _num(v: Any) -> float | None:
    return None if v is None else float(v)


def _add_stream(
    groups: dict[Group, GroupAggregate], rec: tuple[Any, ...], by_stream: Mapping[str, Any]
) -> None:
    """One streams.csv row (:data:`_AGGREGATE_COLUMNS`) into its window's groups."""
    from streamslo.figures.windows import group_began

    sid, proto, cls, outcome, status, started, sched, conn, ttft, e2e, tokens, max_gap = rec
    st = _num(status)
    group: Group = (
        str(proto or ""),
        str(cls or ""),
        str(outcome or "cancelled"),
        "" if st is None else str(int(st)),
    )
    agg = groups.setdefault(group, GroupAggregate())
    agg.requests += 1
    ntok = int(_num(tokens) or 0)
    agg.tokens += ntok
    c = _num(conn)
    if group[2] not in EXCLUDED_OUTCOMES and c is not None:
        agg.trend("connect_ms").add(c)
    if not group_began(group):
        return
    t, e = _num(ttft), _num(e2e)
    if t is not None:
        agg.trend("ttft_ms").add(t)
    if e is not None:
        agg.trend("e2e_ms").add(e)
    g = by_stream.get(str(sid))
    if g is not None and g.size:
        agg.trend("itl_ms").add_many(g.tolist())
    mg = _num(max_gap)
    if mg is not None:
        agg.trend("max_gap_ms").add(mg)
    if t is not None and e is not None and ntok > 1:
        agg.trend("tpot_ms").add((e - t) / (ntok - 1))
    s = _num(sched)
    if s is not None:
        lag = max(0.0, float(started) - s) * 1000.0
        if t is not None:
            agg.trend("ttft_sched_ms").add(t + lag)
        if e is not None:
            agg.trend("e2e_sched_ms").add(e + lag)


def _window_of(layout: Layout, run: Mapping[str, Any], live: list[dict[str, Any]]) -> float:
    w = run.get("window_s")
    if isinstance(w, (int, float)) and w > 0:
        return float(w)
    for r in live:
        if r.get("window_s"):
            return float(r["window_s"])
    return DEFAULT_WINDOW_S


#: A live row's samples of the generator and the server, kept when its window is rebuilt.
_SAMPLED = ("active_streams", "gen_cpu_pct", "gen_lag_ms_p99", "gen_rss_mb", "server_rss_mb")


def _merge_rows(
    by_k: Mapping[int, list[dict[str, Any]]],
    want: Mapping[int, int],
    bad: list[int],
    expected: Mapping[int, dict[Group, GroupAggregate]],
    w: float,
) -> tuple[dict[int, dict[str, Any]], list[float]]:
    """Every window's row: the live one where it agrees with streams.csv, else rebuilt from
    the streams (keeping the live row's samples). Returns the rows and the rebuilt starts."""
    rebuilt: list[float] = []
    rows: dict[int, dict[str, Any]] = {}
    for k in sorted(set(by_k) | set(want)):
        have = by_k.get(k, [])
        if k not in bad:
            rows[k] = have[0]
            continue
        row = row_from_groups(k, w, expected.get(k, {})).values
        rebuilt.append(row["window_start"])
        if have:  # the generator's own samples are only in the live row
            for c in _SAMPLED:
                row[c] = next((h[c] for h in have if h.get(c) is not None), None)
        rows[k] = row
    return rows, rebuilt


def reconcile(data: RunData) -> dict[str, object]:
    """Make ``windows.csv`` agree with ``streams.csv`` (see the module's docstring).

    Returns:
        ``{"window_s", "rows", "rebuilt", "rebuilt_windows", "requests"}`` for ``run.json``'s
        ``windows`` (``rebuilt_windows``: the ``window_start`` of each window rebuilt).

    Raises:
        OSError: the file cannot be rewritten.
    """
    layout = Layout(data.path)
    try:
        live = read_windows(layout.windows_csv)
    except ValueError:
        live = []  # damaged beyond reading: rebuild every window
    import numpy as np

    w = _window_of(layout, data.run, live)
    s = data.streams
    end = (s["started_at"].astype(float) + s["e2e_ms"].astype(float).fillna(0.0) / 1000.0).to_numpy(
        dtype=float
    )
    keys = np.floor(end[~np.isnan(end)] / w).astype(np.int64)
    uniq, counts = np.unique(keys, return_counts=True)
    want = dict(zip(uniq.tolist(), counts.tolist(), strict=True))
    by_k: dict[int, list[dict[str, Any]]] = {}
    for r in live:
        start = r.get("window_start")
        if start is not None:
            by_k.setdefault(round(start / w), []).append(r)
    bad = sorted(
        k
        for k in set(by_k) | set(want)
        if len(by_k.get(k, [])) != 1 or (by_k[k][0].get("requests") or 0) != want.get(k, 0)
    )
    expected: dict[int, dict[Group, GroupAggregate]] = {}
    if bad:  # only the streams of those windows: a long run's finalize stays quick
        with np.errstate(invalid="ignore"):
            in_bad = np.isin(np.floor(end / w), np.asarray(bad, dtype=float))
        sub = s[in_bad]
        expected = aggregate_streams(
            sub, data.gaps[data.gaps["stream_id"].isin(sub["stream_id"])], w
        )
    rows, rebuilt = _merge_rows(by_k, want, bad, expected, w)
    if rebuilt:
        tmp = layout.windows_csv.with_name(f".{layout.windows_csv.name}.{os.getpid()}.tmp")
        try:
            tmp.write_bytes(format_rows((rows[k] for k in sorted(rows)), header=True))
            os.replace(tmp, layout.windows_csv)
        finally:
            tmp.unlink(missing_ok=True)
    return {
        "window_s": w,
        "rows": len(rows),
        "rebuilt": len(rebuilt),
        "rebuilt_windows": rebuilt,
        "requests": sum(int(r.get("requests") or 0) for r in rows.values()),
    }
