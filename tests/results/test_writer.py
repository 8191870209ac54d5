"""The row writer keeps every row until it is on disk: short writes, failing writes, a full disk."""

from __future__ import annotations

import errno
import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from streamslo.results.layout import SCHEMA_VERSION, Layout, is_complete, load_run, read_json
from streamslo.results.writer import PartialAppend, ResultsWriter, append_lines
from streamslo.runfiles.finalize import writer_totals
from tests.results.helpers import lines, record

REPO = Path(__file__).resolve().parents[2]


class FlakyWrite:
    """``os.write`` that fails with ``error`` while ``failing``, optionally after writing
    ``partial`` bytes of the call that fails first (a disk that fills up mid-write)."""

    def __init__(
        self, error: int = errno.ENOSPC, partial: int = 0, chunk: int | None = None
    ) -> None:
        self.error = error
        self.partial = partial
        self.chunk = chunk
        self.failing = False
        self.calls = 0
        self._partial_done = False

    def __call__(self, fd: int, data: bytes | memoryview) -> int:
        self.calls += 1
        if self.failing:
            if self.partial and not self._partial_done:
                self._partial_done = True
                return os.write(fd, bytes(data[: self.partial]))
            raise OSError(self.error, os.strerror(self.error))
        if self.chunk is not None:
            return os.write(fd, bytes(data[: self.chunk]))
        return os.write(fd, data)


def test_rows_and_gaps_round_trip(tmp_path):
    w = ResultsWriter(tmp_path, run_start=1.0, flush_interval=3600)
    for i in range(5):
        w.add(record(i, gaps=4))
    w.flush(wait=True)
    data = load_run(tmp_path)
    assert sorted(data.streams["stream_id"]) == [f"s-{i}" for i in range(5)]
    assert len(data.gaps) == 20
    assert data.skipped_rows == 0
    assert w.streams_written == 5 and w.rows_unwritten == 0


def test_the_writer_marks_a_new_directory_incomplete(tmp_path):
    ResultsWriter(tmp_path, run_start=1_700_000_000.0)
    run = read_json(Layout(tmp_path).run_json)
    assert run["schema_version"] == SCHEMA_VERSION == 7 and run["complete"] is False
    assert run["start_epoch"] == 1_700_000_000.0
    assert not is_complete(run)


def test_the_writer_never_overwrites_run_json(tmp_path):
    Layout(tmp_path).run_json.write_text('{"target": "x", "complete": false}')
    ResultsWriter(tmp_path, run_start=1.0)
    assert read_json(Layout(tmp_path).run_json) == {"target": "x", "complete": False}


def test_short_writes_are_continued(tmp_path):
    write = FlakyWrite(chunk=7)  # every write takes 7 bytes at most
    w = ResultsWriter(tmp_path, run_start=1.0, flush_interval=3600, write=write)
    for i in range(10):
        w.add(record(i))
    w.flush(wait=True)
    assert write.calls > 10
    assert len(lines(Layout(tmp_path).streams_csv)) == 11  # header + 10 rows
    assert w.write_errors == 0 and w.streams_written == 10


@pytest.mark.parametrize("error", [errno.ENOSPC, errno.EIO, errno.EBADF, errno.EFBIG])
@pytest.mark.parametrize("partial", [0, 1, 150], ids=["nothing", "one-byte", "mid-row"])
def test_failed_writes_keep_the_rows_until_they_land_once(tmp_path, caplog, error, partial):
    write = FlakyWrite(error=error, partial=partial)
    w = ResultsWriter(tmp_path, run_start=1.0, flush_interval=3600, write=write, final_retry_s=0)
    for i in range(3):
        w.add(record(i))
    w.flush()
    write.failing = True
    for i in range(3, 8):
        w.add(record(i, error="x" * 100))
    with caplog.at_level(logging.WARNING, logger="streamslo.results.writer"):
        w.flush()  # does not raise
        w.flush()
    assert w.write_errors >= 2
    assert w.rows_unwritten == 5
    assert os.strerror(error) in caplog.text and "keeping them and retrying" in caplog.text
    # Never half a row on disk, whatever the failed write had written.
    assert len(lines(Layout(tmp_path).streams_csv)) == 1 + 3
    status = read_json(Layout(tmp_path).writer_json(w.tag))
    assert status["rows_unwritten"] == 5 and status["write_errors"] == w.write_errors
    assert errno.errorcode[error] in status["last_error"]
    write.failing = False  # space returns
    w.flush(wait=True)
    data = load_run(tmp_path)
    assert sorted(data.streams["stream_id"]) == sorted(f"s-{i}" for i in range(8))
    assert data.duplicate_rows == 0 and data.skipped_rows == 0
    assert len(data.gaps) == 8 * 3
    status = read_json(Layout(tmp_path).writer_json(w.tag))
    assert status["rows_unwritten"] == 0 and status["rows_written"] == 8


