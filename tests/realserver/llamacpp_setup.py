"""A real llama.cpp for the real-server tests: ``llama-server`` built from source, a tiny
random-weight Llama converted to GGUF on this machine (no model hub), and the server started
and stopped.

Three steps, each usable alone (``tox -e llamacpp`` runs the first two, the tests the third)::

    python tests/realserver/llamacpp_setup.py build DIR          # llama-server, ~11 min at -j2
    python tests/realserver/llamacpp_setup.py build-model DIR    # tokenizer + Llama + GGUF
    python tests/realserver/llamacpp_setup.py serve DIR --port 8012   # until Ctrl-C

``DIR`` then holds ``sdist/`` (the llama-cpp-python source distribution), its extracted
``llama_cpp_python-VERSION/vendor/llama.cpp``, ``build/bin/llama-server``, ``convert-venv/``
and ``model/``. Each step is cached: a finished build (its ready marker, or the binary alone,
from a build run by hand with the same commands) is reused, and so is a built model.

What it needs, found by trying (llama-cpp-python 0.3.36, llama.cpp commit 0c1e57098, Python
3.11, a 2-core machine):

- The source: llama.cpp is vendored in llama-cpp-python's sdist on PyPI (76 MB), so ``pip
  download --no-deps --no-binary :all:`` fetches it where only PyPI is reachable; GitHub's
  release archives are not needed.
- The build: ``llama-server`` alone (``--target llama-server``), static, no web UI, no OpenSSL,
  no libcurl (models are local files), no tests or examples, and ``GGML_NATIVE=OFF`` so that a
  cached binary runs on another CPU of the same family (a CI cache). About 11 minutes at
  ``-j2``; a C++17 compiler and CMake are all it needs.
- ``llama-server`` starts in 0.1-0.4 s with this model, and closes the connection after every
  streamed response (no keep-alive after a stream).
- What it streams (the captures of ``tox -e llamacpp``'s model): a chunk per token, except that
  the text of byte tokens is held back until it makes whole UTF-8 characters (or U+FFFD), so
  2-3 tokens share a chunk now and then, and bytes still held back when the answer ends are
  never sent (one prompt's greedy answer ends in 30 tokens of the lone byte 0xED: 34 content
  chunks, usage 64; the non-streamed answer has them, as U+FFFD); ``"timings_per_token": true``
  puts ``timings.predicted_n`` on every chunk (on the usage chunk as well: 64 there). At the end-of-sequence token (``ignore_eos`` off) the
  usage counts that token, which streams no text. ``/v1/messages`` drops ``ignore_eos`` (its
  conversion to a chat request passes on only temperature, top_p, top_k, stream and
  chat_template_kwargs); ``/v1/responses`` passes it on, and ends a stream at
  ``max_output_tokens`` with ``response.completed`` (status "completed"). A body that is not
  JSON is answered HTTP 500.
- The tokenizer: ``convert_hf_to_gguf.py`` refuses a byte-level BPE tokenizer whose
  pre-tokenizer hash it does not know (it keeps a list of the hashes of published models), so
  the tiny model has a SentencePiece BPE tokenizer instead, trained here *with byte fallback*:
  that one converts cleanly (tokenizer model ``llama``). ``sentencepiece`` 0.2.x needs
  ``protobuf>=5``.
- The conversion needs ``torch`` (imported at the converter's top), ``transformers`` (to write
  the model), ``sentencepiece``, ``protobuf``, ``numpy`` and ``safetensors``, and the vendored
  ``gguf-py`` (on ``PYTHONPATH``, so that it matches the server). They go in a small venv of
  their own, ``DIR/convert-venv``, with torch's CPU build pinned by its local version
  (``torch==2.13.0+cpu``; PyPI's plain 2.13.0 is the CUDA build, several GB); or, when
  ``STREAMSLO_VLLM_VENV`` names the vLLM venv and it imports all of them, that one. The GGUF is
  the same, byte for byte, from either (transformers 4.57.6 and 5.19.0). ``build-model`` took
  82 s the first time (60 s of it the venv), 16 s with the vLLM venv.

The model: the SentencePiece tokenizer (vocabulary 2,000, byte fallback) trained on the standard
library's own ``.py`` files plus some multibyte text (:data:`MULTIBYTE_TEXT`: CJK, accented
Latin, Greek, Cyrillic, emoji) rare enough that most of its characters are byte-fallback tokens,
and a Llama with hidden size 64, 2 layers and 2 heads (head size 32), intermediate size 128,
1,024 positions, random weights from a fixed seed, converted to a float32 GGUF. Greedy decoding
over random weights emits arbitrary tokens, byte tokens among them, which llama.cpp holds back
until they make whole UTF-8 characters: several tokens then arrive in one chunk.

Only the standard library is imported at the top: ``build`` and ``serve`` run with any Python;
``build-model`` imports ``torch``, ``transformers`` and ``sentencepiece`` from the conversion
venv.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import venvs  # (tests/realserver: run as a script or imported)
from served import ServedProcess, launch, serve_until_stopped, tiny_llama

__all__ = [
    "LLAMA_CPP_COMMIT",
    "LLAMA_CPP_PYTHON",
    "MODEL_NAME",
    "MULTIBYTE_TEXT",
    "LlamaCppServer",
    "binary",
    "build",
    "build_model",
    "ensure_source",
    "gguf_path",
    "is_built",
    "start_server",
]

#: The llama-cpp-python release whose sdist vendors llama.cpp (``vendor/llama.cpp``).
LLAMA_CPP_PYTHON = "0.3.36"
#: The llama.cpp commit vendored in it.
LLAMA_CPP_COMMIT = "0c1e57098"
#: The conversion venv's pins (torch by its CPU build's local version).
TORCH = "2.13.0"
CONVERT_PINS = (
    f"torch=={TORCH}+cpu",
    "transformers==4.57.6",
    "sentencepiece==0.2.1",
    "protobuf==5.29.5",
    "numpy==2.2.6",
    "safetensors>=0.4.3",
    "tqdm",
    "pyyaml",
    "requests",
)
#: What the conversion imports (a reused venv must import all of them).
_CONVERT_IMPORTS = "import torch, transformers, sentencepiece, google.protobuf, numpy, safetensors"
#: The name the server serves the model under (``--alias``).
MODEL_NAME = "tiny-llama"
#: The model's context length (``max_position_embeddings``), and each slot's context.
MAX_MODEL_LEN = 1024
#: Server slots (``-np``): requests decoded at once.
PARALLEL = 8
#: The CMake options of the build (see the module's docstring).
CMAKE_OPTIONS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_CURL=OFF",
    "-DGGML_NATIVE=OFF",
)
#: Written in DIR when ``build`` finished; a second ``build`` then does nothing.
_READY = ".streamslo-llamacpp-ready"
#: Written in DIR/model when ``build-model`` finished.
_BUILT = ".streamslo-model-ready"
#: Written in DIR/convert-venv when its packages are installed.
_VENV_READY = ".streamslo-convert-ready"
#: Set for ``build-model`` run again with the conversion venv's Python.
_CHILD = "_STREAMSLO_LLAMACPP_MODEL_CHILD"

#: Multibyte text for the tokenizer's corpus (and for prompts heavy in it): rare beside the
#: standard library's ASCII, so most of its characters become byte-fallback tokens.
MULTIBYTE_TEXT = (
    "東京の灯台は夜ごとに海を照らし、漁師たちは静かな港へ帰ってくる。",
    "春眠不觉晓，处处闻啼鸟。夜来风雨声，花落知多少。",
    "바다 위의 등대는 밤새 깜빡이며 배들에게 길을 알려 준다.",
    "Ο φάρος φωτίζει τη θάλασσα κάθε νύχτα, και οι ψαράδες γυρίζουν σπίτι.",
    "Маяк светит над морем всю ночь, и рыбаки возвращаются домой.",
    "Le phare éclaire la mer ; à l'aube, les pêcheurs rentrent au port, fatigués mais heureux.",
    "Über der Küste leuchtet der Turm; Fischerböote fahren früh hinaus, Möwen schreien.",
    "Ngọn hải đăng chiếu sáng biển cả, những người đánh cá trở về bến.",
    "El faro ilumina el océano; señales, niños y señoras en la orilla.",
    "🌊🏝️ the lighthouse 🗼 blinks 💡 all night 🌙, boats ⛵ come home 🏠 🎉👨‍👩‍👧‍👦",
    "नाविक रात भर प्रकाश स्तंभ को देखते हैं और सुरक्षित लौटते हैं।",
    "المنارة تضيء البحر طوال الليل ويعود الصيادون إلى الميناء.",
)

_CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}</s>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """One ``build`` or ``build-model`` at a time in ``directory`` (pytest workers, tox)."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".streamslo-llamacpp.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def source_dir(directory: Path) -> Path:
    """The vendored llama.cpp source in ``directory``."""
    return directory / f"llama_cpp_python-{LLAMA_CPP_PYTHON}" / "vendor" / "llama.cpp"


