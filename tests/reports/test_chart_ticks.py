"""No chart of the report has tick labels that run together (``5001000 2000``): every axis of
every figure is drawn and its labels' boxes are checked against each other, as rendered."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import matplotlib.axis
import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from streamslo.reports import build_report
from streamslo.reports.charts import FitLogLocator, plain_log
from tests.reports.conftest import write_fixed, write_naive


def _overlaps(fig: Figure) -> list[str]:
    """Every pair of neighbouring tick labels whose rendered boxes touch, on any axis."""
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    found = []
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            boxes = [
                (t.get_text(), t.get_window_extent(renderer))
                for t in axis.get_ticklabels()
                if t.get_visible() and t.get_text()
            ]
            horizontal = isinstance(axis, matplotlib.axis.XAxis)
            boxes.sort(key=lambda b: b[1].x0 if horizontal else b[1].y0)
            for (a, ba), (b, bb) in itertools.pairwise(boxes):
                gap = bb.x0 - ba.x1 if horizontal else bb.y0 - ba.y1
                if gap < 1.0:
                    found.append(
                        f"{ax.get_title() or ax.get_xlabel()}: {a!r} and {b!r} ({gap:.1f} px)"
                    )
    return found


@pytest.fixture
def figures(monkeypatch: pytest.MonkeyPatch) -> list[Figure]:
    """Every figure the report draws, as it was drawn."""
    import streamslo.reports.charts as charts
    import streamslo.reports.knee_charts as knee_charts
    import streamslo.reports.soak as soak

    seen: list[Figure] = []
    real = charts.png_base64

    def keep(fig: Figure) -> str:
        seen.append(fig)
        return real(fig)

    for mod in (charts, knee_charts, soak):
        monkeypatch.setattr(mod, "png_base64", keep)
    return seen


def test_no_tick_labels_touch_in_any_chart_of_a_wide_ranging_report(
    figures: list[Figure], tmp_path: Path
) -> None:
    # Gaps from 5 ms to 6 s and TTFTs across three decades: the CDFs' log axes span them all.
    naive = write_naive(tmp_path / "naive", stall_ms=6000.0, gap_ms=5.0)
    fixed = write_fixed(tmp_path / "fixed", gap_ms=40.0)
    build_report(naive.path, fixed.path, tmp_path / "r" / "report.html", resamples=20)
    assert len(figures) >= 4
    problems = [p for fig in figures for p in _overlaps(fig)]
    assert not problems, problems


@pytest.mark.parametrize("width", [2.0, 3.6, 6.4, 11.0])
@pytest.mark.parametrize(("lo", "hi"), [(8.0, 6000.0), (300.0, 2500.0), (0.5, 40.0), (1, 1e6)])
def test_the_fitted_log_ticks_keep_their_labels_apart(width: float, lo: float, hi: float) -> None:
    fig = Figure(figsize=(width, 2.0))
    ax = fig.add_subplot()
    x = np.geomspace(lo, hi, 50)
    ax.plot(x, x)
    ax.set_xscale("log")
    ax.set_yscale("log")
    plain_log(ax.xaxis)
    plain_log(ax.yaxis)
    fig.tight_layout()
    assert not _overlaps(fig)
    labels = [t.get_text() for t in ax.xaxis.get_ticklabels() if t.get_text()]
    assert len(labels) >= 2 or width < 3  # labelled, unless the axis is tiny
    assert all("e" not in lab and "^" not in lab for lab in labels if float(lab) < 1e6)


def test_the_densest_set_that_fits_is_chosen() -> None:
    loc: Any = FitLogLocator()
    # No axis to measure: a 1000 px axis, where 1-2-5 over a decade fits.
    assert loc.tick_values(100.0, 1000.0) == [100.0, 200.0, 500.0, 1000.0]
