"""streams.csv's columns are declared once (streamslo/results/columns.py): the row, the header,
the parser's types and the spreadsheet-safe fields all come from that table."""

from __future__ import annotations

import dataclasses

from streamslo.loadgen.listeners import csv_safe_record
from streamslo.results.columns import (
    COLUMNS,
    FLOAT_COLUMNS,
    INT_COLUMNS,
    SAFE_FIELDS,
    STREAM_COLUMNS,
    TEXT_COLUMNS,
    stream_row,
)
from streamslo.stream.outcome import Outcome
from streamslo.stream.timing import StreamRecord


def _record() -> StreamRecord:
    rec = StreamRecord("p1-ab-1", "sse", "SSEStreamUser", 1_700_000_000.25, 10.0)
    rec.outcome = Outcome.OK
    rec.ttft_s, rec.e2e_s, rec.tokens = 0.0125, 0.5, 3
    rec.gap_s.extend([0.1, 0.2])
    rec.scheduled_at = 1_700_000_000.0
    return rec


def test_every_column_once_and_typed():
    assert len(set(STREAM_COLUMNS)) == len(STREAM_COLUMNS) == len(COLUMNS)
    assert sorted(TEXT_COLUMNS + INT_COLUMNS + FLOAT_COLUMNS) == sorted(STREAM_COLUMNS)


def test_the_row_follows_the_table():
    row = stream_row(_record())
    assert list(row) == list(STREAM_COLUMNS)
    assert row["ttft_ms"] == 12.5 and row["max_gap_ms"] == 200.0
    assert row["schedule_lag_ms"] == 250.0
    assert row["tokens"] == 3 and row["scenario"] is None


def test_every_free_text_field_is_made_spreadsheet_safe_scenario_names_too():
    """The list of safe fields once lacked ``scenario``: a scenario named ``=cmd()`` reached the
    file as a formula."""
    assert "scenario" in SAFE_FIELDS and "error" in SAFE_FIELDS
    record_fields = {f.name for f in dataclasses.fields(StreamRecord)}
    assert set(SAFE_FIELDS) <= record_fields
    rec = dataclasses.replace(_record(), scenario="=HYPERLINK(1)", error="+1 bad")
    safe = csv_safe_record(rec)
    assert not str(safe.scenario).startswith("=") and not safe.error.startswith("+")
