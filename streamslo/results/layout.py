"""The results directory of a run: where every file lives (:class:`Layout`), and loading it.

Layout (``docs/results.md`` describes every file and column)::

    DIR/run.json           what ran; schema_version, complete (false until finalized)
    DIR/streams.csv        one row per request; every process appends whole rows
    DIR/gaps.parquet/      part files, one per flush per process, merged at the end
    DIR/summary.json       the headline numbers (recomputed by verify and report)
    DIR/slo.json           every threshold checked
    DIR/windows.csv        per-window figures, written as the run goes
    DIR/live.json          the running totals (merged histograms), rewritten as the run goes
    DIR/procs/<tag>.json   each load-generator process's self-measurement (CPU, lag)
    DIR/writers/<tag>.json each writing process's write errors and unwritten rows
    DIR/relay.json         distributed runs: what the master received from each worker, and
                           which workers were lost
    DIR/server/            the target's evidence (metrics.jsonl, resources.jsonl, stalls.json...)
    DIR/locust.log         Locust's output under ``streamslo run``
    DIR/.run_start         the run's start (epoch seconds), agreed by every process

One process writes the directory. In a distributed run (``--processes N``, a Locust master
and its workers, on one host or many) the workers write nothing: they send their finished
streams to the master in batches (:mod:`streamslo.loadgen.relay`), and the master writes them.
Rows are still appended whole under an advisory lock, so a directory shared by several runs'
processes stays readable. The writer is :class:`streamslo.results.writer.ResultsWriter`.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from streamslo.errors import ResultsError
from streamslo.results.schema import RunJson

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "GAP_COLUMNS",
    "SCHEMA_VERSION",
    "Layout",
    "RunData",
    "compact_gaps",
    "create_json",
    "is_complete",
    "iso_utc",
    "load_run",
    "new_run_json",
    "read_json",
    "read_run_start",
    "write_json",
]

#: The version of the results directory's format, in ``run.json``. 1: before ``run.json``
#: carried it (no ``complete`` flag); 2: ``schema_version``, ``complete``, ``killed``, write errors;
#: 3: ``streams.csv`` columns ``usage_prompt_tokens``, ``conversation_id``, ``turn``, and ``run.json``
#: ``workload`` and ``goodput`` (a reader takes the columns as empty in older directories);
#: 4: ``streams.csv`` ``scenario``; 5: ``streams.csv`` ``ttfo_ms``, ``reasoning_tokens``,
#: ``tool_tokens``, ``ttftc_ms`` and ``run.json`` ``api`` (the dialect); 6: ``streams.csv``
#: ``session_id``, ``step_id``, ``depth``, ``wait_ms``, ``session_steps``, ``parent_ids``
#: (agentic sessions); 7: ``streams.csv`` ``cause`` and ``reference``, ``run.json`` ``contract``
#: and ``truth`` (what the run could check).
SCHEMA_VERSION = 7

GAP_COLUMNS: tuple[str, ...] = ("stream_id", "index", "gap_ms", "t", "open")


@dataclass(frozen=True)
class Layout:
    """Where each file of one results directory lives. Every writer and reader uses it.

    Args:
        root: the results directory.
    """

    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

    @property
    def run_json(self) -> Path:
        """What ran; ``complete`` says whether the run was finalized."""
        return self.root / "run.json"

    @property
    def streams_csv(self) -> Path:
        """One row per request."""
        return self.root / "streams.csv"

    @property
    def gaps_dir(self) -> Path:
        """Every inter-token gap: a folder of part files (or, hand-made, one file)."""
        return self.root / "gaps.parquet"

    @property
    def summary_json(self) -> Path:
        """The headline numbers."""
        return self.root / "summary.json"

    @property
    def slo_json(self) -> Path:
        """Every threshold checked."""
        return self.root / "slo.json"

    @property
    def windows_csv(self) -> Path:
        """Per-window figures, written as the run goes."""
        return self.root / "windows.csv"

    @property
    def live_json(self) -> Path:
        """The running totals of the run so far (merged histograms by group), rewritten at
        every window: what ``streamslo run`` reads to abort, alert and show progress."""
        return self.root / "live.json"

    @property
    def procs_dir(self) -> Path:
        """One JSON file per load-generator process: CPU and greenlet lag."""
        return self.root / "procs"

    @property
    def writers_dir(self) -> Path:
        """One JSON file per writing process: write errors, rows written and unwritten."""
        return self.root / "writers"

    @property
    def server_dir(self) -> Path:
        """Evidence scraped from the bundled server."""
        return self.root / "server"

    @property
    def server_metrics(self) -> Path:
        """``/metrics`` scrapes, one JSON line each."""
        return self.server_dir / "metrics.jsonl"

    @property
    def server_resources(self) -> Path:
        """The server's processes over time (RSS, open files, threads, restarts), one JSON line
        per sample."""
        return self.server_dir / "resources.jsonl"

    @property
    def server_stalls(self) -> Path:
        """``/debug/stalls`` at the end of the run."""
        return self.server_dir / "stalls.json"

    @property
    def server_workers(self) -> Path:
        """``/debug/workers`` at the end of the run."""
        return self.server_dir / "workers.json"

    @property
    def run_start_marker(self) -> Path:
        """The run's start in epoch seconds, written by the first process to start."""
        return self.root / ".run_start"

    @property
    def locust_log(self) -> Path:
        """Locust's stdout and stderr under ``streamslo run``."""
        return self.root / "locust.log"

    @property
    def relay_json(self) -> Path:
        """Distributed runs: each worker's batches as the master received them, lost workers."""
        return self.root / "relay.json"

    def proc_json(self, tag: str) -> Path:
        """The self-measurement file of the generator process ``tag``."""
        return self.procs_dir / f"{tag}.json"

    def writer_json(self, tag: str) -> Path:
        """The write-status file of the writing process ``tag``."""
        return self.writers_dir / f"{tag}.json"

    def gap_part(self, tag: str, seq: int) -> Path:
        """The ``seq``-th gap part file of the writing process ``tag``."""
        return self.gaps_dir / f"part-{tag}-{seq:05d}.parquet"


