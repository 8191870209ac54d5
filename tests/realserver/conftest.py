"""Real servers for the real-server tests, each skipped, visibly, unless its variable is set:

- vLLM (``tox -e vllm``): ``STREAMSLO_VLLM_VENV`` names a venv with vLLM's CPU build
  (``vllm_setup.py install``). ``STREAMSLO_VLLM_MODEL`` keeps the built model between sessions
  (else a temporary folder). One server per module; start-up takes 45–70 s on a quiet 2-core
  machine, up to 2 minutes on a busy one.
- llama.cpp (``tox -e llamacpp``): ``STREAMSLO_LLAMACPP_DIR`` names a directory where
  ``llamacpp_setup.py build`` built ``llama-server``; the model is built there too (cached).
  One server per module; it starts in under a second.
- Hugging Face ``transformers serve`` (``tox -e transformers``): ``STREAMSLO_TRANSFORMERS_DIR``
  names a directory where ``transformers_setup.py install`` and ``build-model`` ran.
- llama-cpp-python's server (``tox -e llamacpp-python``): ``STREAMSLO_LLAMACPP_PYTHON_DIR``.
- a LiteLLM proxy (``tox -e litellm``): ``STREAMSLO_LITELLM_DIR``, in front of the llama.cpp of
  ``STREAMSLO_LLAMACPP_DIR``.
- Apple MLX LM's ``mlx_lm.server`` on Linux (``tox -e mlx``): ``STREAMSLO_MLX_DIR``, serving the
  model of ``STREAMSLO_TRANSFORMERS_DIR``.
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
LLAMACPP_ENV = "STREAMSLO_LLAMACPP_DIR"
TRANSFORMERS_ENV = "STREAMSLO_TRANSFORMERS_DIR"
LLAMACPP_PYTHON_ENV = "STREAMSLO_LLAMACPP_PYTHON_DIR"
LITELLM_ENV = "STREAMSLO_LITELLM_DIR"
MLX_ENV = "STREAMSLO_MLX_DIR"

if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
import litellm_setup  # type: ignore[import-not-found,unused-ignore]  # noqa: E402
import llamacpp_python_setup  # type: ignore[import-not-found,unused-ignore]  # noqa: E402
import llamacpp_setup  # type: ignore[import-not-found,unused-ignore]  # noqa: E402
import mlx_setup  # type: ignore[import-not-found,unused-ignore]  # noqa: E402
import transformers_setup  # type: ignore[import-not-found,unused-ignore]  # noqa: E402
import vllm_setup  # type: ignore[import-not-found,unused-ignore]  # noqa: E402

__all__ = ["LOAD", "Run", "assert_healthy", "run_command", "run_streamslo"]

#: The real-server runs' load. ``--allow-invalid``: the load generator shares this 2-core machine
#: with the server (vLLM's engine busy-polls a core): its latencies are not the server's alone,
#: but what these tests check (outcomes, tokens, usage, messages, series) does not depend on
#: them.
LOAD = (
    "--users",
    "4",
    "--spawn-rate",
    "4",
    "--duration",
    "20s",
    "--max-tokens",
    "64",
    "--allow-invalid",
)


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


@pytest.fixture(scope="session")
def llamacpp_dir() -> Path:
    """The llama.cpp directory with a finished build of ``llama-server``, or a visible skip."""
    value = os.environ.get(LLAMACPP_ENV)
    if not value:
        pytest.skip(
            f"no real llama.cpp: set {LLAMACPP_ENV} to a directory built by "
            "tests/realserver/llamacpp_setup.py build (tox -e llamacpp does)"
        )
    directory = Path(value).resolve()
    if not llamacpp_setup.is_built(directory):
        pytest.skip(
            f"no real llama.cpp: {LLAMACPP_ENV}={value} has no finished build "
            f"({llamacpp_setup.binary(directory)} missing; run llamacpp_setup.py build)"
        )
    return directory


@pytest.fixture(scope="session")
def llamacpp_model(llamacpp_dir: Path) -> Path:
    """The tiny Llama's GGUF, built in the llama.cpp directory (cached there)."""
    subprocess.run(
        [sys.executable, str(HERE / "llamacpp_setup.py"), "build-model", str(llamacpp_dir)],
        check=True,
        timeout=1200,
    )
    return Path(llamacpp_setup.gguf_path(llamacpp_dir))


