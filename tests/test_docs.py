"""The reference in docs/ matches the code it documents."""

from __future__ import annotations

import re
from pathlib import Path

from streamslo.metrics import METRICS
from streamslo.verify.slo import OPTIONS

DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_the_metrics_page_lists_the_registry() -> None:
    text = (DOCS / "metrics.md").read_text()
    rows = re.findall(r"^\| `(\w+)` \| (\w+) \| (\w+) \| (.+?) \|$", text, flags=re.M)
    assert rows == [(m.name, m.kind, m.unit, m.description) for m in METRICS.values()]


def test_the_plugin_page_lists_every_setting() -> None:
    text = (DOCS / "pytest-plugin.md").read_text()
    for opt in OPTIONS:
        assert f"`{opt.flag}" in text and f"`{opt.env}`" in text and f"`{opt.ini}`" in text, opt.name
