"""A real llama-cpp-python server for the real-server tests: ``llama-cpp-python[server]`` compiled
from its source distribution in a venv of its own, the tiny random-weight Llama's GGUF (the same
file as ``llamacpp_setup.py``'s, built the same way), and ``python -m llama_cpp.server``
started and stopped.

Three steps, each usable alone (``tox -e llamacpp-python`` runs the first two, the tests the
third)::

    python tests/realserver/llamacpp_python_setup.py install DIR       # compiles, ~7.5 min at -j2
    python tests/realserver/llamacpp_python_setup.py build-model DIR   # tokenizer + Llama + GGUF
    python tests/realserver/llamacpp_python_setup.py serve DIR --port 8014 [--interrupt]

``DIR`` then holds ``venv/``, ``sdist/`` and the extracted source (llamacpp_setup's
:func:`ensure_source`: one download serves both the install and the converter), and ``model/``
(llamacpp_setup's layout; ``convert-venv/`` too unless ``STREAMSLO_VLLM_VENV`` names a venv that
converts). Each step is cached.

What it needs, found by trying (llama-cpp-python 0.3.36, Python 3.11, a 2-core machine):

- PyPI has only the source distribution: ``pip install`` compiles the vendored llama.cpp with
  ``CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
  -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF"`` (no libcurl, no llama.cpp server or examples:
  the Python server is a FastAPI app over the library), about 7.5 minutes at ``-j2`` on a quiet
  machine (16 min measured on a busy one). The
  ``[server]`` extra brings FastAPI, uvicorn, sse-starlette, starlette-context and
  pydantic-settings; no torch.
- ``python -m llama_cpp.server --model X.gguf --model_alias NAME --host 127.0.0.1 --port P``
  serves ``/v1/chat/completions``, ``/v1/completions``, ``/v1/models`` (``owned_by: "me"``) and
  ``/extras/tokenize``. One model, one request decoded at a time.
- ``--interrupt_requests`` (default ``True``): a running stream is ended as soon as another
  request waits for the model: ``data: [DONE]`` right after the chunk it was sending, no
  finish reason, HTTP 200 (at 4 concurrent streams, 3 of 4 were cut, most after the role chunk
  alone). :func:`start_server` takes ``interrupt`` to pick it (default here: off; requests then
  wait their turn).
- What it streams: ``data: [DONE]`` at the end; never any usage (not even with
  ``stream_options.include_usage``); a chunk per token, ``"content": ""`` for a token without
  text; ``logprobs`` on completions (one token per chunk), none on chat streams. It starts in
  ~1 s. The GGUF is llamacpp_setup's, byte for byte, but its greedy answers differ from
  ``llama-server``'s after 2-3 tokens (both are deterministic).
- ``ignore_eos`` is accepted and ignored; ``logit_bias`` and ``min_tokens`` are honoured each
  alone, but together neither is (0.3.36's ``Llama._create_completion`` does
  ``logits_processor = logits_processor.extend(...)``, which is ``None``). ``logit_bias_type:
  "tokens"`` keys the bias by token text (``{"</s>": 100}``). The end-of-sequence id:
  ``/extras/tokenize`` ``{"input": "</s>"}`` answers ``{"tokens": [1, 2]}`` (BOS first).

Only the standard library is imported at the top: every step runs with any Python.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import llamacpp_setup  # type: ignore[import-not-found,unused-ignore]
import venvs  # (tests/realserver: run as a script or imported)
from served import ServedProcess, launch, serve_until_stopped
from venvs import venv_dir

__all__ = [
    "CMAKE_ARGS",
    "LLAMA_CPP_PYTHON",
    "MODEL_NAME",
    "LlamaCppPythonServer",
    "build_model",
    "gguf_path",
    "install",
    "is_installed",
    "start_server",
    "venv_dir",
]

#: The release (the same source as ``llamacpp_setup``'s llama.cpp).
LLAMA_CPP_PYTHON = llamacpp_setup.LLAMA_CPP_PYTHON
#: The CMake options the wheel is built with (see the module's docstring).
CMAKE_ARGS = (
    "-DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF "
    "-DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF"
)
#: The name the server serves the model under (``--model_alias``).
MODEL_NAME = llamacpp_setup.MODEL_NAME
#: The context the server gives the model (its ``max_position_embeddings``).
MAX_MODEL_LEN = llamacpp_setup.MAX_MODEL_LEN
#: Written in the venv when ``install`` finished; a second ``install`` then does nothing.
_READY = ".streamslo-llamacpp-python-ready"


def is_installed(directory: Path) -> bool:
    """Whether ``DIR/venv`` holds a finished install of this version."""
    return venvs.is_ready(venv_dir(directory), _READY, llama_cpp_python=LLAMA_CPP_PYTHON)


def install(directory: Path, jobs: int | None = None, force: bool = False) -> float:
    """Compile and install ``llama-cpp-python[server]`` into ``DIR/venv``. Returns the seconds
    it took (0 when it was installed already).

    Raises:
        subprocess.CalledProcessError: a step failed (pip's output is on stderr).
    """
    directory = directory.resolve()
    venv = venv_dir(directory)
    if is_installed(directory) and not force:
        return 0.0
    started = time.monotonic()
    # The sdist from PyPI, downloaded once for this and for the GGUF converter.
    llamacpp_setup.ensure_source(directory)
    sdist = directory / "sdist" / f"llama_cpp_python-{LLAMA_CPP_PYTHON}.tar.gz"
    venvs.make(venv)
    env = venvs.environ(
        {
            "CMAKE_ARGS": CMAKE_ARGS,
            "CMAKE_BUILD_PARALLEL_LEVEL": str(jobs or os.cpu_count() or 2),
        }
    )
    # (pip's wheel cache keeps the compiled wheel: a venv made again reuses it)
    venvs.pip_install(venv, f"{sdist}[server]", env=env)
    # Imports as the server will, so a broken venv fails here and not in a test.
    venvs.run_python(venv, "-c", "import llama_cpp, llama_cpp.server.app")
    return venvs.mark_ready(
        venv, _READY, {"llama_cpp_python": LLAMA_CPP_PYTHON, "cmake_args": CMAKE_ARGS}, started
    )


def gguf_path(directory: Path) -> Path:
    """Where ``build-model`` puts the GGUF (llamacpp_setup's layout)."""
    return Path(llamacpp_setup.gguf_path(directory))


def build_model(directory: Path) -> Path:
    """The tiny Llama's GGUF in ``DIR/model``, built by ``llamacpp_setup.py build-model``
    (cached; its lock). Returns the GGUF.

    Raises:
        subprocess.CalledProcessError: the conversion failed.
    """
    directory = directory.resolve()
    script = str(Path(llamacpp_setup.__file__).resolve())
    venvs.run([sys.executable, script, "build-model", str(directory)])
    return gguf_path(directory)


class LlamaCppPythonServer(ServedProcess):
    """A ``python -m llama_cpp.server`` started by :func:`start_server`, in a process group of
    its own."""


def start_server(
    directory: Path,
    port: int,
    log: Path,
    interrupt: bool = False,
    timeout: float = 120.0,
    extra: tuple[str, ...] = (),
) -> LlamaCppPythonServer:
    """Start llama-cpp-python's server with the built model on 127.0.0.1:``port`` and wait
    until ``/v1/models`` answers. ``interrupt`` is its ``--interrupt_requests`` (the server's
    own default is ``True``: a running stream ends as soon as another request waits).

    Raises:
        RuntimeError: the server exited or did not answer within ``timeout`` (its log's tail
            in the message).
    """
    directory = directory.resolve()
    cmd = [
        str(venvs.python(venv_dir(directory))),
        "-m",
        "llama_cpp.server",
        "--model",
        str(gguf_path(directory)),
        "--model_alias",
        MODEL_NAME,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        str(MAX_MODEL_LEN),
        "--interrupt_requests",
        str(interrupt),
        *extra,
    ]
    env = venvs.environ({"DO_NOT_TRACK": "1"})
    return launch(
        LlamaCppPythonServer, "llama_cpp.server", cmd, port, log, timeout, env=env, poll_s=0.2
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("install", help="llama-cpp-python[server] into DIR/venv (compiles)")
    p.add_argument("dir", type=Path)
    p.add_argument("-j", "--jobs", type=int, default=None)
    p.add_argument("--force", action="store_true")
    p = sub.add_parser("build-model", help="the tiny Llama's GGUF into DIR/model (cached)")
    p.add_argument("dir", type=Path)
    p = sub.add_parser("serve", help="serve the model until interrupted")
    p.add_argument("dir", type=Path)
    p.add_argument("--port", type=int, default=8014)
    p.add_argument(
        "--interrupt",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="the server's --interrupt_requests (default: off)",
    )
    args = ap.parse_args(argv)
    directory: Path = args.dir.resolve()
    if args.cmd == "install":
        seconds = install(directory, jobs=args.jobs, force=args.force)
        what = f"llama-cpp-python {LLAMA_CPP_PYTHON}"
        print(venvs.ready_line(what, venv_dir(directory), seconds))
    elif args.cmd == "build-model":
        print(f"model: {build_model(directory)}")
    else:
        log = directory / "serve.log"
        serve_until_stopped(start_server(directory, args.port, log, interrupt=args.interrupt))
    return 0


if __name__ == "__main__":
    sys.exit(main())
