"""A real LiteLLM proxy (1.110.2) in front of a real llama.cpp, with no server flags: a healthy
upstream reads healthy through it and ``streamslo check`` passes; faults put between the
gateway and the engine with ``streamslo proxy`` read broken at the client: a stream the engine's
side cuts short and ends with "stop" (``--silent-stop``), and a connection reset mid-stream.
Skipped unless ``STREAMSLO_LITELLM_DIR`` and ``STREAMSLO_LLAMACPP_DIR`` are set
(``tox -e litellm``).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from streamslo.proxy.process import spawn_proxy
from streamslo.server.bundled import free_port
from tests.realserver.conftest import LOAD, REPO, run_streamslo
from tests.realserver.litellm_setup import MASTER_KEY, start_server

pytestmark = [pytest.mark.realserver, pytest.mark.load]

AUTH = ("--header", f"Authorization: Bearer {MASTER_KEY}")


@contextmanager
def gateway(litellm_dir: Path, upstream: str, log: Path) -> Iterator[Any]:
    server = start_server(litellm_dir, free_port(), log, upstream=upstream + "/v1")
    try:
        yield server
    finally:
        server.stop()


def test_a_healthy_engine_reads_healthy_through_the_gateway(
    litellm_dir: Path, llamacpp: Any, tmp_path: Path
) -> None:
    with gateway(litellm_dir, llamacpp.url, tmp_path / "litellm.log") as gw:
        run = run_streamslo(gw.url, tmp_path / "run", *AUTH, *LOAD)
        check = subprocess.run(
            [sys.executable, "-m", "streamslo", "check", gw.url, "--no-ws", *AUTH],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=REPO,
        )
    s = run.streams
    counted = s[s["outcome"] != "cancelled"]
    ok = counted[counted["outcome"] == "ok"]
    assert len(counted) >= 20 and len(ok) >= 0.99 * len(counted), run.outcomes()
    assert check.returncode == 0, check.stdout + check.stderr
    assert "run: streamslo run --host" in check.stdout


@pytest.mark.parametrize(
    ("fault", "broken"),
    [
        (("--silent-stop", "--probability", "0.4"), {"silent_truncation"}),
        (("--reset-after", "3000", "--probability", "0.4"), {"error_event", "truncated"}),
    ],
)
def test_a_fault_between_the_gateway_and_the_engine_reads_broken_at_the_client(
    litellm_dir: Path, llamacpp: Any, tmp_path: Path, fault: tuple[str, ...], broken: set[str]
) -> None:
    with (
        spawn_proxy(["--upstream", llamacpp.url, *fault, "--seed", "9"]) as faults,
        gateway(litellm_dir, faults.url, tmp_path / "litellm.log") as gw,
    ):
        run = run_streamslo(gw.url, tmp_path / "run", *AUTH, *LOAD)
    s = run.streams
    counted = s[s["outcome"] != "cancelled"]
    bad = counted[counted["outcome"] != "ok"]
    assert len(bad) >= 3, run.outcomes()
    assert set(bad["outcome"]) <= broken, run.outcomes()
    faulted = faults.stats["silent_stops"] if "--silent-stop" in fault else faults.stats["resets"]
    probes = run.run["contract"]["probes"] + len(run.run["preflight"]) if run.run["contract"] else 2
    # every fault made during the load reads broken (the probes before it went through too)
    assert faulted - probes <= len(bad) <= faulted, (len(bad), faulted, probes)