def test_the_last_flush_gives_up_loudly(tmp_path, caplog):
    write = FlakyWrite()
    w = ResultsWriter(tmp_path, run_start=1.0, flush_interval=3600, write=write, final_retry_s=0.3)
    write.failing = True
    w.add(record(1))
    with caplog.at_level(logging.ERROR, logger="streamslo.results.writer"):
        w.flush(wait=True)
    assert "giving up on 1 rows" in caplog.text
    totals = writer_totals(tmp_path)
    assert totals["rows_unwritten"] == 1 and totals["write_errors"] >= 2


def test_append_lines_cuts_a_partial_line_back(tmp_path):
    path = tmp_path / "f.csv"
    path.write_bytes(b"head\n")
    write = FlakyWrite(partial=8)
    write.failing = True
    with pytest.raises(PartialAppend) as info:
        append_lines(path, b"row-one\nrow-two\n", write)
    assert info.value.done == 8  # "row-one\n" is whole
    assert path.read_bytes() == b"head\nrow-one\n"
    write2 = FlakyWrite(partial=3)
    write2.failing = True
    with pytest.raises(PartialAppend) as info:
        append_lines(path, b"row-two\n", write2)
    assert info.value.done == 0
    assert path.read_bytes() == b"head\nrow-one\n"


def test_a_full_disk_for_real(tmp_path):
    """A file-size limit (RLIMIT_FSIZE, SIGXFSZ ignored: EFBIG) fills the 'disk' mid-run; rows
    and gaps are kept, never half-written, and land once the limit is lifted."""
    script = textwrap.dedent(
        """
        import json, random, resource, signal, sys, time
        from pathlib import Path
        from streamslo.results.layout import Layout, load_run
        from streamslo.results.writer import ResultsWriter
        from tests.results.helpers import record

        out = Path(sys.argv[1])
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        w = ResultsWriter(out, run_start=time.time(), flush_interval=3600, final_retry_s=0)
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (16_000, hard))
        for i in range(200):
            rec = record(i, gaps=40, error="e" * 120)
            rec.gap_s = [random.random() for _ in rec.gap_s]  # parquet cannot squeeze these
            w.add(rec)
            if i % 100 == 99:
                w.flush()
        w.flush(wait=True)
        full = {"unwritten": w.rows_unwritten, "gaps_unwritten": w.gaps_unwritten,
                "errors": w.write_errors, "last_error": w.last_error,
                "size": Layout(out).streams_csv.stat().st_size,
                "tail": Layout(out).streams_csv.read_bytes()[-1:].decode()}
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        w.flush(wait=True)
        data = load_run(out)
        print(json.dumps({"full": full, "rows": len(data.streams), "ids": int(data.streams["stream_id"].nunique()),
                          "gaps": len(data.gaps), "skipped": data.skipped_rows, "unwritten": w.rows_unwritten}))
        """
    )
    r = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout.strip().splitlines()[-1])
    full = result["full"]
    assert full["unwritten"] > 0 and full["gaps_unwritten"] > 0 and full["errors"] > 0
    assert "EFBIG" in full["last_error"]
    assert full["size"] <= 16_000 and full["tail"] == "\n"  # whole rows only
    assert result == {
        **result,
        "rows": 200,
        "ids": 200,
        "gaps": 200 * 40,
        "skipped": 0,
        "unwritten": 0,
    }
    assert "cannot write" in r.stderr  # said, not silent
