"""summary.json's counts agree with each other (docs/results.md): requests = counted +
cancelled, every rate and requests/s over the counted requests (truncation over those that
began), and the terminal summary says which is which."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamslo.results.layout import Layout, read_json
from streamslo.results.summary_table import format_summary
from streamslo.runfiles.finalize import finalize
from streamslo.verify.testing import stream_row, write_run


def test_requests_counted_cancelled_and_the_rates_share_their_denominators(tmp_path: Path):
    rows = [stream_row(f"ok{i}") for i in range(100)]
    rows += [stream_row(f"t{i}", outcome="truncated", error="reset") for i in range(6)]
    rows += [
        stream_row(f"h{i}", outcome="http_5xx", status=503, ttft_ms=None, tokens=0)
        for i in range(3)
    ]
    rows += [stream_row(f"c{i}", outcome="cancelled") for i in range(10)]  # the run's end
    rows += [stream_row(f"k{i}", outcome="client_cancelled") for i in range(4)]  # hung up on
    d = write_run(
        tmp_path / "run",
        rows,
        run={"start_epoch": 1_700_000_000.0, "end_epoch": 1_700_000_050.0},
    )
    finalize(d, {"start_epoch": 1_700_000_000.0, "end_epoch": 1_700_000_050.0})
    s = read_json(Layout(d).summary_json)
    assert s["requests"] == 123 == sum(s["outcomes"].values())
    assert (s["counted"], s["cancelled"], s["began"]) == (109, 14, 106)
    assert s["requests"] == s["counted"] + s["cancelled"]
    assert s["duration_s"] == pytest.approx(50.0)
    assert s["requests_per_s"] == pytest.approx(s["counted"] / s["duration_s"])
    assert s["error_rate"] == pytest.approx(9 / s["counted"])
    assert s["http_5xx_rate"] == pytest.approx(3 / s["counted"])
    assert s["truncation_rate"] == pytest.approx(6 / s["began"])
    line = next(
        ln
        for ln in format_summary(s, [], read_json(Layout(d).run_json)).splitlines()
        if ln.startswith("requests ")
    )
    assert line.startswith("requests 123 (109 counted, 14 cancelled by the run, in no rate)")
    assert f"requests/s {s['requests_per_s']:,.1f} (counted)" in line
