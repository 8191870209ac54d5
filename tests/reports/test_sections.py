"""The report's optional sections follow one protocol (streamslo.reports.section) and
``build_report`` iterates them without naming any (issue 36, item 5)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from streamslo.reports import build_report
from streamslo.reports.load import load_report_runs
from streamslo.reports.section import SectionInput
from streamslo.reports.sections import SECTIONS, build_sections
from streamslo.slo.thresholds import DEFAULT_SLO
from tests.reports.conftest import write_fixed

BUILD = Path(__file__).resolve().parents[2] / "streamslo" / "reports" / "build.py"


def test_no_function_of_build_py_passes_60_lines_and_none_names_a_section() -> None:
    tree = ast.parse(BUILD.read_text())
    lengths = {
        n.name: n.end_lineno - n.lineno + 1
        for n in ast.walk(tree)
        if isinstance(n, ast.FunctionDef) and n.end_lineno is not None
    }
    assert lengths and max(lengths.values()) <= 60, lengths
    text = BUILD.read_text()
    for module in ("scenarios", "levels", "turns", "soak", "session_view", "replay"):
        assert f"reports.{module}" not in text, module


def test_every_section_follows_the_protocol(tmp_path: Path) -> None:
    run = write_fixed(tmp_path / "fixed")
    runs = load_report_runs(None, run.path)
    sections = build_sections(SectionInput(runs, DEFAULT_SLO, None))
    assert len(sections) == len(SECTIONS) == 6
    keys = [s.key for s in sections]
    assert len(set(keys)) == len(keys)
    for sec in sections:
        assert isinstance(sec.title, str) and sec.title
        assert isinstance(sec.charts_first, bool)
        assert sec.charts() == ()  # a plain 30 s run has nothing for any of them
        assert sec.html() == "" and sec.markdown() == ""
        json.dumps(sec.to_json())  # plain data


@pytest.mark.parametrize("stages", [None, "1s:2,5s:2,1s:4,5s:4"])
def test_report_json_has_every_sections_key_and_the_page_only_those_with_data(
    tmp_path: Path, stages: str | None
) -> None:
    run = write_fixed(tmp_path / "fixed")
    res = build_report(
        None, run.path, tmp_path / "out" / "report.html", resamples=20, stages=stages
    )
    data = json.loads(res.json.read_text())
    for key in ("scenarios", "levels", "turns", "soak", "sessions", "replay"):
        assert key in data, key
    page = res.html.read_text()
    assert ("<h2>Load levels</h2>" in page) == bool(stages)
    assert bool(data["levels"]) == bool(stages)
    assert "<h2>Scenarios</h2>" not in page and "<h2>TTFT by turn</h2>" not in page
