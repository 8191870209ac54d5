"""Fixtures: real target servers as subprocesses on free loopback ports (no mocks)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.server.fuzz import FuzzServer, start_fuzz_server
from tests.server.servers import ROOT, Server, start_server

__all__ = ["ROOT", "Server", "start_server"]


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Server]]:
    """Start servers with given CLI args; all are stopped (by pid) at teardown."""
    started: list[Server] = []

    def _start(*args: str, env: dict[str, str] | None = None) -> Server:
        s = start_server(list(args), tmp_path, env=env)
        started.append(s)
        return s

    yield _start
    for s in started:
        s.stop()


@pytest.fixture(scope="module")
def fixed_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One fixed-mode Uvicorn server shared by a module's tests."""
    s = start_server(["--mode", "fixed", "--max-streams", "64"], tmp_path_factory.mktemp("fixed"))
    yield s
    s.stop()


@pytest.fixture(scope="session")
def fuzz_uvicorn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FuzzServer]:
    """The fuzz server under Uvicorn, shared by the fuzz modules (its tallies add up)."""
    fz = start_fuzz_server("uvicorn", tmp_path_factory.mktemp("fuzz-uvicorn"))
    yield fz
    fz.server.stop()


@pytest.fixture(scope="session")
def fuzz_gunicorn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FuzzServer]:
    """The fuzz server under Gunicorn, shared by the fuzz modules."""
    fz = start_fuzz_server("gunicorn", tmp_path_factory.mktemp("fuzz-gunicorn"))
    yield fz
    fz.server.stop()


@pytest.fixture(scope="module", params=["uvicorn", "gunicorn"])
def fuzz_server(request: pytest.FixtureRequest) -> FuzzServer:
    """Each fuzz server in turn."""
    fz: FuzzServer = request.getfixturevalue(f"fuzz_{request.param}")
    return fz
