"""Test support for the verify package: enables ``pytester`` for these tests.

pytest refuses ``pytest_plugins`` in a conftest below the rootdir's initial ones (it would
leak into the whole session), so the plugin is registered from this conftest's
``pytest_configure`` instead; pytester's options get their defaults when it registers.
"""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    if not config.pluginmanager.has_plugin("pytester"):
        config.pluginmanager.import_plugin("pytester")
