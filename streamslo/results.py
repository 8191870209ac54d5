"""The results directory of a run (SPEC §5): writing it as the run goes, and loading it.

Layout::

    DIR/run.json         what ran (written at start, completed at the end)
    DIR/streams.csv      one row per request; every process appends whole lines (O_APPEND)
    DIR/gaps.parquet/    a folder of part files, one per flush per process
    DIR/summary.json     the headline numbers (recomputed by verify and report)
    DIR/slo.json         every threshold checked
    DIR/procs/*.json     each load-generator process's self-measurement (CPU, lag)

Several processes (``--processes N``, Locust master and workers) write into one directory:
rows are appended with one ``write()`` each, and every process writes its own gap part files,
so each stream is there exactly once and nothing needs to travel to the master.
"""

from __future__ import annotations

import csv
import io
import json
import os
import secrets
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streamslo.errors import ResultsError
from streamslo.stream.timing import STREAM_COLUMNS, StreamRecord

__all__ = [
    "GAP_COLUMNS",
    "ResultsWriter",
    "RunData",
    "compact_gaps",
    "ensure_streams_header",
    "load_run",
    "read_json",
    "write_json",
]

GAP_COLUMNS: tuple[str, ...] = ("stream_id", "index", "gap_ms", "t", "open")

STREAMS_FILE = "streams.csv"
GAPS_DIR = "gaps.parquet"
RUN_FILE = "run.json"
SUMMARY_FILE = "summary.json"
SLO_FILE = "slo.json"


def write_json(path: Path, obj: Any) -> None:
    """Write JSON atomically (a reader never sees half a file)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")
    os.replace(tmp, path)


def read_json(path: Path) -> dict[str, Any]:
    """Read a JSON object, or raise :class:`ResultsError` naming the file."""
    try:
        obj = json.loads(path.read_text())
    except FileNotFoundError:
        raise ResultsError(f"{path}: no such file") from None
    except (OSError, ValueError) as exc:
        raise ResultsError(f"{path}: cannot be read as JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise ResultsError(f"{path}: expected a JSON object")
    return obj


def ensure_streams_header(directory: Path) -> None:
    """Create ``streams.csv`` with its header unless it exists (safe across processes)."""
    directory.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(directory / STREAMS_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return
    try:
        os.write(fd, (",".join(STREAM_COLUMNS) + "\n").encode())
    finally:
        os.close(fd)


class ResultsWriter:
    """Buffers finished streams and appends them to the results directory.

    Args:
        directory: the results directory.
        run_start: epoch seconds of the run's start (``t`` in gaps is relative to it).
        flush_interval: flush at most this many seconds after a stream was added.
    """

    def __init__(self, directory: Path, run_start: float, flush_interval: float = 2.0) -> None:
        self.directory = Path(directory)
        self.run_start = run_start
        self.flush_interval = flush_interval
        self.tag = f"{os.getpid()}-{secrets.token_hex(3)}"
        ensure_streams_header(self.directory)
        (self.directory / GAPS_DIR).mkdir(exist_ok=True)
        _warm_pyarrow()
        self._rows: list[StreamRecord] = []
        self._seq = 0
        self._last_flush = time.monotonic()
        self.streams_written = 0

    def add(self, record: StreamRecord) -> None:
        """Queue one finished stream; flushes when the interval has passed."""
        self._rows.append(record)
        if time.monotonic() - self._last_flush >= self.flush_interval:
            self.flush()

    def flush(self) -> None:
        """Append queued rows to ``streams.csv`` and write their gaps as one part file."""
        self._last_flush = time.monotonic()
        rows, self._rows = self._rows, []
        if not rows:
            return
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        for rec in rows:
            row = rec.row()
            w.writerow(["" if row[c] is None else row[c] for c in STREAM_COLUMNS])
        fd = os.open(self.directory / STREAMS_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, buf.getvalue().encode())
        finally:
            os.close(fd)
        self.streams_written += len(rows)
        self._write_gaps(rows)

    def _write_gaps(self, rows: Iterable[StreamRecord]) -> None:
        ids: list[str] = []
        index: list[int] = []
        gap_ms: list[float] = []
        ts: list[float] = []
        opens: list[bool] = []
        for rec in rows:
            n = len(rec.gap_s)
            if not n:
                continue
            # perf_counter -> seconds since the run's start, through the stream's epoch start.
            shift = rec.started_at - rec.t0 - self.run_start
            ids.extend([rec.stream_id] * n)
            index.extend(range(1, n + 1))
            gap_ms.extend(g * 1000.0 for g in rec.gap_s)
            ts.extend(t + shift for t in rec.gap_t)
            opens.extend([False] * (n - 1) + [rec.open_gap])
        if not ids:
            return
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.table(
            {
                "stream_id": pa.array(ids, pa.string()),
                "index": pa.array(index, pa.int32()),
                "gap_ms": pa.array(gap_ms, pa.float64()),
                "t": pa.array(ts, pa.float64()),
                "open": pa.array(opens, pa.bool_()),
            }
        )
        self._seq += 1
        final = self.directory / GAPS_DIR / f"part-{self.tag}-{self._seq:05d}.parquet"
        tmp = final.with_name("." + final.name + ".tmp")
        pq.write_table(table, tmp)
        os.replace(tmp, final)


def _warm_pyarrow() -> None:
    """Import pyarrow and build one table now: the first ``pa.table`` call loads pandas and
    more (a third of a second), which at the first flush would stall a gevent generator."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"x": pa.array([0.0])}), pa.BufferOutputStream())


