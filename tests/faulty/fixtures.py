"""The ``faulty_server`` pytest fixture. Import it into a conftest to use it::

from tests.faulty.fixtures import faulty_server  # noqa: F401
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.faulty.process import FaultyServer, start_faulty_server

__all__ = ["faulty_server"]


@pytest.fixture(scope="session")
def faulty_server() -> Iterator[FaultyServer]:
    """One faulty server (a subprocess on a free 127.0.0.1 port) for the whole session."""
    with start_faulty_server() as server:
        yield server
