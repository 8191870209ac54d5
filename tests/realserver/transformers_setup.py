"""A real ``transformers serve`` for the real-server tests: Hugging Face transformers with its
``[serving]`` extra in a venv of its own, a tiny random-weight Llama built on this machine (no
model hub), and the server started and stopped.

Three steps, each usable alone (``tox -e transformers`` runs the first two, the tests the third)::

    python tests/realserver/transformers_setup.py install DIR        # the venv, ~1-2 min
    python tests/realserver/transformers_setup.py build-model DIR    # tokenizer + Llama, seconds
    python tests/realserver/transformers_setup.py serve DIR --port 8013   # until Ctrl-C

``DIR`` then holds ``venv/`` and ``model/`` (the Hugging Face layout). Each step is cached (a
ready marker in the venv, another in the model folder).

What it needs, found by trying (transformers 5.25.0, torch 2.13.0, Python 3.11, a 2-core
machine; see ``FACTS`` below for what it streams):

- ``torch==2.13.0`` by its CPU build's local version (``2.13.0+cpu``) first, then
  ``transformers[serving]==5.25.0`` with torch constrained to it: unconstrained, pip resolves a
  newer torch with a dozen CUDA wheels. 285 s on a busy 2-core machine.
- ``HF_HUB_OFFLINE=1``: the model is a local folder, and nothing is fetched from a hub.
- ``transformers serve MODEL_DIR --host 127.0.0.1 --port P --device cpu`` serves
  ``/v1/chat/completions``, ``/v1/completions`` and ``/v1/models``; the model's id in requests
  is the folder's path as given on the command line (:func:`model_id`), and ``/v1/models`` lists
  it with ``owned_by: "local"``.
- A tiny Hugging Face-format Llama loads as it is: the same builder as vLLM's
  (``vllm_setup.build_model``: a byte-level BPE tokenizer of 2,000 trained with ``tokenizers``
  on the standard library's ``.py`` files, a Llama of hidden size 64, 2 layers, 2 heads of 32,
  512 positions, random weights from a fixed seed), run with this venv's torch and
  transformers. Its end-of-sequence token is ``</s>``, id 2. The server starts in ~12 s (it
  loads the model before it answers), and its greedy answers were vLLM's text exactly (8 prompts).

What it streams and accepts (chat and completions; ``/tokenize`` and ``/props`` are 404):

- No ``data: [DONE]``: the stream just ends. Usage only with ``stream_options.include_usage``,
  in a last chunk with ``choices: []``. A token without text (a byte of an unfinished
  character) gets no chunk, and texts that queue up while the reader is behind are joined: 48
  tokens arrive in ~37-45 chunks. No per-chunk token count (``logprobs`` is ignored with a
  warning). ``finish_reason`` is inferred: ``"length"`` when the answer has ``max_tokens``
  tokens, else ``"stop"``.
- A field it does not know is refused before the stream, HTTP 422 ``Unexpected fields in the
  request: {'ignore_eos'}`` (so are ``min_tokens``, ``timings_per_token``, ``return_token_ids``).
- ``generation_config``: a JSON *string* of ``GenerationConfig`` fields merged into the request's
  (an object is HTTP 500; text that is not JSON, 400): ``"{\"min_new_tokens\": N}"`` holds the
  end-of-sequence back for N tokens.
- ``logit_bias`` (chat only; completions ignore it) becomes ``sequence_bias``, whose values must
  be floats: ``{"2": 100.0}`` ends the answer at once (``"stop"``, usage 1), ``{"2": 100}`` is
  an in-stream error after the role chunk (HTTP 200, ``data: {"error": "`sequence_bias` has to
  be a dict with floats as values..."}``, then the stream ends with no finish chunk). On
  completions, ``generation_config`` ``"{\"sequence_bias\": [[[2], 100.0]]}"`` does the same.
- ``max_tokens`` is not checked against the model's context: 2,000 tokens from a 512-position
  model stream without complaint.

Only the standard library is imported at the top: ``install`` and ``serve`` run with any
Python, ``build-model`` imports ``tokenizers``, ``transformers`` and ``torch`` from this venv.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import venvs  # (tests/realserver: run as a script or imported)
from served import ServedProcess, launch, serve_until_stopped
from venvs import venv_dir

__all__ = [
    "TORCH",
    "TRANSFORMERS",
    "TransformersServer",
    "build_model",
    "install",
    "model_dir",
    "model_id",
    "serve_env",
    "start_server",
    "venv_dir",
]

#: The pins that work together on this machine (see the module's docstring).
TORCH = "2.13.0"
TRANSFORMERS = "5.25.0"
#: The model's context length (the same model as vLLM's).
MAX_MODEL_LEN = 512
#: The model's end-of-sequence token id (``</s>``; ``generation_config.json``).
EOS_TOKEN_ID = 2
#: Written in the venv when ``install`` finished; a second ``install`` then does nothing.
_READY = ".streamslo-transformers-ready"
#: Written in the model directory when ``build-model`` finished.
_BUILT = ".streamslo-model-ready"


def model_dir(directory: Path) -> Path:
    """Where ``build-model`` puts the model (Hugging Face layout)."""
    return directory / "model"


def model_id(directory: Path) -> str:
    """The model's id in requests: ``transformers serve`` names a local model by the path it was
    started with (:func:`start_server` passes the resolved path)."""
    return str(model_dir(directory.resolve()))


def install(directory: Path, force: bool = False) -> float:
    """Install ``transformers[serving]`` into ``DIR/venv`` (created when missing). Returns the
    seconds it took (0 when the venv was ready already).

    Raises:
        subprocess.CalledProcessError: a step failed (pip's output is on stderr).
    """
    venv = venv_dir(directory.resolve())
    if venvs.is_ready(venv, _READY) and not force:
        return 0.0
    started = time.monotonic()
    venvs.make(venv)
    venvs.install_cpu_torch(venv, TORCH, f"transformers[serving]=={TRANSFORMERS}")
    # Imports as the server will, so a broken venv fails here and not in a test.
    venvs.run_python(
        venv, "-c", "import torch, transformers, fastapi, uvicorn, openai", env=serve_env()
    )
    return venvs.mark_ready(venv, _READY, {"transformers": TRANSFORMERS, "torch": TORCH}, started)


def build_model(directory: Path) -> Path:
    """Write the tiny Llama (vLLM's builder, :func:`vllm_setup.build_model`) into
    ``DIR/model``; runs with this venv's Python. Returns the model folder."""
    import vllm_setup  # type: ignore[import-not-found,unused-ignore]

    out = model_dir(directory.resolve())
    return Path(vllm_setup.build_model(out))


def serve_env() -> dict[str, str]:
    """The environment ``transformers serve`` runs in: offline, no telemetry."""
    return venvs.environ(
        {
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "HF_HUB_DISABLE_TELEMETRY": "1",
            "DO_NOT_TRACK": "1",
            "TOKENIZERS_PARALLELISM": "false",
        }
    )


class TransformersServer(ServedProcess):
    """A ``transformers serve`` started by :func:`start_server`, in a process group of its
    own."""


def start_server(
    directory: Path,
    port: int,
    log: Path,
    timeout: float = 180.0,
    extra: tuple[str, ...] = (),
) -> TransformersServer:
    """Start ``transformers serve`` with the built model on 127.0.0.1:``port`` and wait until
    ``/v1/models`` answers. The model's id in requests is :func:`model_id`.

    Raises:
        RuntimeError: the server exited or did not answer within ``timeout`` (its log's tail
            in the message).
    """
    directory = directory.resolve()
    cmd = [
        str(venv_dir(directory) / "bin" / "transformers"),
        "serve",
        model_id(directory),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--device",
        "cpu",
        *extra,
    ]
    return launch(
        TransformersServer, "transformers serve", cmd, port, log, timeout, env=serve_env()
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("install", help="transformers[serving] into DIR/venv")
    p.add_argument("dir", type=Path)
    p.add_argument("--force", action="store_true")
    p = sub.add_parser("build-model", help="the tiny Llama into DIR/model (with DIR/venv's Python)")
    p.add_argument("dir", type=Path)
    p = sub.add_parser("serve", help="transformers serve the model until interrupted")
    p.add_argument("dir", type=Path)
    p.add_argument("--port", type=int, default=8013)
    args = ap.parse_args(argv)
    directory: Path = args.dir.resolve()
    if args.cmd == "install":
        seconds = install(directory, force=args.force)
        print(venvs.ready_line(f"transformers {TRANSFORMERS}", venv_dir(directory), seconds))
    elif args.cmd == "build-model":
        # The model is built with this venv's torch and transformers.
        if not venvs.run_in(venv_dir(directory), __file__, "build-model", str(directory)):
            print(f"model in {build_model(directory)}")
    else:
        log = directory / "serve.log"
        server = start_server(directory, args.port, log)
        print(f"model id: {model_id(directory)}")
        serve_until_stopped(server)
    return 0


if __name__ == "__main__":
    sys.exit(main())
