"""What a person reads in the report: change judged by direction, the failures section with
error texts, sections left out when they have no data, a glossary, no Python reprs."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pandas as pd
import pytest

from streamslo.figures.windows import WINDOW_COLUMNS
from streamslo.reports import build_report
from streamslo.reports.failures import failure_groups
from streamslo.reports.glossary import change_word, glossary_terms, protocol_text
from streamslo.reports.load import load_report_runs
from streamslo.reports.soak import MIN_WINDOWS, soak_sections
from streamslo.runfiles.windows_csv import format_rows
from tests.reports.conftest import START, write_fixed, write_naive, write_run

# ------------------------------------------------------------------ direction of change


@pytest.mark.parametrize(
    ("metric", "delta", "significant", "word"),
    [
        ("ttft_ms", -40.0, True, "better"),
        ("ttft_ms", 40.0, True, "worse"),
        ("itl_ms{protocol:ws}", 5.0, True, "worse"),
        ("truncation_rate", 0.02, True, "worse"),
        ("error_rate", -0.02, True, "better"),
        ("tokens_per_s", 100.0, True, "better"),
        ("goodput_fraction", -0.1, True, "worse"),
        ("ttft_ms", 40.0, False, "within noise"),
        ("http_5xx_rate", 0.0, False, "no change"),
        ("ttft_ms", None, None, None),
    ],
)
def test_change_is_judged_by_the_metrics_direction(
    metric: str, delta: float | None, significant: bool | None, word: str | None
) -> None:
    assert change_word(metric, delta, significant) == word


def _judged(html: str) -> dict[str, list[str]]:
    """Each latency row's judged word and the class its cell is drawn with."""
    return {
        cls: re.findall(rf'<span class="{cls}">([a-z ]+)</span>', html)
        for cls in ("better", "worse", "noise")
    }


def test_a_regression_is_red_and_called_worse(tmp_path: Path) -> None:
    fixed, naive = write_fixed(tmp_path / "fixed"), write_naive(tmp_path / "naive")
    # after = naive: slower and failing, a regression on every latency and rate
    res = build_report(fixed.path, naive.path, tmp_path / "out" / "report.html", resamples=200)
    itl = next(lc for lc in res.report.latency if lc.metric == "itl_ms")
    p99 = next(d for d in itl.differences if d.stat == "p99")
    assert p99.delta is not None and p99.delta > 0 and p99.significant
    assert p99.change == "worse"
    trunc = next(r for r in res.report.rates if r.metric == "truncation_rate")
    assert trunc.difference is not None and trunc.difference.change == "worse"
    cells = _judged(res.html.read_text())
    assert "worse" in cells["worse"] and not cells["better"]
    assert "real" not in res.html.read_text().split("<h2>Latency (ms)</h2>")[1].split("</table>")[0]

    # and the other way round, better in green
    back = build_report(naive.path, fixed.path, tmp_path / "back" / "report.html", resamples=200)
    itl = next(lc for lc in back.report.latency if lc.metric == "itl_ms")
    changes = {d.stat: d.change for d in itl.differences}
    assert changes["p99"] == "better" and "worse" not in changes.values()
    cells = _judged(back.html.read_text())
    assert "better" in cells["better"] and not cells["worse"]


# ------------------------------------------------------------------ failures section


def test_the_failures_section_counts_groups_from_streams_csv(tmp_path: Path) -> None:
    naive = write_naive(tmp_path / "naive")  # 4 http_5xx ("500"), truncations ("reset")
    (run,) = load_report_runs(None, naive.path)
    groups = {g.outcome: g for g in failure_groups([run])}
    assert groups["http_5xx"].errors[0].error == "500" and groups["http_5xx"].count == 4
    assert groups["truncated"].errors[0].error == "reset"
    assert {g.source for g in groups.values()} == {"streams.csv"}
    # A summary.json written by another version (exact texts, not groups) is not read: the
    # report follows the one rule whatever wrote the run.
    summary = {"top_errors": {"http_5xx": [{"error": "HTTP 503: overloaded", "count": 3}]}}
    (naive.path / "summary.json").write_text(json.dumps(summary))
    (run,) = load_report_runs(None, naive.path)
    again = {g.outcome: g for g in failure_groups([run])}
    assert again["http_5xx"].errors == groups["http_5xx"].errors


