"""Ten nights as a nightly job sees them: each night's results directory (written by the
project's own writer and finalize) is added to the store, then ``streamslo history`` judges it.
Nights 1-7 and 9-10 are noise; night 8's ITL p99 is 30 % higher, and still passes the absolute
threshold ``itl_ms p(99)<200``. Night 8, and only night 8, is a regression."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from streamslo.cli import main
from tests.history.nights import Night, write_night

T0 = 1_800_000_000.0
DAY = 86400.0
PLANTED = 8


@pytest.fixture(scope="module")
def nights(tmp_path_factory) -> list[Path]:
    root = tmp_path_factory.mktemp("nights")
    return [
        write_night(
            root / f"night{n}",
            Night(seed=7000 + n, start=T0 + n * DAY, itl_p99_rise=0.30 if n == PLANTED else 0.0),
        )
        for n in range(1, 11)
    ]


@pytest.fixture(scope="module")
def judged(nights, tmp_path_factory) -> tuple[list[int], Path, Path]:
    """Night after night: add, then judge. Returns the exit codes, the store and the last
    history's folder."""
    out = tmp_path_factory.mktemp("history")
    store = out / "store.sqlite"
    codes = []
    for n, d in enumerate(nights, start=1):
        assert main(["history", "add", str(d), "--store", str(store)]) == 0
        # The page (nine charts) for the nights the tests read; the verdict alone for the rest.
        where = out / f"n{n}" if n in (PLANTED, 10) else out / f"n{n}.json"
        codes.append(main(["history", "--store", str(store), "--out", str(where)]))
    return codes, store, out


def test_night_8_and_only_night_8_fails_the_nightly_job(judged):
    codes, _, _ = judged
    assert codes == [0] * 7 + [99, 0, 0]


def test_night_8_passed_its_absolute_threshold(nights):
    summary = json.loads((nights[PLANTED - 1] / "summary.json").read_text())
    slo = json.loads((nights[PLANTED - 1] / "slo.json").read_text())
    assert summary["itl_ms"]["p99"] < 200 and slo["passed"] is True
    before = [json.loads((d / "summary.json").read_text())["itl_ms"]["p99"] for d in nights[:7]]
    assert summary["itl_ms"]["p99"] > 1.2 * max(before)  # the planted rise is there


def test_the_trend_marks_night_8_only_and_names_the_metric(judged):
    _, _, out = judged
    doc = json.loads((out / "n10" / "history.json").read_text())
    verdicts = [r["verdict"] for r in doc["runs"]]
    assert verdicts == ["no baseline"] * 3 + ["ok"] * 4 + ["regressed", "ok", "ok"]
    night8 = doc["runs"][PLANTED - 1]
    assert night8["regressed"] == ["itl_ms.p99"]
    change = night8["metrics"]["itl_ms.p99"]
    assert 0.2 < change["relative_change"] < 0.4 and change["change_low"] > 0
    # A regression is never a standard: nights 9 and 10 are judged against nights 1-7 (and 9).
    assert PLANTED not in doc["runs"][-1]["baseline"] and len(doc["runs"][-1]["baseline"]) == 7
    assert doc["exit_code"] == 0 and doc["verdict"] == "ok"


def test_night_8s_outputs_say_so(judged):
    _, _, out = judged
    md = (out / "n8" / "history.md").read_text()
    assert "REGRESSION" in md and "itl_ms.p99" in md and "| regressed |" in md
    page = (out / "n8" / "history.html").read_text()
    assert page.count('<img alt="itl_ms.p99 over the last') == 1
    assert page.count("data:image/png;base64,") == 9  # a chart per judged metric
    assert json.loads((out / "n8" / "history.json").read_text())["exit_code"] == 99


def test_the_first_nights_have_no_verdict_yet(judged):
    _, _, out = judged
    doc = json.loads((out / "n2.json").read_text())
    assert not (out / "n2.html").exists() and not (out / "n2.md").exists()
    assert doc["verdict"] == "no baseline" and "No verdict" in doc["headline"]
