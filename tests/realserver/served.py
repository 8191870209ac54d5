"""A real server process for the real-server tests: started in a process group of its own,
waited for until ``/v1/models`` answers, and stopped with its whole group. Shared by the
``*_setup.py`` scripts; only the standard library (they run it with any Python, a venv's
included)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

__all__ = ["ServedProcess", "launch", "serve_until_stopped", "tiny_llama"]


def tiny_llama(vocab_size: int, max_len: int) -> dict[str, object]:
    """The tiny random-weight Llama both real servers serve, as ``LlamaConfig``'s keyword
    arguments: hidden size 64, 2 layers, 2 heads of 32 (vLLM's CPU attention wants head size
    32 or more), intermediate size 128, about 338k parameters with a 2,000-token vocabulary."""
    return {
        "vocab_size": vocab_size,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "max_position_embeddings": max_len,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
    }


@dataclass
class ServedProcess:
    """A server started by :func:`launch`, in a process group of its own."""

    proc: subprocess.Popen[bytes]
    url: str
    """``http://127.0.0.1:PORT``."""
    startup_s: float
    """Seconds from the start to the first answer of ``/v1/models``."""
    log: Path

    def stop(self) -> None:
        """Kill the whole process group (the server and every child; one gone already is
        fine)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        # Children left behind (a group kill reaches them; this makes sure).
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)


_Served = TypeVar("_Served", bound=ServedProcess)


def launch(
    cls: type[_Served],
    name: str,
    cmd: list[str],
    port: int,
    log: Path,
    timeout: float,
    *,
    env: Mapping[str, str] | None = None,
    poll_s: float = 1.0,
    headers: Mapping[str, str] | None = None,
) -> _Served:
    """Start ``cmd`` (a server listening on 127.0.0.1:``port``) and wait until ``/v1/models``
    answers (asked with ``headers``, e.g. a key the server wants); returns a ``cls``.

    Raises:
        RuntimeError: the server exited or did not answer within ``timeout`` (its log's tail
            in the message).
    """
    fh = open(log, "wb")  # noqa: SIM115 - the server writes it until it stops
    t0 = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        stdout=fh,
        stderr=subprocess.STDOUT,
        env=dict(env) if env is not None else None,
        start_new_session=True,
    )
    fh.close()
    server = cls(proc, f"http://127.0.0.1:{port}", 0.0, log)
    request = urllib.request.Request(server.url + "/v1/models", headers=dict(headers or {}))
    while time.monotonic() - t0 < timeout:
        if proc.poll() is not None:
            break
        try:
            with urllib.request.urlopen(request, timeout=2) as r:
                if r.status == 200:
                    server.startup_s = time.monotonic() - t0
                    return server
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(poll_s)
    server.stop()
    tail = log.read_text(errors="replace")[-4000:]
    raise RuntimeError(
        f"{name} did not come up in {timeout:.0f} s (exit {proc.returncode}); log tail:\n{tail}"
    )


def serve_until_stopped(server: ServedProcess) -> None:
    """The ``serve`` subcommands: say where the server is, then wait until it exits, Ctrl-C or
    SIGTERM (the server runs in a session of its own: its group is stopped on the way out)."""
    print(f"{server.url} up in {server.startup_s:.1f} s (log {server.log}); Ctrl-C stops it")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        server.proc.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
