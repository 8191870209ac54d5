"""Finished streams on their way to the results directory, as one compact batch.

A :class:`RecordBatch` holds the ``streams.csv`` rows of some finished streams (already
formatted, so whoever writes them only appends bytes) and their gaps as flat columns
(:class:`GapColumns`: C arrays of numbers, never a dict per gap). The same batch is what a
local writer buffers between flushes and what a Locust worker sends to its master
(:meth:`RecordBatch.to_wire`, :meth:`RecordBatch.from_wire`: bytes, ints and a list of stream
ids, which msgpack carries as they are).

Gap times travel as the worker took them (``perf_counter`` values, plus each stream's epoch
offset ``started_at - t0``): only the process that writes knows the run's start, so it turns
them into seconds since the start (:meth:`GapColumns.table`).
"""

from __future__ import annotations

import csv
import io
import sys
from array import array
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from streamslo.results.columns import STREAM_COLUMNS, stream_row
from streamslo.stream.timing import StreamRecord

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["GapColumns", "RecordBatch"]

_LITTLE = sys.byteorder == "little"


def _le(a: array[Any]) -> bytes:
    """An array's bytes in little-endian order (the wire's order, whatever the host's)."""
    if _LITTLE:
        return a.tobytes()
    b = array(a.typecode, a)
    b.byteswap()
    return b.tobytes()


def _from_le(typecode: str, data: Any, field: str) -> array[Any]:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ValueError(f"{field}: expected bytes, got {type(data).__name__}")
    a = array(typecode)
    if len(data) % a.itemsize:
        raise ValueError(
            f"{field}: {len(data)} bytes is not a whole number of {a.itemsize}-byte items"
        )
    a.frombytes(bytes(data))
    if not _LITTLE:
        a.byteswap()
    return a


class GapColumns:
    """The gaps of some finished streams, in flat C arrays: adding a stream costs a few
    microseconds, and the parquet table is built from them with numpy.

    Per stream (one entry per stream that has gaps): ``ids``, ``base`` (epoch seconds of its
    ``perf_counter`` zero: ``started_at - t0``), ``count`` (its gaps) and ``open`` (its last gap
    is a failed stream's open gap). Per gap: ``gap_s`` and ``t`` (``perf_counter`` at its end).
    Gap indices (1, 2, ... within each stream) follow from ``count``.
    """

    __slots__ = ("base", "count", "gap_s", "ids", "open", "t")

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.base = array("d")
        self.count = array("i")
        self.open = bytearray()
        self.gap_s = array("d")
        self.t = array("d")

    def __len__(self) -> int:
        """The number of gaps."""
        return len(self.gap_s)

    @property
    def streams(self) -> int:
        """The number of streams with gaps."""
        return len(self.ids)

    def add(self, rec: StreamRecord) -> None:
        """Append one finished stream's gaps (nothing for a stream without gaps)."""
        n = len(rec.gap_s)
        if not n:
            return
        self.ids.append(rec.stream_id)
        self.base.append(rec.started_at - rec.t0)
        self.count.append(n)
        self.open.append(1 if rec.open_gap else 0)
        self.gap_s.extend(rec.gap_s)
        self.t.extend(rec.gap_t)

    def extend(self, other: GapColumns) -> None:
        """Append every stream of ``other``."""
        self.ids.extend(other.ids)
        self.base.extend(other.base)
        self.count.extend(other.count)
        self.open.extend(other.open)
        self.gap_s.extend(other.gap_s)
        self.t.extend(other.t)

    def table(self, run_start: float) -> pa.Table:
        """The ``gaps.parquet`` columns as a pyarrow table, ``t`` in seconds since ``run_start``."""
        import numpy as np
        import pyarrow as pa

        count = np.frombuffer(self.count, dtype=np.int32)
        code = np.repeat(np.arange(len(count), dtype=np.int32), count)
        ends = np.cumsum(count)
        # index: 1..count within each stream (position minus the stream's first position).
        index = np.arange(1, len(code) + 1, dtype=np.int32) - np.repeat(
            (ends - count).astype(np.int32), count
        )
        # Per stream first (small numbers), then per gap: as exact as adding to each gap.
        shift = np.frombuffer(self.base, dtype=np.float64) - run_start
        t = np.frombuffer(self.t, dtype=np.float64) + shift[code]
        is_open = np.zeros(len(code), dtype=np.bool_)
        is_open[ends - 1] = np.frombuffer(bytes(self.open), dtype=np.uint8).astype(np.bool_)
        return pa.table(
            {
                # A plain string column (not dictionary-encoded): readers get ordinary strings.
                "stream_id": pa.array(self.ids, pa.string()).take(pa.array(code)),
                "index": pa.array(index),
                "gap_ms": pa.array(np.frombuffer(self.gap_s, dtype=np.float64) * 1000.0),
                "t": pa.array(t),
                "open": pa.array(is_open),
            }
        )

    def to_wire(self) -> dict[str, object]:
        """msgpack-safe columns: the ids as a list, every number column as little-endian bytes."""
        return {
            "ids": list(self.ids),
            "base": _le(self.base),
            "count": _le(self.count),
            "open": bytes(self.open),
            "gap_s": _le(self.gap_s),
            "t": _le(self.t),
        }

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> GapColumns:
        """The columns :meth:`to_wire` made.

        Raises:
            ValueError: a column is missing, of the wrong type, or of a length that does not
                agree with the others.
        """
        g = cls()
        ids = data.get("ids")
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise ValueError("ids: expected a list of stream ids")
        g.ids = ids
        g.base = _from_le("d", data.get("base"), "base")
        g.count = _from_le("i", data.get("count"), "count")
        opened = data.get("open")
        if not isinstance(opened, (bytes, bytearray)):
            raise ValueError("open: expected bytes")
        g.open = bytearray(opened)
        g.gap_s = _from_le("d", data.get("gap_s"), "gap_s")
        g.t = _from_le("d", data.get("t"), "t")
        if not len(ids) == len(g.base) == len(g.count) == len(g.open):
            raise ValueError(
                f"{len(ids)} stream ids but {len(g.base)} bases, {len(g.count)} counts, {len(g.open)} flags"
            )
        if min(g.count, default=1) < 1:
            raise ValueError("count: a stream with gaps has at least one")
        if sum(g.count) != len(g.gap_s) or len(g.gap_s) != len(g.t):
            raise ValueError(
                f"counts add up to {sum(g.count)} gaps, but {len(g.gap_s)} gaps and {len(g.t)} times came"
            )
        return g