def iso_utc(epoch: float) -> str:
    """Epoch seconds as ISO 8601 UTC with milliseconds (``2025-01-02T03:04:05.678Z``)."""
    return (
        dt.datetime.fromtimestamp(epoch, dt.UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


def _dumps(obj: Any) -> str:
    return json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n"


def write_json(path: Path, obj: object) -> None:
    """Write JSON atomically (a reader never sees half a file)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(_dumps(obj))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def create_json(path: Path, obj: object) -> bool:
    """Write JSON to ``path`` unless it exists, atomically and safely across processes.

    Returns:
        Whether this call created the file.
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.new")
    try:
        tmp.write_text(_dumps(obj))
        os.link(tmp, path)  # fails if the file exists: the first process wins
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)
    return True


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


def new_run_json(info: RunJson) -> RunJson:
    """``run.json`` as written when a run starts: ``info``, not complete."""
    run: RunJson = {"schema_version": SCHEMA_VERSION, "complete": False}
    run.update(info)
    return run


def read_run_start(layout: Layout) -> float | None:
    """The run's start agreed by its processes (``.run_start``), or None."""
    try:
        text = layout.run_start_marker.read_text().strip()
        return float(text) if text else None
    except (OSError, ValueError):
        return None


def is_complete(run: Mapping[str, object]) -> bool:
    """Whether ``run.json`` says the run was finalized.

    ``complete`` decides. A ``run.json`` without it is complete only when it predates the flag
    (no ``schema_version``: format 1, finalized whenever it was written, or made by hand).
    """
    flag = run.get("complete")
    if flag is not None:
        return bool(flag)
    return run.get("schema_version") in (None, 1)


def compact_gaps(directory: Path) -> None:
    """Merge the gap part files of ``directory`` into one (idempotent; see
    :mod:`streamslo.results.gaps`)."""
    from streamslo.results import gaps as gapfiles

    gapfiles.compact(Layout(directory).gaps_dir)


@dataclass
class RunData:
    """One loaded results directory."""

    path: Path
    run: RunJson
    """run.json (empty when absent)."""
    streams: pd.DataFrame
    """streams.csv, one row a stream (the columns of :mod:`streamslo.results.columns`)."""
    gaps: pd.DataFrame
    """gaps.parquet, one row an inter-token gap."""
    skipped_rows: int = 0
    """Rows of streams.csv left out because they had too few or too many fields."""
    skipped_at: tuple[int, ...] = field(default=())
    """Record numbers (1 is the header) of the first skipped rows."""
    duplicate_rows: int = 0
    """Rows of streams.csv whose stream_id came again (the last one is kept)."""

    @property
    def valid(self) -> bool:
        return bool(self.run.get("valid", True))

    @property
    def complete(self) -> bool:
        """Whether the run was finalized (see :func:`is_complete`)."""
        return bool(self.run) and is_complete(self.run)

    @property
    def killed(self) -> bool:
        """Whether the run ended by a kill (finalized afterwards from what it had written)."""
        return bool(self.run.get("killed", False))


def load_run(directory: str | os.PathLike[str]) -> RunData:
    """Load a results directory.

    Rows of ``streams.csv`` with the wrong number of fields are skipped and counted
    (:attr:`RunData.skipped_rows`); a stream written twice is kept once.

    Raises:
        ResultsError: the directory or its ``streams.csv`` is missing or damaged, or a row's
            outcome is not one of the outcomes (the message names the file and line).
    """
    from streamslo.results._streams_csv import read_streams

    layout = Layout(Path(directory))
    path = layout.root
    if not path.is_dir():
        raise ResultsError(f"{path}: not a results directory (no such folder)")
    run = read_json(layout.run_json) if layout.run_json.exists() else {}
    streams_file = layout.streams_csv
    if not streams_file.exists():
        raise ResultsError(
            f"{streams_file}: no such file (is {path} a streamslo results directory?)"
        )
    parsed = read_streams(streams_file)
    gaps = _load_gaps(layout.gaps_dir)
    return RunData(
        path=path,
        run=cast(RunJson, run),
        streams=parsed.frame,
        gaps=gaps,
        skipped_rows=parsed.skipped,
        skipped_at=parsed.skipped_at,
        duplicate_rows=parsed.duplicates,
    )


def _load_gaps(gaps_path: Path) -> Any:
    import pandas as pd
    import pyarrow as pa

    from streamslo.results import gaps as gapfiles

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
    try:
        table = gapfiles.read_table(gaps_path)
    except Exception as exc:  # pyarrow raises several unrelated types for a damaged file
        raise ResultsError(
            f"{gaps_path}: cannot be read as parquet ({type(exc).__name__}: {exc})"
        ) from None
    if table is None:
        return empty
    gaps = table.to_pandas()
    del table
    # pyarrow's allocator keeps freed buffers for reuse; hand them back now, or a large run's
    # finalize holds the file's size twice for the rest of the process.
    pa.default_memory_pool().release_unused()
    missing = [c for c in GAP_COLUMNS if c not in gaps.columns]
    if missing:
        raise ResultsError(f"{gaps_path}: missing columns {', '.join(missing)}")
    gaps["stream_id"] = gaps["stream_id"].astype("string")
    return gaps
