"""The HTML report in a real browser: Debian's headless chromium renders it to a screenshot."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.reports.conftest import Built

pytestmark = pytest.mark.browser

WIDTH, HEIGHT = 1280, 5200


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        found = shutil.which(name)
        if found:
            return found
    pytest.skip("no chromium binary on PATH (apt-get install chromium); browser test not run")


def test_html_is_self_contained(compared: Built) -> None:
    html = compared.result.html.read_text()
    charts = re.findall(r'<img alt="[^"]*" src="data:image/png;base64,', html)
    assert len(charts) >= 5  # ITL + TTFT CDFs, lateness, activity, outcomes, server
    assert html.count("<table>") >= 6
    for heading in (
        "SLO verdicts",
        "Failure rates",
        "Latency (ms)",
        "Outcomes",
        "Charts",
        "Server-side evidence",
        "Runs",
    ):
        assert f"<h2>{heading}</h2>" in html
    # nothing to fetch: no external scripts, stylesheets or images
    assert not re.search(r'(src|href)="(https?:)?//', html)
    assert "<script" not in html
    assert html.index("<h2>SLO verdicts</h2>") < html.index("<h2>Charts</h2>")


def test_chromium_screenshot(compared: Built, tmp_path: Path) -> None:
    exe = _chromium()
    shot = tmp_path / "report.png"
    cmd = [
        exe,
        "--headless",
        "--disable-gpu",
        "--hide-scrollbars",
        "--no-first-run",
        "--disable-dev-shm-usage",
        f"--window-size={WIDTH},{HEIGHT}",
        f"--user-data-dir={tmp_path / 'profile'}",
        f"--screenshot={shot}",
        compared.result.html.resolve().as_uri(),
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.insert(1, "--no-sandbox")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=90, check=False)
    assert shot.exists(), (
        f"chromium wrote no screenshot (rc {proc.returncode}): {proc.stderr[-2000:]}"
    )
    assert shot.stat().st_size > 50_000
    keep = os.environ.get("STREAMSLO_KEEP_SCREENSHOT")
    if keep:
        shutil.copy(shot, keep)

    from matplotlib import image

    img = image.imread(shot)  # float RGBA in [0, 1]
    assert img.shape[:2] == (HEIGHT, WIDTH)
    gray = img[..., :3].mean(axis=2)
    assert gray.std() > 0.05, "the screenshot is blank"
    # the charts drew coloured lines: both runs' colours appear in the page
    rgb = (img[..., :3] * 255).astype(int)
    for color in ((0xC0, 0x39, 0x2B), (0x1F, 0x77, 0xB4)):
        close = np.abs(rgb - np.array(color)).sum(axis=2) < 30
        assert close.sum() > 500, f"no pixels of run colour {color}"
    # content all the way down the first screen: no band of 600 px that is empty
    rows_busy = gray.std(axis=1) > 0.01
    top = rows_busy[:2400]
    longest_empty = max(
        len(m) for m in re.findall("0+", "".join("1" if b else "0" for b in top)) or [""]
    )
    assert longest_empty < 600


#: About two screens: a 10 s run's page, at 1280 px wide, stays under this height.
TWO_SCREENS_PX = 2700


def _page_height(exe: str, page: Path, tmp_path: Path) -> int:
    """The rendered page's height in px, read back from the DOM chromium dumps."""
    probe = tmp_path / "probe.html"
    probe.write_text(
        page.read_text().replace(
            "</body>",
            "<script>document.body.dataset.h = document.documentElement.scrollHeight"
            "</script></body>",
        )
    )
    cmd = [
        exe,
        "--headless",
        "--disable-gpu",
        "--no-first-run",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        f"--user-data-dir={tmp_path / 'profile-h'}",
        "--window-size=1280,1000",
        "--dump-dom",
        probe.resolve().as_uri(),
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.insert(1, "--no-sandbox")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=90, check=False)
    found = re.search(r'data-h="(\d+)"', proc.stdout)
    assert found, f"chromium gave no page height (rc {proc.returncode}): {proc.stderr[-2000:]}"
    return int(found.group(1))


def test_a_10s_run_reads_in_about_two_screens(tmp_path: Path) -> None:
    from streamslo.reports import build_report
    from tests.reports.conftest import write_fixed

    exe = _chromium()
    run = write_fixed(tmp_path / "ten", n=70, duration=10.0)
    res = build_report(None, run.path, tmp_path / "out" / "report.html", resamples=50)
    height = _page_height(exe, res.html, tmp_path)
    assert 900 < height < TWO_SCREENS_PX, height
    text = re.sub(r"<[^>]+>", " ", re.sub(r'src="data:[^"]*"', "", res.html.read_text()))
    assert "{'" not in text and "too short" not in text
    assert "Glossary" in text and "Time to first token (ttft_ms)" in text