def _cell(value: object) -> object:
    if value is None:
        return ""
    if isinstance(value, str) and ("\n" in value or "\r" in value):
        return value.replace("\r\n", " ").replace("\n", " ").replace("\r", " ")
    return value


class RecordBatch:
    """Finished streams: their ``streams.csv`` rows, formatted, and their gaps as columns.

    Adding a stream formats its row at once, so whoever writes the batch only appends bytes: a
    master that receives batches from many workers does no per-record work but that.
    """

    __slots__ = ("_csv", "_raw", "_rows", "_text", "gaps")

    def __init__(self) -> None:
        self._text = io.StringIO()  # rows formatted here
        self._csv = csv.writer(self._text, lineterminator="\n")
        self._raw = bytearray()  # rows that came formatted (from a worker)
        self._rows = 0
        self.gaps = GapColumns()
        """The gaps of the streams added."""

    def __len__(self) -> int:
        """The number of streams (rows)."""
        return self._rows

    def add(self, rec: StreamRecord) -> None:
        """Append one finished stream (its text cells already safe to write).

        A line break in a text cell (a server's multi-line error) becomes a space: one row is
        one line, which is what lets the writer count rows and cut a failed append back to
        whole rows by looking for newlines.
        """
        row = stream_row(rec)
        self._csv.writerow([_cell(row[c]) for c in STREAM_COLUMNS])
        self._rows += 1
        self.gaps.add(rec)

    def extend(self, other: RecordBatch) -> None:
        """Append every stream of ``other``."""
        self._raw += other.rows_bytes()
        self._rows += other._rows
        self.gaps.extend(other.gaps)

    def rows_bytes(self) -> bytes:
        """The rows, as ``streams.csv`` lines (UTF-8)."""
        text = self._text.getvalue()
        return bytes(self._raw) + text.encode() if text else bytes(self._raw)

    def to_wire(self) -> dict[str, object]:
        """The batch as msgpack-safe data: the rows as UTF-8 bytes, the gaps as columns."""
        return {"rows": self.rows_bytes(), "n": self._rows, "gaps": self.gaps.to_wire()}

    @classmethod
    def from_wire(cls, data: Any) -> RecordBatch:
        """The batch :meth:`to_wire` made.

        Raises:
            ValueError: the data is not such a batch (the message says what is wrong).
        """
        if not isinstance(data, Mapping):
            raise ValueError("expected a mapping")
        rows, n, gaps = data.get("rows"), data.get("n"), data.get("gaps")
        if (
            not isinstance(rows, (bytes, bytearray))
            or not isinstance(n, int)
            or not isinstance(gaps, Mapping)
        ):
            raise ValueError("expected rows (bytes), n (int) and gaps (a mapping)")
        lines = rows.count(b"\n")
        if lines != n or (rows and not rows.endswith(b"\n")):
            raise ValueError(
                f"{n} rows announced, {lines} lines came (one whole line per row expected)"
            )
        try:
            rows.decode()  # a row that is not UTF-8 would make streams.csv unreadable
        except UnicodeDecodeError as exc:
            raise ValueError(f"rows: not UTF-8 ({exc})") from None
        batch = cls()
        batch._raw += rows
        batch._rows = n
        batch.gaps = GapColumns.from_wire(gaps)
        return batch
