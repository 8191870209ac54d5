"""Writing a run's results as it goes: rows to ``streams.csv``, gaps to part files.

Nothing is dropped silently. A row stays in memory until it is on disk: a short write is
continued, a failed one (``ENOSPC``, ``EFBIG``, ``EIO``, ``EBADF``...) is cut back to whole rows
(the file never holds half a row, which would corrupt the next writer's row too) and retried at
the next flush, and every failure is logged and counted in ``writers/<tag>.json``, which
finalize sums into ``run.json``. A gap part that cannot be written is kept and retried the
same way. :meth:`ResultsWriter.flush` never raises for an I/O error, so the loop that calls it
survives a full disk.

Several processes append to one ``streams.csv``: each append takes an advisory lock
(``flock``), so a cut-back never removes another process's rows.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import logging
import os
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streamslo.results.batch import GapColumns, RecordBatch
from streamslo.results.columns import STREAM_COLUMNS
from streamslo.stream.timing import StreamRecord

if TYPE_CHECKING:
    from streamslo.results.layout import Layout

__all__ = [
    "PartialAppend",
    "ResultsWriter",
    "WriteFn",
    "append_lines",
    "ensure_streams_header",
    "new_tag",
    "warm_pyarrow",
]

log = logging.getLogger(__name__)

#: ``os.write``'s signature: the seam tests use to make writes fail.
WriteFn = Callable[[int, "bytes | memoryview"], int]

#: Log a persisting write failure again at most this often (seconds).
_LOG_EVERY_S = 30.0


def new_tag() -> str:
    """A tag for one process of a run (``<pid>-<6 hex digits>``): it names the process's files
    and starts its stream ids, so those are unique across processes and hosts."""
    return f"{os.getpid()}-{secrets.token_hex(3)}"


def ensure_streams_header(directory: Path) -> None:
    """Create ``streams.csv`` with its header unless it exists (safe across processes).

    Raises:
        OSError: the file cannot be created or its header written (nothing is left behind).
    """
    from streamslo.results.layout import Layout

    path = Layout(directory).streams_csv
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return
    header = (",".join(STREAM_COLUMNS) + "\n").encode()
    try:
        if os.write(fd, header) != len(header):
            raise OSError(errno.ENOSPC, "short write of the header")
    except OSError:
        # An empty streams.csv would read as damaged, and no other process would add a header.
        os.unlink(path)
        raise
    finally:
        os.close(fd)


class PartialAppend(OSError):
    """:func:`append_lines` wrote only the first ``done`` bytes (whole lines) before ``error``."""

    def __init__(self, done: int, error: OSError) -> None:
        super().__init__(error.errno, error.strerror)
        self.done = done
        self.error = error


def append_lines(path: Path, data: bytes, write: WriteFn = os.write) -> int:
    """Append whole lines to ``path`` under an advisory lock; never leave half a line.

    A short write is continued. On an error, a partial last line is cut off again (the lock
    guarantees that nothing was appended after it), so the next try writes it whole.

    Args:
        path: an existing file, shared by every process that appends to it this way.
        data: whole lines, each ending in a newline.
        write: ``os.write``, or a stand-in that fails (tests).

    Returns:
        ``len(data)``: everything was written.

    Raises:
        PartialAppend: an error after some whole lines were written (``done`` bytes).
        OSError: the file cannot be opened.
    """
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    done = 0
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # released by close
        start = os.fstat(fd).st_size
        view = memoryview(data)
        try:
            while done < len(data):
                n = write(fd, view[done:])
                if n <= 0:
                    raise OSError(errno.EIO, "write() wrote nothing")
                done += n  # a short write: go on with the rest
        except OSError as exc:
            whole = data.rfind(b"\n", 0, done) + 1
            if whole < done:
                try:
                    os.ftruncate(fd, start + whole)
                except OSError:
                    log.warning("streamslo: could not cut back a partial line in %s", path)
            raise PartialAppend(whole, exc) from exc
    finally:
        os.close(fd)
    return done


def _write_parquet(gaps: GapColumns, run_start: float, final: Path) -> BaseException | None:
    """Write one part file; returns the error instead of raising (it runs on a pool thread)."""
    import pyarrow.parquet as pq

    tmp = final.with_name("." + final.name + ".tmp")
    try:
        pq.write_table(gaps.table(run_start), tmp)
        os.replace(tmp, final)
    except Exception as exc:  # pyarrow wraps I/O errors in its own types
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        return exc
    return None


def _done(p: Any) -> bool:
    ready = getattr(p, "ready", None) or getattr(p, "done", None)
    return bool(ready()) if ready is not None else True


def _result(p: Any) -> Any:
    get = getattr(p, "get", None) or getattr(p, "result", None)
    return get() if get is not None else p


def warm_pyarrow() -> None:
    """Import pyarrow and build one table now: the first ``pa.table`` call loads pandas and
    more (a third of a second), which at the first flush would stall a gevent generator.
    Cheap once done; a process that will write can call it before its test starts."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"x": pa.array([0.0])}), pa.BufferOutputStream())


