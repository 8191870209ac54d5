"""Loading streams.csv: damaged rows are counted (never hidden), unknown outcomes rejected."""

from __future__ import annotations

import pandas as pd
import pytest

from streamslo.errors import ResultsError
from streamslo.results.columns import STREAM_COLUMNS
from streamslo.results.layout import Layout, load_run
from streamslo.verify.testing import stream_row, write_run


def _append(directory, text: str) -> None:
    with open(Layout(directory).streams_csv, "a") as f:
        f.write(text)


def _row_text(stream_id: str, **fields) -> str:
    row = stream_row(stream_id, **fields)
    return ",".join("" if row[c] is None else str(row[c]) for c in STREAM_COLUMNS) + "\n"


def test_types_match_the_columns(tmp_path):
    write_run(
        tmp_path, [stream_row("a"), stream_row("b", status=503, outcome="http_5xx", ttft_ms=None)]
    )
    s = load_run(tmp_path).streams
    assert list(s.columns) == list(STREAM_COLUMNS)
    assert s["started_at"].dtype == "float64" and s["ttft_ms"].dtype == "float64"
    assert str(s["status"].dtype) == "Int64" and str(s["tokens"].dtype) == "Int64"
    assert isinstance(s["stream_id"].dtype, pd.StringDtype) and isinstance(
        s["error"].dtype, pd.StringDtype
    )
    assert s["ttft_ms"].isna().tolist() == [False, True]
    assert s["status"].tolist() == [200, 503]


def test_short_and_long_rows_are_skipped_and_counted(tmp_path):
    write_run(tmp_path, [stream_row("a"), stream_row("b")])
    good = _row_text("c")
    _append(tmp_path, good[:40] + "\n")  # a row cut short (record 4)
    _append(tmp_path, good.rstrip("\n") + ",extra,fields\n")  # too many fields (record 5)
    _append(tmp_path, _row_text("d"))
    data = load_run(tmp_path)
    assert sorted(data.streams["stream_id"]) == ["a", "b", "d"]
    assert data.skipped_rows == 2
    assert data.skipped_at == (4, 5)


def test_error_text_with_commas_quotes_and_newlines_is_one_row(tmp_path):
    nasty = 'reset by peer, "twice"\nthen: closed'
    write_run(tmp_path, [stream_row("a", outcome="truncated", error=nasty), stream_row("b")])
    data = load_run(tmp_path)
    assert data.skipped_rows == 0
    assert data.streams.set_index("stream_id").loc["a", "error"] == nasty


def test_an_unknown_outcome_names_file_and_line(tmp_path):
    write_run(tmp_path, [stream_row("a"), stream_row("b"), stream_row("c", outcome="exploded")])
    with pytest.raises(ResultsError) as info:
        load_run(tmp_path)
    msg = str(info.value)
    assert f"{Layout(tmp_path).streams_csv}:4:" in msg
    assert "unknown outcome 'exploded'" in msg and "expected one of ok," in msg


def test_an_empty_outcome_is_rejected(tmp_path):
    write_run(tmp_path, [stream_row("a", outcome=None)])
    with pytest.raises(ResultsError, match=r"streams.csv:2: an empty outcome"):
        load_run(tmp_path)


def test_a_stream_written_twice_counts_once(tmp_path):
    write_run(tmp_path, [stream_row("a", outcome="truncated"), stream_row("a")])
    data = load_run(tmp_path)
    assert data.streams["outcome"].tolist() == ["ok"]
    assert data.duplicate_rows == 1


@pytest.mark.parametrize(
    ("content", "match"), [(b"", "empty"), (b"stream_id,outcome\nx,ok\n", "missing columns")]
)
def test_a_damaged_file_is_a_results_error(tmp_path, content, match):
    write_run(tmp_path, [stream_row("a")])
    Layout(tmp_path).streams_csv.write_bytes(content)
    with pytest.raises(ResultsError, match=match):
        load_run(tmp_path)


def test_header_only_is_an_empty_run(tmp_path):
    write_run(tmp_path, [])
    data = load_run(tmp_path)
    assert len(data.streams) == 0 and data.skipped_rows == 0


def test_a_cell_that_is_not_a_number_reads_as_missing(tmp_path):
    write_run(tmp_path, [stream_row("a", ttft_ms="fast", tokens="many"), stream_row("b")])
    s = load_run(tmp_path).streams.set_index("stream_id")
    assert pd.isna(s.loc["a", "ttft_ms"]) and pd.isna(s.loc["a", "tokens"])
    assert s.loc["b", "ttft_ms"] == 50.0 and s["ttft_ms"].dtype == "float64"
