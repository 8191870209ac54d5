"""A real vLLM for the real-server tests (``tox -e vllm``): skipped, visibly, unless
``STREAMSLO_VLLM_VENV`` names a venv with vLLM's CPU build (``vllm_setup.py install``).

``STREAMSLO_VLLM_MODEL`` keeps the built model between sessions (else a temporary folder).
One server per module; start-up takes 45–70 s on a quiet 2-core machine, up to 2 minutes on a
busy one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from streamslo.server.bundled import free_port

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
VENV_ENV = "STREAMSLO_VLLM_VENV"
MODEL_ENV = "STREAMSLO_VLLM_MODEL"

if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
import vllm_setup  # type: ignore[import-not-found,unused-ignore]  # noqa: E402

__all__ = ["Run", "run_streamslo"]


@pytest.fixture(scope="session")
def vllm_venv() -> Path:
    """The vLLM venv, or a visible skip."""
    value = os.environ.get(VENV_ENV)
    if not value:
        pytest.skip(
            f"no real vLLM: set {VENV_ENV} to a venv made by "
            "tests/realserver/vllm_setup.py install (tox -e vllm does)"
        )
    venv = Path(value).resolve()
    if not (venv / "bin" / "vllm").exists():
        pytest.fail(f"{VENV_ENV}={value}: no bin/vllm there (run vllm_setup.py install)")
    return venv


@pytest.fixture(scope="session")
def vllm_model(vllm_venv: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny Llama, built with the vLLM venv's Python (seconds)."""
    model = Path(os.environ.get(MODEL_ENV) or tmp_path_factory.mktemp("tiny-llama")).resolve()
    subprocess.run(
        [
            str(vllm_venv / "bin" / "python"),
            str(HERE / "vllm_setup.py"),
            "build-model",
            str(vllm_venv),
            str(model),
        ],
        check=True,
        timeout=600,
    )
    return model


@pytest.fixture(scope="module")
def vllm(
    vllm_venv: Path, vllm_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    """``vllm serve`` on a free loopback port, its process group killed at the end."""
    log = tmp_path_factory.mktemp("vllm-log") / "serve.log"
    server = vllm_setup.start_server(vllm_venv, vllm_model, free_port(), log)
    try:
        yield server
    finally:
        server.stop()


class Run:
    """A finished ``streamslo run``: its exit code and results directory."""

    def __init__(self, code: int, out: Path, stderr: str) -> None:
        self.code = code
        self.out = out
        self.stderr = stderr
        self.streams = pd.read_csv(out / "streams.csv")
        self.summary: dict[str, Any] = json.loads((out / "summary.json").read_text())

    def outcomes(self) -> dict[str, int]:
        """Outcome -> count, the zeros left out."""
        return {k: int(v) for k, v in self.summary["outcomes"].items() if v}


def run_streamslo(url: str, out: Path, *args: str, timeout: float = 300) -> Run:
    """``streamslo run`` against ``url`` with default flags plus ``args``, to its end."""
    cmd = [
        sys.executable,
        "-m",
        "streamslo",
        "run",
        "--host",
        url,
        "--out",
        str(out),
        "--progress",
        "off",
        *args,
    ]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode in (0, 99), f"exit {proc.returncode}:\n{proc.stderr[-3000:]}"
    return Run(proc.returncode, out, proc.stderr)