def _describe(exc: BaseException) -> str:
    code = getattr(exc, "errno", None)
    name = errno.errorcode.get(code, "") if isinstance(code, int) else ""
    return f"{name + ': ' if name else ''}{getattr(exc, 'strerror', None) or exc}"


class ResultsWriter:
    """Buffers finished streams and appends them to the results directory.

    Adding a stream formats its CSV row and appends its gaps to flat arrays at once (a few
    microseconds, spread over the run); a flush appends the rows with one locked ``write()``
    and hands the gap table to ``offload`` to be written off the caller's thread, so a gevent
    load generator never stalls for a parquet write.

    Creates ``run.json`` (``complete: false``) when no one has yet, so that a run of plain
    Locust that is killed still says it was not finalized.

    Args:
        directory: the results directory.
        run_start: epoch seconds of the run's start (``t`` in gaps is relative to it).
        flush_interval: flush at most this many seconds after a stream was added.
        offload: runs a callable elsewhere and returns something with ``get()`` or
            ``result()`` (gevent's threadpool ``spawn``, an executor's ``submit``); None
            writes inline.
        final_retry_s: how long the last flush (``wait=True``) keeps retrying what a full
            disk refused before it gives up and reports the loss.
        write: ``os.write``, or a stand-in that fails (tests).
    """

    def __init__(
        self,
        directory: Path,
        run_start: float,
        flush_interval: float = 2.0,
        offload: Callable[[Callable[[], object]], object] | None = None,
        *,
        final_retry_s: float = 10.0,
        write: WriteFn = os.write,
    ) -> None:
        from streamslo.results.layout import Layout, create_json, iso_utc, new_run_json

        self.layout: Layout = Layout(Path(directory))
        self.directory = self.layout.root
        self.run_start = run_start
        self.flush_interval = flush_interval
        self.final_retry_s = final_retry_s
        self.tag = new_tag()
        ensure_streams_header(self.directory)
        self.layout.gaps_dir.mkdir(exist_ok=True)
        create_json(
            self.layout.run_json,
            new_run_json({"start": iso_utc(run_start), "start_epoch": run_start}),
        )
        warm_pyarrow()
        self._offload = offload
        self._write = write
        self._batch = RecordBatch()  # added since the last flush
        self._unwritten = bytearray()  # whole rows only
        self._unwritten_rows = 0
        self._failed_gaps: list[tuple[GapColumns, Path]] = []
        self._pending: list[tuple[Any, GapColumns, Path]] = []
        self._seq = 0
        self._last_flush = time.monotonic()
        self._last_log = -_LOG_EVERY_S
        self._status_dirty = False
        self.streams_written = 0
        """Rows appended to ``streams.csv`` so far."""
        self.write_errors = 0
        """Failed attempts to write rows or gap parts (each retried)."""
        self.last_error: str | None = None

    # ------------------------------------------------------------------ adding
    def add(self, record: StreamRecord) -> None:
        """Queue one finished stream; flushes when the interval has passed."""
        self._batch.add(record)
        if time.monotonic() - self._last_flush >= self.flush_interval:
            self.flush()

    def ingest(self, batch: RecordBatch) -> None:
        """Queue finished streams that another process recorded (a Locust worker's batch);
        flushes when the interval has passed. Costs an append of bytes and arrays."""
        self._batch.extend(batch)
        if time.monotonic() - self._last_flush >= self.flush_interval:
            self.flush()

    @property
    def rows_unwritten(self) -> int:
        """Rows added but not yet on disk."""
        return len(self._batch) + self._unwritten_rows

    @property
    def gaps_unwritten(self) -> int:
        """Gaps added but not yet on disk (queued, being written, or refused)."""
        return (
            len(self._batch.gaps)
            + sum(len(b) for b, _ in self._failed_gaps)
            + sum(len(b) for _, b, _ in self._pending)
        )

    # ---------------------------------------------------------------- flushing
    def flush(self, wait: bool = False) -> None:
        """Append queued rows to ``streams.csv`` and write their gaps as one part file.

        Never raises for an I/O error: what cannot be written is kept, counted and retried.

        Args:
            wait: the end of a run: wait for every gap part handed to ``offload``, and retry
                what failed for up to ``final_retry_s`` before reporting it lost.
        """
        self._last_flush = time.monotonic()
        batch, self._batch = self._batch, RecordBatch()
        if len(batch):
            self._unwritten += batch.rows_bytes()
            self._unwritten_rows += len(batch)
        self._write_rows()
        if batch.gaps.streams:
            self._seq += 1
            self._submit(batch.gaps, self.layout.gap_part(self.tag, self._seq))
        self._collect(wait=False)
        if self._failed_gaps:
            retry, self._failed_gaps = self._failed_gaps, []
            for b, path in retry:
                self._submit(b, path)
        if wait:
            self._finish()
            self._status_dirty = True  # the end of a run: say what was written, always
        if self._status_dirty:
            self._save_status()

    def _submit(self, batch: GapColumns, final: Path) -> None:
        job = functools.partial(_write_parquet, batch, self.run_start, final)
        future = job() if self._offload is None else self._offload(job)
        self._pending.append((future, batch, final))

    def _collect(self, wait: bool) -> None:
        """Take the outcome of finished gap writes; a failed one is kept for a retry."""
        still: list[tuple[Any, GapColumns, Path]] = []
        for future, batch, final in self._pending:
            if not wait and not _done(future):
                still.append((future, batch, final))
                continue
            error = _result(future)
            if error is not None:
                self._failed(error, f"{len(batch)} gaps ({final.name})")
                self._failed_gaps.append((batch, final))
            elif self.write_errors:
                self._status_dirty = True
        self._pending = still

    def _finish(self) -> None:
        deadline = time.monotonic() + self.final_retry_s
        while True:
            self._collect(wait=True)
            if not self._unwritten and not self._failed_gaps:
                return
            if time.monotonic() >= deadline:
                break
            time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
            self._write_rows()
            retry, self._failed_gaps = self._failed_gaps, []
            for b, path in retry:
                self._submit(b, path)
        log.error(
            "streamslo: giving up on %d rows and %d gaps that could not be written to %s (%s); "
            "they are lost, and %s says so",
            self._unwritten_rows,
            sum(len(b) for b, _ in self._failed_gaps),
            self.directory,
            self.last_error,
            self.layout.writer_json(self.tag),
        )
        self._status_dirty = True

    def _write_rows(self) -> None:
        """Append the kept rows; on an error keep every row not wholly written."""
        if not self._unwritten:
            return
        data = bytes(self._unwritten)
        try:
            ensure_streams_header(self.directory)
            done = append_lines(self.layout.streams_csv, data, self._write)
            error: OSError | None = None
        except PartialAppend as exc:
            done, error = exc.done, exc.error
        except OSError as exc:
            done, error = 0, exc
        rows = data.count(b"\n", 0, done)
        del self._unwritten[:done]
        self._unwritten_rows -= rows
        self.streams_written += rows
        if error is not None:
            self._failed(error, f"{self._unwritten_rows} rows")
        elif self.write_errors:
            self._status_dirty = True  # recovered: say so in the status file

    def _failed(self, exc: BaseException, what: str) -> None:
        self.write_errors += 1
        self.last_error = _describe(exc)
        self._status_dirty = True
        now = time.monotonic()
        if now - self._last_log >= _LOG_EVERY_S:
            self._last_log = now
            log.warning(
                "streamslo: cannot write %s to %s (%s); keeping them and retrying "
                "(%d failed writes so far)",
                what,
                self.directory,
                self.last_error,
                self.write_errors,
            )

    def status(self) -> dict[str, object]:
        """What this writer wrote and could not write (``writers/<tag>.json``)."""
        return {
            "tag": self.tag,
            "rows_written": self.streams_written,
            "rows_unwritten": self.rows_unwritten,
            "gaps_unwritten": self.gaps_unwritten,
            "write_errors": self.write_errors,
            "last_error": self.last_error,
        }

    def _save_status(self) -> None:
        from streamslo.results.layout import write_json

        try:
            self.layout.writers_dir.mkdir(exist_ok=True)
            write_json(self.layout.writer_json(self.tag), self.status())
            self._status_dirty = False
        except OSError:
            pass  # the disk is still full: the next flush tries again
