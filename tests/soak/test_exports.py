"""Every public name of the long-run modules is in their ``__all__``."""

from __future__ import annotations

import importlib

import pytest

MODULES = [
    "streamslo.histogram", "streamslo.windows", "streamslo.windows_file", "streamslo.live_eval",
    "streamslo.budget", "streamslo.drift", "streamslo.progress", "streamslo.exporter", "streamslo.watch",
    "streamslo.soak_results", "streamslo.reports.soak", "streamslo.evidence", "streamslo.soak",
]


@pytest.mark.parametrize("name", MODULES)
def test_all_matches_public_names(name):
    mod = importlib.import_module(name)
    declared = set(mod.__all__)
    public = {
        k for k, v in vars(mod).items()
        if not k.startswith("_") and getattr(v, "__module__", name) == name and (callable(v) or isinstance(v, type))
    }
    assert public <= declared, f"{name}: public but not in __all__: {sorted(public - declared)}"
    assert all(hasattr(mod, n) for n in declared)