def binary(directory: Path) -> Path:
    """Where ``build`` puts ``llama-server``."""
    return directory / "build" / "bin" / "llama-server"


def _ready_version(directory: Path) -> str | None:
    """The llama-cpp-python version a ready marker names (``None``: no marker)."""
    data = venvs.read_marker(directory, _READY)
    return None if data is None else str(data.get("llama_cpp_python"))


def is_built(directory: Path) -> bool:
    """Whether ``directory`` holds a finished build of this version: its ready marker, or the
    binary alone (a build run by hand with the same commands)."""
    version = _ready_version(directory)
    if version is not None:
        return version == LLAMA_CPP_PYTHON and os.access(binary(directory), os.X_OK)
    return os.access(binary(directory), os.X_OK)


def ensure_source(directory: Path) -> Path:
    """Download llama-cpp-python's sdist into ``DIR/sdist`` and extract it, each when missing.
    Returns the vendored llama.cpp (:func:`source_dir`).

    Raises:
        subprocess.CalledProcessError: pip could not download it.
    """
    sdist = directory / "sdist" / f"llama_cpp_python-{LLAMA_CPP_PYTHON}.tar.gz"
    if not sdist.exists():
        venvs.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "--no-binary",
                ":all:",
                f"llama-cpp-python=={LLAMA_CPP_PYTHON}",
                "-d",
                str(sdist.parent),
            ]
        )
    src = source_dir(directory)
    if not (src / "CMakeLists.txt").exists():
        print(f"+ extract {sdist.name}", flush=True)
        with tarfile.open(sdist) as tar:
            tar.extractall(directory, filter="data")
    return src


