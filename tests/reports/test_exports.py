"""Every reports module declares its public API in ``__all__`` (STYLE habit 5)."""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys

import pytest

MODULES = [
    "streamslo.reports",
    "streamslo.reports.load",
    "streamslo.reports.compare",
    "streamslo.reports.bootstrap",
    "streamslo.reports.model",
    "streamslo.reports.verdicts",
    "streamslo.reports.timeline",
    "streamslo.reports.charts",
    "streamslo.reports.render",
    "streamslo.reports.build",
    "streamslo.commands.report",
    "streamslo.reports.server_series",
    "streamslo.reports.failures",
    "streamslo.reports.glossary",
    "streamslo.reports.tables",
    "streamslo.reports.section",
    "streamslo.reports.sections",
    "streamslo.reports.scenarios",
    "streamslo.reports.levels",
    "streamslo.reports.knee",
    "streamslo.reports.knee_charts",
    "streamslo.reports.turns",
    "streamslo.reports.soak",
    "streamslo.reports.session_view",
    "streamslo.reports.replay",
    "streamslo.reports.sweep_report",
]


@pytest.mark.parametrize("name", MODULES)
def test_all_matches_public_names(name: str) -> None:
    mod = importlib.import_module(name)
    assert hasattr(mod, "__all__")
    for item in mod.__all__:
        assert getattr(mod, item) is not None, item
    if name == "streamslo.reports":
        return
    public = {
        k
        for k, v in vars(mod).items()
        if not k.startswith("_")
        and (inspect.isfunction(v) or inspect.isclass(v))
        and getattr(v, "__module__", None) == name
    }
    assert public <= set(mod.__all__)


def test_package_import_is_light() -> None:
    code = (
        "import sys, streamslo.reports, streamslo.commands.report; "
        "heavy = [m for m in ('pandas', 'matplotlib', 'pyarrow') if m in sys.modules]; "
        "print(heavy); sys.exit(1 if heavy else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
