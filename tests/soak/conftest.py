"""Fixtures of the soak tests: a server that starts failing mid-run."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.faulty.fixtures import faulty_server  # noqa: F401

REPO = Path(__file__).resolve().parents[2]


@dataclass
class FailingServer:
    url: str
    started_epoch: float
    fail_after: float
    process: subprocess.Popen[str]
    fail_after_requests: int | None = None

    @property
    def fails_from(self) -> float:
        """The epoch second the failures begin (with ``fail_after_requests``: as the server
        said when they began; call once they have)."""
        if self.fail_after_requests is None:
            return self.started_epoch + self.fail_after
        assert self.process.stdout is not None
        word, epoch = self.process.stdout.readline().split()
        assert word == "failing", word
        self.fail_after_requests, self.started_epoch, self.fail_after = None, float(epoch), 0.0
        return self.started_epoch


@pytest.fixture
def failing_server() -> Iterator[Callable[..., FailingServer]]:
    """Start ``tests.soak.failing_server`` with the given options (stopped after the test)."""
    procs: list[subprocess.Popen[str]] = []

    def start(
        fail_after: float = 1e9,
        fail_share: float = 0.0,
        itl: float = 0.02,
        fail_after_requests: int | None = None,
    ) -> FailingServer:
        counted = (
            []
            if fail_after_requests is None
            else ["--fail-after-requests", str(fail_after_requests)]
        )
        p = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.soak.failing_server",
                "--fail-after",
                str(fail_after),
                "--fail-share",
                str(fail_share),
                "--itl",
                str(itl),
                *counted,
            ],
            cwd=REPO,
            stdout=subprocess.PIPE,
            text=True,
        )
        procs.append(p)
        assert p.stdout is not None
        _, port, epoch = p.stdout.readline().split()
        return FailingServer(
            f"http://127.0.0.1:{port}", float(epoch), fail_after, p, fail_after_requests
        )

    yield start
    for p in procs:
        p.terminate()
        p.wait(timeout=10)
        if p.stdout is not None:
            p.stdout.close()