def build(directory: Path, jobs: int | None = None, force: bool = False) -> float:
    """Build ``llama-server`` into ``directory`` (see the module's docstring for the layout).
    Returns the seconds it took (0 when it was built already).

    Raises:
        subprocess.CalledProcessError: a step failed (its log's tail on stderr).
    """
    directory = directory.resolve()
    with _locked(directory):
        if is_built(directory) and not force:
            if _ready_version(directory) is None:
                # A build made by hand with the same commands: adopted as it is.
                _mark_ready(directory, None)
            return 0.0
        t0 = time.monotonic()
        src = ensure_source(directory)
        out = directory / "build"
        if force or _ready_version(directory) not in (None, LLAMA_CPP_PYTHON):
            # Another version's build (or --force): CMake's cache names another source.
            (directory / _READY).unlink(missing_ok=True)
            shutil.rmtree(out, ignore_errors=True)
        if not (out / "CMakeCache.txt").exists():
            venvs.run(
                ["cmake", "-S", str(src), "-B", str(out), *CMAKE_OPTIONS],
                log=directory / "cmake.log",
            )
        venvs.run(
            [
                "cmake",
                "--build",
                str(out),
                "--target",
                "llama-server",
                "-j",
                str(jobs or os.cpu_count() or 2),
            ],
            log=directory / "build.log",
        )
        seconds = time.monotonic() - t0
        _mark_ready(directory, seconds)
        return seconds


