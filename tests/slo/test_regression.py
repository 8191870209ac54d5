"""An SLO file's [regression] table: the baseline, the margins (dotted or quoted keys, shares or
amounts), and errors that name the file and line as the rest of the SLO file's."""

from __future__ import annotations

import pytest

from streamslo.errors import SLOFileError
from streamslo.options.toml_file import parse_toml
from streamslo.slo.budget import sections_of
from streamslo.slo.regression import (
    DEFAULT_JUDGED,
    HISTORY_METRICS,
    Margin,
    parse_margin,
    read_regression,
    regression_of,
)
from streamslo.slo.thresholds import load_slo

FULL = """\
[thresholds]
itl_ms = ["p(99)<200"]

[regression]
baseline = 5
last = 20
min_baseline = 2
confidence = 0.9
metrics = ["itl_ms.p99", "truncation_rate"]

[regression.margins]
itl_ms.p99 = "15%"
"ttft_ms.p50" = "5 %"
truncation_rate = 0.0005
"""


def test_a_full_table(tmp_path):
    path = tmp_path / "slo.toml"
    path.write_text(FULL)
    s = read_regression(path)
    assert (s.baseline, s.last, s.min_baseline, s.confidence) == (5, 20, 2, 0.9)
    assert s.metrics == ("itl_ms.p99", "truncation_rate")
    assert s.margin("itl_ms.p99") == Margin(0.15, True)
    assert s.margin("ttft_ms.p50") == Margin(0.05, True)
    assert s.margin("truncation_rate") == Margin(0.0005, False)
    assert s.margin("e2e_ms.p99") == HISTORY_METRICS["e2e_ms.p99"].margin  # the default
    # The rest of the SLO file reads as before.
    assert len(load_slo(path)) == 1 and sections_of(parse_toml(FULL, "x"))[1] is None


def test_without_the_table_the_defaults():
    s = regression_of(parse_toml('[thresholds]\nitl_ms = ["p(99)<200"]\n', "x.toml"))
    assert s.baseline == 7 and s.metrics == DEFAULT_JUDGED and s.margins == {}


def test_a_file_with_the_table_alone_is_read(tmp_path):
    path = tmp_path / "r.toml"
    path.write_text("[regression]\nbaseline = 3\n")
    assert read_regression(path).baseline == 3


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("[regression]\nbaseline = 7\nwindow = 3\n", 3, "unknown key 'window'"),
        ("[regression]\nbaseline = 0\n", 2, "baseline must be a whole number"),
        ("[regression]\nconfidence = 95\n", 2, "confidence must be a number in [0.5, 1)"),
        ('[regression]\nmetrics = ["itl_ms.p98"]\n', 2, "did you mean 'itl_ms.p99'"),
        ("[regression]\nbaseline = 3\nmin_baseline = 4\n", 3, "cannot exceed baseline"),
        ('[regression]\n\n[regression.margins]\nitl_ms.p99 = "ten"\n', 4, "a margin is a share"),
        ("[regression.margins]\nitl_ms.p99 = -1\n", 2, "cannot be negative"),
        ('[regression.margins]\n"nope" = "10%"\n', 2, "unknown history metric 'nope'"),
        ("[regresion]\nbaseline = 3\n", 1, "unknown top-level key 'regresion'"),
    ],
)
def test_errors_name_the_file_and_line(tmp_path, text, line, words):
    path = tmp_path / "slo.toml"
    path.write_text(text)
    with pytest.raises(SLOFileError) as err:
        read_regression(path)
    assert err.value.line == line, str(err.value)
    assert str(err.value).startswith(f"{path}:{line}: ") and words in str(err.value)


def test_margins():
    assert parse_margin("10%") == Margin(0.1, True)
    assert parse_margin(2) == Margin(2.0, False)
    for bad in ("10", True, float("nan"), [1]):
        with pytest.raises(ValueError):
            parse_margin(bad)
    assert Margin(0.1, True).amount(-50.0) == pytest.approx(5.0)