def _all_failed(path: Path) -> None:
    write_run(path, n=40, run={"valid": False, "invalid_reason": "generator saturated"})
    streams = pd.read_csv(path / "streams.csv")
    streams["outcome"] = "connect_error"
    streams["error"] = "ConnectionRefusedError: [Errno 111] Connection refused"
    for col in (
        "ttft_ms",
        "e2e_ms",
        "tokens",
        "max_gap_ms",
        "bytes",
        "status",
        "expected_tokens",
        "usage_completion_tokens",
        "finish_reason",
    ):
        streams[col] = None
    streams.to_csv(path / "streams.csv", index=False)
    gaps = pd.read_parquet(path / "gaps.parquet").iloc[0:0]
    gaps.to_parquet(path / "gaps.parquet", index=False)


def test_an_all_failure_run_is_titled_sensibly_and_shows_its_error_text(tmp_path: Path) -> None:
    _all_failed(tmp_path / "ex1")
    res = build_report(None, tmp_path / "ex1", tmp_path / "out" / "report.html", resamples=50)
    page = res.html.read_text()
    assert "run run" not in page and "run run" not in res.summary
    assert "<title>streamslo report: ex1</title>" in page
    assert "The run (ex1) is INVALID" in page
    assert "<h2>Failures: the most frequent error texts</h2>" in page
    assert "[Errno 111] Connection refused" in page
    headline = re.search(r'<div class="banner failb">([^<]*)</div>', page)
    assert headline and "Every one of its 40 requests failed: 40 connect_error" in headline.group(1)
    assert "Connection refused" in res.summary
    # nothing was measured: no latency table, no CDF, no flat activity chart
    assert "<h2>Latency (ms)</h2>" not in page
    assert "CDF" not in page and "Active streams" not in page
    assert "no data" in page  # the thresholds with nothing to measure
    md = res.markdown.read_text()
    assert "Failures" in md and "Connection refused" in md


# ------------------------------------------------------------------ sections only with data


def test_a_clean_run_has_no_empty_sections(tmp_path: Path) -> None:
    fixed = write_fixed(tmp_path / "fixed", duration=10.0)
    res = build_report(None, fixed.path, tmp_path / "out" / "report.html", resamples=50)
    page = res.html.read_text()
    assert res.report.failures == ()
    for absent in (
        "Failures",
        "Server-side evidence",
        "Failed requests by outcome",
        "Truncation causes",
        "no failed requests",
        "Long run",
    ):
        assert absent not in page, absent
    for present in ("SLO verdicts", "Latency (ms)", "Charts", "Glossary", "Run"):
        assert f"<h2>{present}</h2>" in page


def _windows(path: Path, n: int) -> None:
    rows = [
        {c: 0 for c in WINDOW_COLUMNS}
        | {"window_start": START + 10.0 * i, "window_s": 10.0, "gen_rss_mb": 100.0 + i}
        for i in range(n)
    ]
    (path / "windows.csv").write_bytes(format_rows(rows, header=True))


def test_a_short_run_gets_no_long_run_section(tmp_path: Path) -> None:
    short = write_fixed(tmp_path / "short", duration=10.0)
    _windows(short.path, MIN_WINDOWS - 1)
    assert soak_sections(load_report_runs(None, short.path)) == ()
    res = build_report(None, short.path, tmp_path / "out" / "report.html", resamples=50)
    page = res.html.read_text()
    assert "Long run" not in page and "too short" not in page and "Drift" not in page

    longer = write_fixed(tmp_path / "longer", duration=60.0)
    _windows(longer.path, MIN_WINDOWS)
    (sec,) = soak_sections(load_report_runs(None, longer.path))
    res = build_report(None, longer.path, tmp_path / "out2" / "report.html", resamples=50)
    page = res.html.read_text()
    assert "Long run" in page
    # a series too short to judge is one line, not a chart marked "too short"
    assert sec.drift["gen_rss_mb"]["verdict"] == "too short"
    assert "Drift not judged for gen_rss_mb" in page
    assert "— too short" not in page and "<h4>Drift and leaks</h4>" not in page


