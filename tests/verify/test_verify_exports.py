"""Every module of the verify package and the threshold engine declares its public API."""

from __future__ import annotations

import importlib
import inspect

import pytest

MODULES = [
    "streamslo.slo.thresholds",
    "streamslo.verify.runner",
    "streamslo.verify.explain",
    "streamslo.verify.fixtures",
    "streamslo.verify.plugin",
    "streamslo.verify.probes",
    "streamslo.verify.slo",
    "streamslo.verify.testing",
    "streamslo.verify.checks.test_run",
    "streamslo.verify.checks.test_thresholds",
    "streamslo.verify.checks.test_probes",
]


@pytest.mark.parametrize("name", MODULES)
def test_all_matches_the_public_names(name: str) -> None:
    mod = importlib.import_module(name)
    assert all(hasattr(mod, n) for n in mod.__all__), name
    own = {
        n
        for n, v in vars(mod).items()
        if not n.startswith(("_", "@"))
        and (inspect.isfunction(v) or inspect.isclass(v))
        and v.__module__ == name
    }
    assert own <= set(mod.__all__), own - set(mod.__all__)


def test_plugin_import_is_light() -> None:
    import subprocess
    import sys

    code = (
        "import sys, streamslo.verify.plugin, streamslo.verify.fixtures, streamslo.verify.slo; "
        "print(','.join(m for m in ('numpy', 'pandas', 'httpx', 'websockets', 'locust', 'torch') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