def _mark_ready(directory: Path, seconds: float | None) -> None:
    # Runs the binary once, so that a broken build fails here and not in a test.
    version = subprocess.run(
        [str(binary(directory)), "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    (directory / _READY).write_text(
        json.dumps(
            {
                "llama_cpp_python": LLAMA_CPP_PYTHON,
                "llama_cpp_commit": LLAMA_CPP_COMMIT,
                "version": (version.stdout + version.stderr).strip().splitlines()[0:2],
                "build_s": None if seconds is None else round(seconds, 1),
            }
        )
        + "\n"
    )


def gguf_path(directory: Path) -> Path:
    """Where ``build-model`` puts the GGUF file."""
    return directory / "model" / f"{MODEL_NAME}.gguf"


def convert_python(directory: Path) -> Path:
    """The Python that builds and converts the model: the vLLM venv's when
    ``STREAMSLO_VLLM_VENV`` names one that imports all it needs, else ``DIR/convert-venv``'s
    (made here on first use).

    Raises:
        subprocess.CalledProcessError: pip failed.
    """
    vllm = os.environ.get("STREAMSLO_VLLM_VENV")
    if vllm and venvs.python(Path(vllm)).exists():
        probe = subprocess.run(
            [str(venvs.python(Path(vllm))), "-c", _CONVERT_IMPORTS], capture_output=True
        )
        if probe.returncode == 0:
            return venvs.python(Path(vllm))
    venv = directory / "convert-venv"
    if not venvs.is_ready(venv, _VENV_READY):
        venvs.make(venv)
        # One command, torch's CPU build first among the pins: from a local wheel folder
        # (find-links) or PyTorch's CPU index (PIP_EXTRA_INDEX_URL).
        venvs.pip_install(venv, *CONVERT_PINS)
        venvs.run_python(venv, "-c", _CONVERT_IMPORTS)
        venvs.mark_ready(venv, _VENV_READY, {"pins": CONVERT_PINS})
    return venvs.python(venv)


def _corpus() -> Iterator[str]:
    """Lines of the standard library's own ``.py`` files (the same on every machine with this
    Python), the multibyte text among them."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for i, path in enumerate(sorted(stdlib.glob("*.py"))[:120]):
        with contextlib.suppress(OSError, UnicodeDecodeError):
            for line in path.read_text(encoding="utf-8").splitlines():
                if line.strip():
                    yield line
        yield MULTIBYTE_TEXT[i % len(MULTIBYTE_TEXT)]


def build_model(directory: Path, vocab: int = 2000, seed: int = 0) -> Path:
    """Write the tokenizer, the random-weight Llama (Hugging Face layout, in ``DIR/model/hf``)
    and its GGUF (:func:`gguf_path`); runs with the conversion venv's Python. Returns the GGUF.

    Raises:
        subprocess.CalledProcessError: the conversion failed.
    """
    directory = directory.resolve()
    out = directory / "model"
    if (out / _BUILT).exists():
        return gguf_path(directory)
    import sentencepiece as spm
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    hf = out / "hf"
    if hf.exists():
        shutil.rmtree(hf)
    hf.mkdir(parents=True)
    spm.SentencePieceTrainer.train(
        sentence_iterator=_corpus(),
        model_prefix=str(hf / "tokenizer"),
        model_type="bpe",
        vocab_size=vocab,
        byte_fallback=True,
        # The multibyte characters stay out of the vocabulary: byte-fallback tokens.
        character_coverage=0.9995,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        allow_whitespace_only_pieces=True,
        split_digits=True,
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        num_threads=2,
        minloglevel=2,
    )
    (hf / "tokenizer.vocab").unlink(missing_ok=True)
    n_vocab = spm.SentencePieceProcessor(model_file=str(hf / "tokenizer.model")).vocab_size()
    (hf / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "LlamaTokenizer",
                "bos_token": "<s>",
                "eos_token": "</s>",
                "unk_token": "<unk>",
                "add_bos_token": True,
                "add_eos_token": False,
                "model_max_length": MAX_MODEL_LEN,
                "chat_template": _CHAT_TEMPLATE,
            },
            indent=2,
        )
        + "\n"
    )

    torch.manual_seed(seed)
    config = LlamaConfig(**tiny_llama(n_vocab, MAX_MODEL_LEN))
    LlamaForCausalLM(config).save_pretrained(hf, safe_serialization=True)

    src = source_dir(directory)
    env = venvs.environ(
        {
            "PYTHONPATH": os.pathsep.join(
                [str(src / "gguf-py"), *filter(None, [os.environ.get("PYTHONPATH")])]
            ),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
        }
    )
    target = gguf_path(directory)
    venvs.run(
        [
            sys.executable,
            str(src / "convert_hf_to_gguf.py"),
            str(hf),
            "--outfile",
            str(target),
            "--outtype",
            "f32",
        ],
        log=out / "convert.log",
        env=env,
    )
    (out / _BUILT).write_text(json.dumps({"vocab": n_vocab, "seed": seed}) + "\n")
    return target


class LlamaCppServer(ServedProcess):
    """A ``llama-server`` started by :func:`start_server`, in a process group of its own."""


def start_server(
    directory: Path,
    port: int,
    log: Path,
    timeout: float = 60.0,
    extra: tuple[str, ...] = (),
) -> LlamaCppServer:
    """Start ``llama-server`` with the built model on 127.0.0.1:``port`` and wait until
    ``/v1/models`` answers.

    Raises:
        RuntimeError: the server exited or did not answer within ``timeout`` (its log's tail
            in the message).
    """
    directory = directory.resolve()
    cmd = [
        str(binary(directory)),
        "-m",
        str(gguf_path(directory)),
        "--alias",
        MODEL_NAME,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "-np",
        str(PARALLEL),
        # The context is split between the slots: each gets the model's length.
        "-c",
        str(PARALLEL * MAX_MODEL_LEN),
        "--metrics",
        "--no-webui",
        *extra,
    ]
    return launch(LlamaCppServer, "llama-server", cmd, port, log, timeout, poll_s=0.1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("build", help="llama-server into DIR/build (cached)")
    p.add_argument("dir", type=Path)
    p.add_argument("-j", "--jobs", type=int, default=None)
    p.add_argument("--force", action="store_true")
    p = sub.add_parser("build-model", help="the tiny Llama's GGUF into DIR/model (cached)")
    p.add_argument("dir", type=Path)
    p = sub.add_parser("serve", help="llama-server the model until interrupted")
    p.add_argument("dir", type=Path)
    p.add_argument("--port", type=int, default=8012)
    args = ap.parse_args(argv)
    directory: Path = args.dir.resolve()
    if args.cmd == "build":
        seconds = build(directory, jobs=args.jobs, force=args.force)
        print(
            f"llama-server ready: {binary(directory)}" + (f" ({seconds:.0f} s)" if seconds else "")
        )
    elif args.cmd == "build-model":
        if os.environ.get(_CHILD):
            # Run by the parent below, which holds the lock, with the conversion venv's Python.
            print(f"model: {build_model(directory)}")
            return 0
        with _locked(directory):
            ensure_source(directory)  # the converter and gguf-py (a cached build has no source)
            venv = convert_python(directory).parent.parent
            # The model is built with the conversion venv's torch and transformers.
            env = venvs.environ({_CHILD: "1"})
            if not venvs.run_in(venv, __file__, "build-model", str(directory), env=env):
                print(f"model: {build_model(directory)}")
    else:
        log = directory / "serve.log"
        serve_until_stopped(start_server(directory, args.port, log))
    return 0


if __name__ == "__main__":
    sys.exit(main())
