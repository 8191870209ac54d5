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
import functools
import io
import json
import os
import secrets
import time
from array import array
from collections.abc import Callable, Mapping
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


class _GapBatch:
    """Gaps of the streams added since the last flush, kept in flat C arrays so that adding a
    stream costs microseconds and a flush has almost nothing left to do in Python."""

    __slots__ = ("code", "gap_s", "ids", "index", "open", "shift", "t")

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.shift = array("d")  # per stream: perf_counter -> seconds since the run's start
        self.code = array("i")  # per gap: which stream
        self.index = array("i")
        self.gap_s = array("d")
        self.t = array("d")
        self.open = bytearray()

    def add(self, rec: StreamRecord, run_start: float) -> None:
        n = len(rec.gap_s)
        if not n:
            return
        code = len(self.ids)
        self.ids.append(rec.stream_id)
        self.shift.append(rec.started_at - rec.t0 - run_start)
        self.code.extend(array("i", [code]) * n)
        self.index.extend(range(1, n + 1))
        self.gap_s.extend(rec.gap_s)
        self.t.extend(rec.gap_t)
        self.open.extend(bytes(n - 1))
        self.open.append(1 if rec.open_gap else 0)

    def table(self) -> Any:
        import numpy as np
        import pyarrow as pa

        code = np.frombuffer(self.code, dtype=np.int32)
        t = np.frombuffer(self.t, dtype=np.float64) + np.frombuffer(self.shift, dtype=np.float64)[code]
        return pa.table(
            {
                # A plain string column (not dictionary-encoded): readers get ordinary strings.
                "stream_id": pa.array(self.ids, pa.string()).take(pa.array(code)),
                "index": pa.array(np.frombuffer(self.index, dtype=np.int32)),
                "gap_ms": pa.array(np.frombuffer(self.gap_s, dtype=np.float64) * 1000.0),
                "t": pa.array(t),
                "open": pa.array(np.frombuffer(bytes(self.open), dtype=np.bool_)),
            }
        )


class ResultsWriter:
    """Buffers finished streams and appends them to the results directory.

    Adding a stream formats its CSV row and appends its gaps to flat arrays at once (a few
    microseconds, spread over the run); a flush appends the rows with one ``write()`` and hands
    the gap table to ``offload`` to be written off the caller's thread, so a gevent load
    generator never stalls for a parquet write.

    Args:
        directory: the results directory.
        run_start: epoch seconds of the run's start (``t`` in gaps is relative to it).
        flush_interval: flush at most this many seconds after a stream was added.
        offload: runs a callable elsewhere and returns something with ``get()`` or
            ``result()`` (gevent's threadpool ``spawn``, an executor's ``submit``); None
            writes inline.
    """

    def __init__(
        self,
        directory: Path,
        run_start: float,
        flush_interval: float = 2.0,
        offload: Callable[[Callable[[], None]], Any] | None = None,
    ) -> None:
        self.directory = Path(directory)
        self.run_start = run_start
        self.flush_interval = flush_interval
        self.tag = f"{os.getpid()}-{secrets.token_hex(3)}"
        ensure_streams_header(self.directory)
        (self.directory / GAPS_DIR).mkdir(exist_ok=True)
        _warm_pyarrow()
        self._offload = offload
        self._pending: list[Any] = []
        self._csv = io.StringIO()
        self._csv_writer = csv.writer(self._csv, lineterminator="\n")
        self._rows = 0
        self._gaps = _GapBatch()
        self._seq = 0
        self._last_flush = time.monotonic()
        self.streams_written = 0

    def add(self, record: StreamRecord) -> None:
        """Queue one finished stream; flushes when the interval has passed."""
        row = record.row()
        self._csv_writer.writerow(["" if row[c] is None else row[c] for c in STREAM_COLUMNS])
        self._rows += 1
        self._gaps.add(record, self.run_start)
        if time.monotonic() - self._last_flush >= self.flush_interval:
            self.flush()

    def flush(self, wait: bool = False) -> None:
        """Append queued rows to ``streams.csv`` and write their gaps as one part file.

        Args:
            wait: also wait for every gap file handed to ``offload`` (at the end of a run).
        """
        self._last_flush = time.monotonic()
        if self._rows:
            data = self._csv.getvalue().encode()
            self._csv.seek(0)
            self._csv.truncate()
            fd = os.open(self.directory / STREAMS_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
            self.streams_written += self._rows
            self._rows = 0
        batch, self._gaps = self._gaps, _GapBatch()
        if batch.ids:
            self._seq += 1
            final = self.directory / GAPS_DIR / f"part-{self.tag}-{self._seq:05d}.parquet"
            job = functools.partial(_write_parquet, batch, final)
            if self._offload is None:
                job()
            else:
                self._pending = [p for p in self._pending if not _done(p)]
                self._pending.append(self._offload(job))
        if wait:
            for p in self._pending:
                _result(p)
            self._pending = []


def _done(p: Any) -> bool:
    ready = getattr(p, "ready", None) or getattr(p, "done", None)
    return bool(ready()) if ready is not None else True


def _result(p: Any) -> None:
    get = getattr(p, "get", None) or getattr(p, "result", None)
    if get is not None:
        get()


def _write_parquet(batch: _GapBatch, final: Path) -> None:
    import pyarrow.parquet as pq

    tmp = final.with_name("." + final.name + ".tmp")
    pq.write_table(batch.table(), tmp)
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
