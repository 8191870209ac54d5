"""A real ``mlx_lm.server`` for the real-server tests: Apple's MLX LM (``mlx-lm``) with MLX's
Linux CPU build in a venv of its own, serving the tiny random-weight Llama that
``transformers_setup.py build-model`` writes (the same Hugging Face folder, used as it is), and
the server started and stopped.

Two steps, each usable alone (``tox -e mlx`` runs the first, plus transformers' install and
build-model for the model; the tests the second)::

    python tests/realserver/mlx_setup.py install DIR                 # the venv, ~25 s
    python tests/realserver/mlx_setup.py serve DIR --port 8016 \\
        [--model /work/rs/transformers/model]                       # until Ctrl-C

``DIR`` then holds ``venv/`` and ``hf-cache/`` (an empty Hugging Face cache: see below).
``--model`` defaults to ``$STREAMSLO_TRANSFORMERS_DIR/model``. ``install`` is cached (a ready
marker in the venv).

What it needs, found by trying (mlx-lm 0.32.2, mlx 0.32.4, Python 3.11, Linux x86_64, a busy
2-core machine):

- PyPI has MLX's Linux builds: ``mlx`` 0.32.4 is a ``manylinux_2_35_x86_64`` wheel (the
  bindings), and its ``cpu`` extra pulls ``mlx-cpu`` 0.32.4 (the CPU back end, also
  ``manylinux_2_35_x86_64``); ``mlx-cuda-12``/``-13`` are the GPU ones, ``mlx-metal`` macOS'.
  ``mlx-lm==0.32.2 mlx[cpu]==0.32.4`` resolves 40 wheels in ~25 s, **no torch** (its
  ``transformers`` 5.25.0 is for the tokenizer only). ``mx.default_device()`` is
  ``Device(cpu, 0)``; no Metal is asked for.
- ``mlx_lm.server --model MODEL_DIR --host 127.0.0.1 --port P`` loads the Hugging Face folder
  as it is (``model_type: llama``, float32 safetensors, ``rope_parameters``; no conversion).
  The HTTP server answers at once; the model loads on a thread of its own meanwhile (under 1 s
  for this model), and the first request waits for it.
- ``HF_HUB_CACHE`` must name a folder that exists: ``/v1/models`` scans the Hugging Face cache
  for downloaded MLX models *after* it sent ``200`` and its headers, and with no cache folder
  it raises ``CacheNotFound``: the client gets a 200 with an empty body. ``serve_env`` points
  it at ``DIR/hf-cache`` (created empty), and ``HF_HUB_OFFLINE=1``.
- The model's id (:func:`model_id`) is the model folder's resolved path, as ``/v1/models``
  lists it; :func:`start_server` passes that same path, so a request naming it (or
  ``"default_model"``, or no ``model`` at all) uses the loaded model. Any other name is loaded
  as a path or hub repo *per request*: offline that fails, HTTP 404 ``{"error": ...}``.

What it streams and accepts (chat and completions alike unless said; ``/tokenize``, ``/props``,
``/metrics`` are 404; ``/health`` is ``{"status": "ok"}``):

- HTTP/1.0 (Python's ``http.server``): no ``Content-Length`` and no chunked encoding on a
  stream; the server closes the connection to end every response (EOF in the same millisecond
  as ``data: [DONE]``), so each request needs a new TCP connection. LF line ends. Non-streamed
  answers carry ``Content-Length``; ``/v1/models`` does not.
- Before the first ``data:`` line come SSE comments, ``: keepalive N/M`` (prompt progress).
- ``data: [DONE]`` ends every stream. Usage only with ``stream_options.include_usage``, in a
  last chunk with ``choices: []`` whose ``object`` is ``"chat.completion"`` on both endpoints;
  ``usage.prompt_tokens_details.cached_tokens`` reports its prompt cache.
- Every chat chunk's ``delta`` has ``"role": "assistant"``; the first one has text too (no
  role-only chunk). The finish chunk has no text (chat ``delta: {"role": "assistant"}``,
  completions ``text: ""``). No empty-text chunks: a token without text (a byte of an unfinished
  character) is held back and joined to the next chunk (48 tokens: 44 chunks in chat, 45 in
  completions). No per-chunk token count: streams carry no ``logprobs``.
- Unknown fields are accepted and ignored: ``ignore_eos``, ``min_tokens``, ``timings_per_token``,
  ``return_token_ids``. ``logit_bias`` is honoured on both endpoints, int or float values
  (keys must be token ids; else HTTP 400 ``logit_bias must be a dict of int to float``):
  ``{"2": 100.0}`` ends the answer at once (``"stop"``, usage 1), ``{"2": -100.0}`` runs to
  ``max_tokens``. Nothing else forces a length.
- Greedy answers (``temperature`` 0, its default) are the same twice, and the same with 4 or 8
  requests decoded together in one batch as one at a time; the token sequence is transformers
  serve's on the same weights (the first token's leading space is trimmed).
- A request that arrives while a batch is decoding waits up to 0.5 s (the generation loop's time
  budget) before it joins: its TTFT grows by that.
- ``max_tokens`` is not checked against the model's context: 2,000 tokens stream from this
  512-position model.
- A request naming another model unloads this one, fails (404) and the next request reloads it;
  around that reload the process aborted twice in four tries (``double free or corruption``,
  SIGABRT): name :func:`model_id` only.

Only the standard library is imported at the top: every step runs with any Python.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import venvs  # (tests/realserver: run as a script or imported)
from served import ServedProcess, launch, serve_until_stopped
from venvs import venv_dir

__all__ = [
    "MLX",
    "MLX_LM",
    "TRANSFORMERS",
    "MlxServer",
    "hf_cache_dir",
    "install",
    "model_id",
    "serve_env",
    "start_server",
    "venv_dir",
]

#: The pins that work together on this machine (see the module's docstring).
MLX_LM = "0.32.2"
MLX = "0.32.4"
#: mlx-lm's tokenizer loader; pinned to what resolved with the two above (and to transformers
#: serve's, whose model this serves).
TRANSFORMERS = "5.25.0"
#: The model's end-of-sequence token id (``</s>``; ``generation_config.json``).
EOS_TOKEN_ID = 2
#: The environment variable naming transformers serve's directory (its ``model/`` is served).
TRANSFORMERS_ENV = "STREAMSLO_TRANSFORMERS_DIR"
#: Written in the venv when ``install`` finished; a second ``install`` then does nothing.
_READY = ".streamslo-mlx-ready"


def hf_cache_dir(directory: Path) -> Path:
    """The (empty) Hugging Face cache the server scans for ``/v1/models``."""
    return directory / "hf-cache"


def model_id(model: Path) -> str:
    """The model's id in requests and in ``/v1/models``: the model folder's resolved path."""
    return str(model.resolve())


def install(directory: Path, force: bool = False) -> float:
    """Install ``mlx-lm`` with MLX's CPU build into ``DIR/venv`` (created when missing).
    Returns the seconds it took (0 when the venv was ready already).

    Raises:
        subprocess.CalledProcessError: a step failed (pip's output is on stderr), or the
            installed MLX could not compute on the CPU.
    """
    venv = venv_dir(directory.resolve())
    if venvs.is_ready(venv, _READY) and not force:
        return 0.0
    started = time.monotonic()
    venvs.make(venv)
    venvs.pip_install(
        venv, f"mlx-lm=={MLX_LM}", f"mlx[cpu]=={MLX}", f"transformers=={TRANSFORMERS}"
    )
    # Computes as the server will, so a broken venv (no CPU back end, a Metal-only build) fails
    # here and not in a test.
    venvs.run_python(
        venv,
        "-c",
        "import mlx.core as mx, mlx_lm.server; "
        "assert mx.default_device() == mx.cpu, mx.default_device(); "
        "assert (mx.array([1.0, 2.0]) * 2).tolist() == [2.0, 4.0]",
        env=serve_env(directory),
    )
    return venvs.mark_ready(venv, _READY, {"mlx-lm": MLX_LM, "mlx": MLX}, started)


def serve_env(directory: Path) -> dict[str, str]:
    """The environment ``mlx_lm.server`` runs in: offline, an existing (empty) Hugging Face
    cache in ``DIR/hf-cache`` (created here), no telemetry."""
    cache = hf_cache_dir(directory.resolve())
    cache.mkdir(parents=True, exist_ok=True)
    return venvs.environ(
        {
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "HF_HUB_CACHE": str(cache),
            "HF_HUB_DISABLE_TELEMETRY": "1",
            "DO_NOT_TRACK": "1",
            "TOKENIZERS_PARALLELISM": "false",
        }
    )


class MlxServer(ServedProcess):
    """An ``mlx_lm.server`` started by :func:`start_server`, in a process group of its own."""


def start_server(
    directory: Path,
    model: Path,
    port: int,
    log: Path,
    timeout: float = 120.0,
    extra: tuple[str, ...] = (),
) -> MlxServer:
    """Start ``mlx_lm.server`` with ``model`` (a Hugging Face folder: transformers serve's) on
    127.0.0.1:``port`` and wait until ``/v1/models`` answers. The model's id in requests is
    :func:`model_id`. ``extra``: more ``mlx_lm.server`` options
    (``--decode-concurrency N``, ...).

    Raises:
        RuntimeError: the server exited or did not answer within ``timeout`` (its log's tail
            in the message).
    """
    directory = directory.resolve()
    cmd = [
        str(venv_dir(directory) / "bin" / "mlx_lm.server"),
        "--model",
        model_id(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *extra,
    ]
    return launch(MlxServer, "mlx_lm.server", cmd, port, log, timeout, env=serve_env(directory))


def _default_model() -> Path | None:
    value = os.environ.get(TRANSFORMERS_ENV)
    return Path(value) / "model" if value else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("install", help="mlx-lm with MLX's CPU build into DIR/venv")
    p.add_argument("dir", type=Path)
    p.add_argument("--force", action="store_true")
    p = sub.add_parser("serve", help="mlx_lm.server the model until interrupted")
    p.add_argument("dir", type=Path)
    p.add_argument("--port", type=int, default=8016)
    p.add_argument(
        "--model",
        type=Path,
        default=_default_model(),
        help=f"a Hugging Face model folder (default: ${TRANSFORMERS_ENV}/model)",
    )
    args = ap.parse_args(argv)
    directory: Path = args.dir.resolve()
    if args.cmd == "install":
        seconds = install(directory, force=args.force)
        what = f"mlx-lm {MLX_LM} (mlx {MLX}, CPU)"
        print(venvs.ready_line(what, venv_dir(directory), seconds))
    else:
        if args.model is None:
            ap.error(f"serve: give --model or set {TRANSFORMERS_ENV}")
        if not (args.model / "config.json").exists():
            ap.error(f"serve: no config.json in {args.model} (transformers_setup.py build-model)")
        log = directory / "serve.log"
        server = start_server(directory, args.model, args.port, log)
        print(f"model id: {model_id(args.model)}")
        serve_until_stopped(server)
    return 0


if __name__ == "__main__":
    sys.exit(main())
