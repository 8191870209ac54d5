"""Every module of the server package declares its public names (``__all__``), and only names
it has."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import streamslo.server

MODULES = sorted(
    m.name for m in pkgutil.iter_modules(streamslo.server.__path__, "streamslo.server.")
)


def test_the_package_has_its_modules() -> None:
    assert {
        "streamslo.server.guard",
        "streamslo.server.access",
        "streamslo.server.openapi",
        "streamslo.server.deps",
    } <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_all_matches_public_names(name: str) -> None:
    mod = importlib.import_module(name)
    declared = set(mod.__all__)
    public = {
        k
        for k, v in vars(mod).items()
        if not k.startswith("_")
        and getattr(v, "__module__", None) == name
        and (callable(v) or isinstance(v, type))
    }
    assert public <= declared, f"{name}: public but not in __all__: {sorted(public - declared)}"
    assert all(hasattr(mod, n) for n in declared)
