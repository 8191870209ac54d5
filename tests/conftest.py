"""Settings of the whole suite."""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Each checkout gets its own temporary root (emptied when a session starts). In the shared
    /tmp/pytest-of-USER every session of the user prunes the older ones: a session of another
    checkout running meanwhile removed directories under this one (rm_rf errors at the end,
    failures under filterwarnings = error). ``--basetemp`` still wins; xdist workers get theirs
    from the controller."""
    if config.option.basetemp is None and not hasattr(config, "workerinput"):
        tag = hashlib.sha256(str(REPO).encode()).hexdigest()[:10]
        config.option.basetemp = str(Path(tempfile.gettempdir()) / f"streamslo-tests-{tag}")