@pytest.fixture(scope="module")
def llamacpp(
    llamacpp_dir: Path, llamacpp_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    """``llama-server`` on a free loopback port, its process group killed at the end."""
    log = tmp_path_factory.mktemp("llamacpp-log") / "serve.log"
    server = llamacpp_setup.start_server(llamacpp_dir, free_port(), log)
    try:
        yield server
    finally:
        server.stop()


def _setup_dir(env: str, what: str, ready: Any) -> Path:
    """The directory ``env`` names, made by a setup script (``ready(dir)`` says it is), or a
    visible skip."""
    value = os.environ.get(env)
    if not value:
        pytest.skip(f"no real {what}: set {env} (tox -e does it)")
    directory = Path(value).resolve()
    if not ready(directory):
        pytest.skip(f"no real {what}: {env}={value} holds no finished install")
    return directory


@pytest.fixture(scope="module")
def transformers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """``transformers serve`` with the tiny Llama on a free loopback port."""
    directory = _setup_dir(
        TRANSFORMERS_ENV,
        "transformers serve",
        lambda d: (
            (transformers_setup.venv_dir(d) / "bin" / "transformers").exists()
            and (transformers_setup.model_dir(d) / "config.json").exists()
        ),
    )
    log = tmp_path_factory.mktemp("transformers-log") / "serve.log"
    server = transformers_setup.start_server(directory, free_port(), log)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def mlx(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """``mlx_lm.server`` (MLX's CPU build) serving transformers serve's tiny Llama as it is."""
    directory = _setup_dir(
        MLX_ENV,
        "mlx_lm.server",
        lambda d: (mlx_setup.venv_dir(d) / "bin" / "mlx_lm.server").exists(),
    )
    models = _setup_dir(
        TRANSFORMERS_ENV,
        "model for mlx_lm.server",
        lambda d: (transformers_setup.model_dir(d) / "config.json").exists(),
    )
    log = tmp_path_factory.mktemp("mlx-log") / "serve.log"
    server = mlx_setup.start_server(
        directory, transformers_setup.model_dir(models), free_port(), log
    )
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def llamacpp_python_dir() -> Path:
    return _setup_dir(
        LLAMACPP_PYTHON_ENV,
        "llama-cpp-python",
        lambda d: (
            llamacpp_python_setup.is_installed(d) and llamacpp_python_setup.gguf_path(d).exists()
        ),
    )


@pytest.fixture(scope="module")
def litellm_dir() -> Path:
    return _setup_dir(LITELLM_ENV, "LiteLLM", litellm_setup.is_installed)


class Run:
    """A finished ``streamslo run``: its exit code and results directory."""

    def __init__(self, code: int, out: Path, stderr: str) -> None:
        self.code = code
        self.out = out
        self.stderr = stderr
        self.streams = pd.read_csv(out / "streams.csv")
        self.summary: dict[str, Any] = json.loads((out / "summary.json").read_text())
        self.run: dict[str, Any] = json.loads((out / "run.json").read_text())

    def outcomes(self) -> dict[str, int]:
        """Outcome -> count, the zeros left out."""
        return {k: int(v) for k, v in self.summary["outcomes"].items() if v}


def run_command(url: str, out: Path, *args: str) -> list[str]:
    """The ``streamslo run`` command line against ``url``: default flags plus ``args``."""
    return [
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


def run_streamslo(url: str, out: Path, *args: str, timeout: float = 300) -> Run:
    """``streamslo run`` against ``url`` with default flags plus ``args``, to its end."""
    cmd = run_command(url, out, *args)
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode in (0, 99), f"exit {proc.returncode}:\n{proc.stderr[-3000:]}"
    return Run(proc.returncode, out, proc.stderr)


def assert_healthy(
    run: Run,
    max_tokens: int = 64,
    finish_reasons: tuple[str, ...] = ("length",),
    min_streams: int = 20,
) -> None:
    """A healthy server's run: at least 99 % of the streams that were not cancelled ``ok``, on
    every ``ok`` stream as many tokens as its usage says and ``max_tokens`` of them, ending for
    its length (``finish_reasons``: the dialect's own words, e.g. ``max_tokens`` for Anthropic
    Messages). Not the exit code: the default SLO's ITL bound measures this 2-core machine,
    where the server and the load generator share the cores, not the server's health."""
    s = run.streams
    counted = s[s["outcome"] != "cancelled"]
    ok = counted[counted["outcome"] == "ok"]
    # what came of it, in the message, whichever way it fails
    msg = (
        f"outcomes {run.outcomes()}; tokens vs usage of the first rows: "
        f"{s[['tokens', 'usage_completion_tokens', 'error']].head(3).to_dict('records')}"
    )
    assert len(counted) >= min_streams, msg
    assert len(ok) >= 0.99 * len(counted), msg
    assert (ok["tokens"] == ok["usage_completion_tokens"]).all(), msg
    assert (ok["usage_completion_tokens"] == max_tokens).all() and (
        ok["finish_reason"].isin(finish_reasons)
    ).all(), (msg, ok["finish_reason"].value_counts().to_dict())
    assert run.code in (0, 99), msg


#: A short agentic replay: synthetic sessions of 4 steps, a fan-out of 2 and a join.
AGENTIC = (
    "--sessions",
    "synthetic",
    "--session-steps",
    "4",
    "--session-fanout",
    "2",
    "--tool-time",
    "0.1",
    "--session-input-tokens",
    "16",
    "--users",
    "2",
    "--duration",
    "15s",
    "--max-tokens",
    "8",
    "--allow-invalid",
)


def assert_sessions_whole(run: Run) -> None:
    """Every step ok, every session whole, and each step's prompt the context its ancestors
    built (it grows with depth)."""
    s = run.streams
    done = s[s["outcome"] != "cancelled"]
    assert len(done) >= 8 and (done["outcome"] == "ok").all(), run.outcomes()
    summary = run.summary["sessions"]
    assert summary["sessions"] >= 2 and summary["whole"] == summary["sessions"]
    prompt = done.groupby("depth")["usage_prompt_tokens"].mean()
    assert prompt.is_monotonic_increasing and prompt.iloc[-1] > prompt.iloc[0]