def compact_gaps(directory: Path) -> None:
    """Merge every gap part file into one (run once, by one process, at the end)."""
    folder = Path(directory) / GAPS_DIR
    parts = sorted(p for p in folder.glob("part-*.parquet")) if folder.is_dir() else []
    if len(parts) <= 1:
        return
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.concat_tables([pq.read_table(p) for p in parts])
    final = folder / "part-all.parquet"
    tmp = folder / ".part-all.parquet.tmp"
    pq.write_table(table, tmp)
    os.replace(tmp, final)
    for p in parts:
        if p != final:
            p.unlink()


@dataclass
class RunData:
    """One loaded results directory."""

    path: Path
    run: dict[str, Any]
    """run.json (empty when absent)."""
    streams: Any
    """pandas DataFrame of streams.csv."""
    gaps: Any
    """pandas DataFrame of gaps.parquet."""

    @property
    def valid(self) -> bool:
        return bool(self.run.get("valid", True))


_STREAM_DTYPES: Mapping[str, str] = {
    "stream_id": "string",
    "protocol": "string",
    "user_class": "string",
    "outcome": "string",
    "finish_reason": "string",
    "error": "string",
}


def load_run(directory: str | os.PathLike[str]) -> RunData:
    """Load a results directory.

    Raises:
        ResultsError: the directory or its ``streams.csv`` is missing or damaged (the message
            names the file).
    """
    import pandas as pd

    path = Path(directory)
    if not path.is_dir():
        raise ResultsError(f"{path}: not a results directory (no such folder)")
    run_file = path / RUN_FILE
    run = read_json(run_file) if run_file.exists() else {}
    streams_file = path / STREAMS_FILE
    if not streams_file.exists():
        raise ResultsError(f"{streams_file}: no such file (is {path} a streamslo results directory?)")
    try:
        streams = pd.read_csv(streams_file, dtype=dict(_STREAM_DTYPES), keep_default_na=False, na_values=[""], on_bad_lines="skip")
    except (ValueError, OSError, pd.errors.ParserError) as exc:
        raise ResultsError(f"{streams_file}: cannot be read as CSV ({exc})") from None
    missing = [c for c in STREAM_COLUMNS if c not in streams.columns]
    if missing:
        raise ResultsError(f"{streams_file}: missing columns {', '.join(missing)}")
    for col in ("started_at", "scheduled_at", "connect_ms", "ttft_ms", "e2e_ms", "max_gap_ms"):
        streams[col] = pd.to_numeric(streams[col], errors="coerce").astype("float64")
    for col in ("status", "tokens", "expected_tokens", "usage_completion_tokens", "bytes"):
        streams[col] = pd.to_numeric(streams[col], errors="coerce").astype("Int64")
    for col in ("error", "finish_reason", "user_class", "protocol", "outcome", "stream_id"):
        streams[col] = streams[col].astype("string")
    streams = streams.drop_duplicates("stream_id", keep="last").reset_index(drop=True)
    gaps = _load_gaps(path / GAPS_DIR)
    return RunData(path=path, run=run, streams=streams, gaps=gaps)


def _load_gaps(gaps_path: Path) -> Any:
    import pandas as pd

    empty = pd.DataFrame(
        {
            "stream_id": pd.Series(dtype="string"),
            "index": pd.Series(dtype="int32"),
            "gap_ms": pd.Series(dtype="float64"),
            "t": pd.Series(dtype="float64"),
            "open": pd.Series(dtype="bool"),
        }
    )
    if not gaps_path.exists():
        return empty
    if gaps_path.is_dir() and not any(gaps_path.glob("*.parquet")):
        return empty
    try:
        gaps = pd.read_parquet(gaps_path)
    except Exception as exc:  # pyarrow raises several unrelated types for a damaged file
        raise ResultsError(f"{gaps_path}: cannot be read as parquet ({type(exc).__name__}: {exc})") from None
    missing = [c for c in GAP_COLUMNS if c not in gaps.columns]
    if missing:
        raise ResultsError(f"{gaps_path}: missing columns {', '.join(missing)}")
    gaps["stream_id"] = gaps["stream_id"].astype("string")
    return gaps
