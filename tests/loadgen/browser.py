"""Locust's web UI in a real headless chromium (Debian's ``chromium``): what a person sees.

The tests that use it skip, visibly, where no chromium is installed (``.ci/run`` installs it).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CHROMIUM", "NO_CHROMIUM", "Header", "chromium", "header_of", "page_dom", "screenshot"]

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
#: ``pytest.mark.skipif`` reason.
NO_CHROMIUM = "no chromium installed: browser check skipped (apt-get install chromium)"

#: Headless, and nothing that reaches outside the machine or outlives the call.
_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--hide-scrollbars",
)


def chromium(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
    """Run chromium with ``args`` on a fresh profile (removed afterwards)."""
    assert CHROMIUM is not None
    with tempfile.TemporaryDirectory(prefix="chromium-") as profile:
        cmd = [CHROMIUM, *_FLAGS, f"--user-data-dir={profile}", *args]
        return subprocess.run(cmd, capture_output=True, timeout=timeout)


def page_dom(url: str, budget_ms: int = 6000) -> str:
    """The page's DOM once its scripts ran for ``budget_ms`` of virtual time (the web UI polls
    its statistics every 2 s)."""
    r = chromium(f"--virtual-time-budget={budget_ms}", "--dump-dom", url)
    return r.stdout.decode("utf-8", "replace")


def screenshot(url: str, png: Path, size: str = "1400,900", budget_ms: int = 6000) -> Path:
    """A screenshot of the page at ``size`` (width,height) into ``png``."""
    chromium(
        f"--window-size={size}", f"--virtual-time-budget={budget_ms}", f"--screenshot={png}", url
    )
    return png


@dataclass(frozen=True)
class Header:
    """The figures in the web UI's header, as rendered."""

    rps: float
    failures_pct: float
    status: str


def _after_label(dom: str, label: str, value: str) -> str:
    m = re.search(rf">{label}</p><span[^>]*>{value}</span>", dom)
    if m is None:
        raise AssertionError(f"no {label!r} in the web UI's header: {dom[:2000]}")
    return m.group(1)


def header_of(dom: str) -> Header:
    """The header's RPS, Failures (a whole percentage, as Locust rounds it) and Status."""
    return Header(
        rps=float(_after_label(dom, "RPS", r"([0-9.]+)")),
        failures_pct=float(_after_label(dom, "Failures", r"([0-9.]+)%")),
        status=_after_label(dom, "Status", r"([A-Za-z ]+)"),
    )
