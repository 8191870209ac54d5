"""Fixtures: the app in this process (no socket: what the app decides), and real target
servers as subprocesses on free loopback ports (timing, and what only a socket shows)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.server.fuzz import FuzzServer, start_fuzz_server
from tests.server.inprocess import app_client
from tests.server.servers import ROOT, Server, start_server

if TYPE_CHECKING:
    from starlette.testclient import TestClient

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


# Module-scoped: a server idles at ~3 % of a core (its watchdog's polls); session-scoped, each
# worker that ran a fuzz module kept its servers to the end of the suite.
@pytest.fixture(scope="module")
def fuzz_uvicorn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FuzzServer]:
    """The fuzz server under Uvicorn, shared by a fuzz module's tests (their tallies add up)."""
    fz = start_fuzz_server("uvicorn", tmp_path_factory.mktemp("fuzz-uvicorn"))
    yield fz
    fz.server.stop()


@pytest.fixture(scope="module")
def fuzz_gunicorn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FuzzServer]:
    """The fuzz server under Gunicorn, shared by a fuzz module's tests."""
    fz = start_fuzz_server("gunicorn", tmp_path_factory.mktemp("fuzz-gunicorn"))
    yield fz
    fz.server.stop()


@pytest.fixture(scope="module", params=["uvicorn", "gunicorn"])
def fuzz_server(request: pytest.FixtureRequest) -> FuzzServer:
    """Each fuzz server in turn."""
    fz: FuzzServer = request.getfixturevalue(f"fuzz_{request.param}")
    return fz


@pytest.fixture(scope="module")
def fixed_app() -> Iterator[TestClient]:
    """The fixed-mode app in this process (tests/server/inprocess.py), shared by a module's
    tests: for what the app decides, not for timing or what only a socket shows."""
    with app_client(max_streams=64) as tc:
        yield tc
