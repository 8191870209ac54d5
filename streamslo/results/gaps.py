"""The ``gaps.parquet`` folder of a results directory: its part files, and merging them.

Every process that writes a run adds part files (``part-<tag>-<seq>.parquet``, one per flush);
at the end one process merges them into one ``merged-<digest>.parquet``. ``gaps.parquet`` may
also be a single file (a hand-made directory); readers accept both.

Merging is idempotent, whatever step a kill interrupts. The merged file records, in its parquet
metadata (key ``streamslo.sources``), the name of every file whose gaps it holds, and a reader
ignores any file that a merged file holds. So:

1. killed while the merged file is written: only a hidden ``.merged-*.tmp`` exists; the parts
   are read as before, and the next merge removes the leftover;
2. killed after the merged file is in place, before every part is deleted: the parts it holds
   are ignored (no gap is counted twice), and the next merge deletes them;
3. merged again later (more parts, or a second ``finalize``): the new merged file holds the old
   one and everything it held.

Nothing here knows the rest of the results directory: callers pass the folder.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["MERGED_PREFIX", "SOURCES_KEY", "compact", "live_files", "read_table"]

#: Parquet schema-metadata key listing the files a merged file holds (a JSON list of names).
SOURCES_KEY = b"streamslo.sources"
#: Name prefix of a merged file.
MERGED_PREFIX = "merged-"


def _data_files(folder: Path) -> list[Path]:
    # Hidden names are files being written (``.name.tmp``); pyarrow's own rule skips them too.
    return sorted(
        p
        for p in folder.iterdir()
        if p.suffix == ".parquet" and not p.name.startswith((".", "_")) and p.is_file()
    )


def _sources(path: Path) -> frozenset[str]:
    import pyarrow.parquet as pq

    meta = pq.read_schema(path).metadata or {}
    raw = meta.get(SOURCES_KEY)
    return frozenset(json.loads(raw)) if raw else frozenset()


def _covered(files: list[Path]) -> frozenset[str]:
    held: set[str] = set()
    for p in files:
        if p.name.startswith(MERGED_PREFIX):
            held |= _sources(p)
    return frozenset(held)


def live_files(folder: Path) -> list[Path]:
    """The files of ``folder`` whose gaps count: every data file no merged file holds.

    Args:
        folder: a ``gaps.parquet`` folder.

    Returns:
        Paths in name order (empty for an empty folder).
    """
    files = _data_files(folder)
    held = _covered(files)
    return [p for p in files if p.name not in held]


def read_table(path: Path) -> pa.Table | None:
    """Every gap of ``path`` (a folder of part files, or one file) as one pyarrow table.

    Returns:
        A ``pyarrow.Table``, or None when a folder holds no data file.

    Raises:
        OSError, pyarrow.ArrowException: a damaged file (callers name it).
    """
    import pyarrow.dataset as ds

    if path.is_dir():
        files = live_files(path)
        if not files:
            return None
        return ds.dataset([str(p) for p in files], format="parquet").to_table()
    return ds.dataset(str(path), format="parquet").to_table()


def _noop(step: str) -> None:
    """The default checkpoint: nothing to do between steps."""


def compact(folder: Path, checkpoint: Callable[[str], None] = _noop) -> Path | None:
    """Merge every live file of ``folder`` into one, then delete what it holds.

    Run by one process once writers have stopped (finalize). Safe to repeat, and safe to kill
    at any step (see the module docstring).

    Args:
        folder: a ``gaps.parquet`` folder (anything else is left alone).
        checkpoint: called with the name of each step done (``"written"``, ``"renamed"``,
            ``"deleted <name>"``); tests raise in it to simulate a kill there.

    Returns:
        The merged file, or None when there was nothing to merge.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not folder.is_dir():
        return None
    for leftover in folder.glob(f".{MERGED_PREFIX}*.tmp"):
        leftover.unlink(missing_ok=True)
    files = _data_files(folder)
    held = _covered(files)
    live = [p for p in files if p.name not in held]
    stale = [p for p in files if p.name in held]
    if len(live) <= 1:
        for p in stale:
            p.unlink(missing_ok=True)
            checkpoint(f"deleted {p.name}")
        return live[0] if live else None
    sources = {p.name for p in live} | set(held)
    tables = [pq.read_table(p).replace_schema_metadata(None) for p in live]
    table = pa.concat_tables(tables, promote_options="default")
    digest = hashlib.sha1("\n".join(sorted(sources)).encode()).hexdigest()[:16]
    final = folder / f"{MERGED_PREFIX}{digest}.parquet"
    tmp = folder / f".{final.name}.tmp"
    table = table.replace_schema_metadata({SOURCES_KEY: json.dumps(sorted(sources)).encode()})
    pq.write_table(table, tmp)
    checkpoint("written")
    os.replace(tmp, final)
    checkpoint("renamed")
    for p in live + stale:
        if p != final:
            p.unlink(missing_ok=True)
            checkpoint(f"deleted {p.name}")
    return final
