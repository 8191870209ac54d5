"""An invalid run says so wherever a person looks while it runs (issue 38): the web UI's banner
and its Stream SLOs tab, and after Locust's end-of-run tables. The generator is saturated on
purpose (``busy_locustfile.py`` burns its CPU in 50 ms slices), so its greenlet lag passes the
validity rule's 20 ms."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faulty.process import unused_port
from tests.loadgen.browser import CHROMIUM, NO_CHROMIUM, page_dom, screenshot
from tests.loadgen.helpers import REPO, stop_process

pytestmark = pytest.mark.load

BUSY = Path(__file__).with_name("busy_locustfile.py")


def _locust(host: str, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(BUSY),
        "--host",
        host,
        "--model",
        "timed",
        "--max-tokens",
        "6",
        "-u",
        "2",
        "-r",
        "2",
        "--protocol",
        "sse",
        *args,
    ]


def _live(base: str) -> dict:  # type: ignore[type-arg]
    with urllib.request.urlopen(base + "/streamslo/live", timeout=5) as r:
        return json.loads(r.read())  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def invalid_ui(faulty_server, tmp_path_factory) -> Iterator[tuple[str, dict]]:  # type: ignore[no-untyped-def,type-arg]
    """A running web UI whose run is invalid, and what ``/streamslo/live`` said of it."""
    port = unused_port()
    base = f"http://127.0.0.1:{port}"
    cmd = _locust(
        faulty_server.base_url,
        "--web-host",
        "127.0.0.1",
        "--web-port",
        str(port),
        "--autostart",
        "--run-time",
        "120s",
    )
    log = tmp_path_factory.mktemp("ui") / "locust.log"
    with log.open("wb") as out:
        # Burn 6 s only: the run reads invalid from then on, and the web UI loads quickly.
        env = {**os.environ, "STREAMSLO_TEST_BURN_S": "6"}
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, env=env)
        try:
            live: dict = {}  # type: ignore[type-arg]
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    live = _live(base)
                    if live["validity"]["valid"] is False:
                        break
                except OSError:
                    pass
                time.sleep(0.5)
            else:
                pytest.fail(f"the run never read invalid: {live} {log.read_text()[-2000:]}")
            yield base, live
        finally:
            stop_process(proc, timeout=30)


def test_the_live_figures_and_the_tab_say_the_run_is_invalid(invalid_ui) -> None:  # type: ignore[no-untyped-def]
    _, live = invalid_ui
    v = live["validity"]
    assert "greenlet lag p99" in v["reason"] and "(limit 20 ms)" in v["reason"]
    assert v["line"].startswith("INVALID RUN so far: ") and "load generator" in v["line"]
    first = live["rows"][0]
    assert first["name"] == "run validity (load generator)"
    assert first["status"] == "FAIL" and first["value"].startswith("INVALID so far: ")


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason=NO_CHROMIUM)
def test_the_web_ui_shows_the_invalid_run_in_a_browser(invalid_ui, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    base, _ = invalid_ui
    dom = page_dom(base + "/")
    banner = dom[dom.index('id="streamslo-invalid"') :][:600]
    assert "display: none" not in banner and "INVALID RUN so far" in banner, banner
    tab = page_dom(base + "/?tab=streamslo-slo")
    body = tab[tab.index("<tbody") :]
    assert "run validity (load generator)" in body and "INVALID so far" in body, body[:2000]
    png = screenshot(base + "/?tab=streamslo-slo", tmp_path / "invalid.png", size="1400,700")
    import matplotlib.image as mpimg

    img = mpimg.imread(png)
    # The banner is the page's first rows: the red of #c0392b across the top.
    top = img[5:30, 100:1300, :3]
    red = (top[..., 0] > 0.6) & (top[..., 1] < 0.35) & (top[..., 2] < 0.3)
    assert red.mean() > 0.5, f"no red banner at the top ({red.mean():.0%} red)"


def test_locusts_end_of_run_tables_are_followed_by_the_invalid_line(faulty_server) -> None:  # type: ignore[no-untyped-def]
    cmd = _locust(faulty_server.base_url, "--headless", "--run-time", "6s")
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    out = r.stdout + r.stderr
    tables = out.rfind("Aggregated")
    line = out.find("INVALID RUN: ")
    assert tables >= 0 and line > tables, out[-3000:]
    assert "greenlet lag p99" in out[line:] and "so far" not in out[line : line + 200]