# ------------------------------------------------------------------ words, units, glossary


def test_protocol_mix_reads_as_words_not_a_dict() -> None:
    assert protocol_text("sse", {"sse": 1.0, "slow_readers": 0.0}) == "SSE"
    assert protocol_text("mixed", {"sse": 0.7, "ws": 0.3}) == "SSE 70 %, WS 30 %"
    assert protocol_text("sse", {"sse": 1.0, "slow_readers": 0.1}) == "SSE, slow readers 10 %"
    assert protocol_text("ws") == "WS" and protocol_text(None) == "—"


def test_no_python_reprs_units_and_a_glossary_of_every_metric_shown(tmp_path: Path) -> None:
    mix = {"protocol": "mixed", "protocol_mix": {"sse": 0.5, "ws": 0.5, "slow_readers": 0.0}}
    b = write_naive(tmp_path / "naive", run={"server_mode": "naive", **mix})
    a = write_fixed(tmp_path / "fixed", run={"server_mode": "fixed", "users": 60, **mix})
    res = build_report(b.path, a.path, tmp_path / "out" / "report.html", resamples=100)
    for text in (res.html.read_text(), res.markdown.read_text(), res.summary):
        assert "{'" not in text and "': " not in text
    page = res.html.read_text()
    assert "SSE 50 %, WS 50 %" in page
    assert "differ in users: 50 before, 60 after" in page
    ids = {g.metric for g in res.report.glossary}
    assert ids >= {
        "ttft_ms",
        "itl_ms",
        "tpot_ms",
        "e2e_ms",
        "truncation_rate",
        "http_5xx_rate",
        "error_rate",
        "tokens_per_s",
        "requests_per_s",
    }
    assert "<h2>Glossary</h2>" in page
    glossary = page.split("<h2>Glossary</h2>")[1]
    for g in res.report.glossary:
        meaning = html.escape(
            g.meaning.split(",")[0]
        )  # as the page writes it ('x' -> &#x27;x&#x27;)
        assert f"<td>{g.metric}</td>" in glossary and meaning in glossary
    assert "Time to first token (ttft_ms)" in page  # ids named where shown
    assert re.search(r"<td>[\d.,]+ ms</td>", page)  # verdict values carry their unit
    assert re.search(r"<td>[\d.,]+ /s</td>", page)


def test_glossary_terms_come_from_the_registry_once_each() -> None:
    terms = glossary_terms(["ttft_ms", "ttft_ms{protocol:ws}", "no_such_metric", "error_rate"])
    assert [t[0] for t in terms] == ["ttft_ms", "error_rate"]
    assert terms[0][1:3] == ("Time to first token", "ms")
    assert terms[1][2] == "% of requests"


def test_values_carry_units_and_a_tiny_rate_does_not_read_zero() -> None:
    from streamslo.reports.tables import (
        ci_text,
        fmt,
        value_text,
    )

    assert value_text("truncation_rate", 0.02) == "2.00 %"
    assert value_text("truncation_rate", 0.00004) == "0.0040 %"  # not "0.00 %" beside a fail
    assert value_text("itl_ms", 38.79) == "38.8 ms"
    assert value_text("tokens_per_s", 443.8) == "443.8 /s"
    assert value_text("itl_ms", None) == "—" and fmt(None) == "—"
    assert ci_text(None) == "—"


def test_runs_of_two_dialects_are_said_to_differ(tmp_path: Path) -> None:
    b = write_fixed(tmp_path / "chat", run={"server_mode": "fixed", "api": "openai-chat"})
    a = write_fixed(tmp_path / "msgs", run={"server_mode": "fixed", "api": "anthropic-messages"})
    res = build_report(b.path, a.path, tmp_path / "out" / "report.html", resamples=50)
    assert "differ in dialect: openai-chat before, anthropic-messages after" in res.summary
    same = write_fixed(tmp_path / "chat2", run={"server_mode": "fixed", "api": "openai-chat"})
    res = build_report(b.path, same.path, tmp_path / "out2" / "report.html", resamples=50)
    assert "differ in dialect" not in res.summary
