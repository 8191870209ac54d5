"""docs/history.md's examples hold: its [regression] example reads, with the values it says."""

from __future__ import annotations

import re
from pathlib import Path

from streamslo.slo.regression import Margin, read_regression

DOC = Path(__file__).resolve().parents[2] / "docs" / "history.md"


def test_the_regression_example_reads(tmp_path):
    (block,) = re.findall(r"```toml\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    path = tmp_path / "slo.toml"
    path.write_text(block)
    s = read_regression(path)
    assert (s.baseline, s.last, s.min_baseline, s.confidence) == (7, 30, 3, 0.95)
    assert s.margin("itl_ms.p99") == Margin(0.15, True)
    assert s.margin("truncation_rate") == Margin(0.0005, False)


def test_the_page_names_the_defaults_the_code_has():
    from streamslo.slo.regression import DEFAULT_JUDGED, DEFAULT_REGRESSION

    text = DOC.read_text(encoding="utf-8")
    for metric in DEFAULT_JUDGED:
        assert f"`{metric}`" in text, metric
    assert f"(`baseline`, {DEFAULT_REGRESSION.baseline}" in text
    assert f"`min_baseline` ({DEFAULT_REGRESSION.min_baseline})" in text
