"""The incidents' "before": generation and setup done on the event loop.

- :class:`LoopGenerator` (``loop-blocking-generate``): each request's coroutine runs its own
  batch-1 forward passes on the loop. With ``per-token-sync`` the simulated device time of each
  step is a *blocking* wait on the loop thread (``torch.cuda.synchronize()`` on CUDA) — so N
  streams block the loop N decode steps per token round, and a Gunicorn worker whose loop is
  blocked past ``--timeout`` gets killed (incident A).
- :class:`RequestSetup` (``per-request-setup``): incident B's per-request work, on the loop.
- :func:`heavy_boot_heap`: incident B's large long-lived heap, so GC pauses are long.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import math
import random
import ssl
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

import torch

from streamslo.server.config import ServerConfig
from streamslo.server.engine import Producer, TokenStream
from streamslo.server.model import GPT, KVCache
from streamslo.server.sampling import sample
from streamslo.server.tokenizer import EOS_ID, Tokenizer

__all__ = ["LoopGenerator", "RequestSetup", "freeze_heap", "heavy_boot_heap"]

log = logging.getLogger(__name__)
_BOOT_HEAP: list[Any] = []


def heavy_boot_heap(objects: int = 1_000_000) -> None:
    """Keep ``objects`` small containers alive for the process's life (long gen-2 GC scans)."""
    _BOOT_HEAP.extend([i, str(i)] for i in range(objects // 2))


class RequestSetup:
    """Per-request setup on the loop, as in incident B, scaled down (about 120 ms of blocked
    loop on one core): a 60,000-entry tokenizer file, 2 TLS contexts, pure-Python scoring of
    400 x 384 candidates, 1 MB of zlib, 20,000 cyclic containers."""

    def __init__(self, tok: Tokenizer, seed: int) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="streamslo-tok-")
        self.path = Path(self._dir.name) / "tokenizer.json"
        tok.save(self.path, padding_entries=60_000)
        rng = random.Random(seed)
        self._candidates = [[rng.random() for _ in range(384)] for _ in range(400)]

    def _load_tokenizer(self) -> Tokenizer:
        return Tokenizer.load(self.path)

    def _tls_contexts(self) -> None:
        for _ in range(2):
            ssl.create_default_context()

    def _score(self, rng: random.Random) -> int:
        q = [rng.random() for _ in range(384)]
        qn = math.sqrt(sum(x * x for x in q))
        best, best_i = -2.0, 0
        for i, c in enumerate(self._candidates):
            dot = sum(a * b for a, b in zip(q, c, strict=True))
            s = dot / (qn * math.sqrt(sum(x * x for x in c)))
            if s > best:
                best, best_i = s, i
        return best_i

    def _compress(self, rng: random.Random) -> int:
        return len(zlib.compress(rng.randbytes(1 << 20)))

    def _garbage(self) -> None:
        for i in range(20_000):
            a: dict[str, Any] = {"i": i}
            a["self"] = a  # a cycle only the GC can free

    def run(self) -> None:
        """All of it, blocking the calling (loop) thread."""
        rng = random.Random()
        self._load_tokenizer()
        self._tls_contexts()
        self._score(rng)
        self._compress(rng)
        self._garbage()

    def close(self) -> None:
        """Remove the tokenizer file."""
        self._dir.cleanup()


class LoopGenerator(Producer):
    """Generation inside a coroutine on the event loop, batch size 1, hardly any admission
    control: only a huge count is refused (there is no batching to protect; the naive
    server's failure is to accept everything)."""

    def __init__(self, cfg: ServerConfig, model: GPT, tok: Tokenizer, device: torch.device) -> None:
        super().__init__(cfg, max(cfg.max_streams, 4096))
        self.model = model
        self.tok = tok
        self.device = device
        self._tasks: set[asyncio.Task[None]] = set()

    def _start(self, stream: TokenStream) -> None:
        task = asyncio.get_running_loop().create_task(self._generate(stream))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        time.sleep(self.cfg.sync_ms / 1000.0)

    async def _generate(self, stream: TokenStream) -> None:
        try:
            await self._generate_inner(stream)
        except Exception as exc:  # report inside the stream, keep the loop alive
            log.exception("generation failed")
            stream.push(("error", f"generation failed: {type(exc).__name__}"))

    async def _generate_inner(self, stream: TokenStream) -> None:
        req = stream.req
        cfg = self.cfg
        interval = cfg.token_interval_ms / 1000.0
        blocking = cfg.has("per-token-sync")
        cache = KVCache(self.model.cfg, 1, self.device)
        logits = self.model.prefill(cache, 0, req.prompt_ids)[None]  # (1, vocab), on the loop
        one = torch.ones(1, dtype=torch.long)
        for step in range(req.max_tokens):
            if stream.cancelled:
                return
            if cfg.has("silent-cancel") and time.monotonic() - stream.started > cfg.cancel_after_s:
                log.warning(
                    "GenerationCancelledError: Generation stopped due to resource contention"
                )
                stream.push(("end", "stop"))
                return
            t = int(
                sample(
                    logits,
                    torch.tensor([req.temperature]),
                    one * req.seed,
                    one * step,
                    torch.tensor([req.ignore_eos]),
                )[0]
            )
            if t == EOS_ID and not req.ignore_eos:
                stream.push(("end", "stop"))
                return
            stream.produced += 1
            stream.push(("token", self.tok.decode_one(t)))
            if step + 1 == req.max_tokens:
                break
            if blocking:
                # The thread waits for the device: the whole loop waits with it.
                self._sync()
                time.sleep(interval)
                await asyncio.sleep(0)
            else:
                await asyncio.sleep(interval)
            if not stream.has_space():
                await stream.wait_space()
            logits = self.model.decode(cache, torch.tensor([t], device=self.device))
        stream.push(("end", "length"))


def freeze_heap() -> None:
    """Fixed mode: collect once and move start-up objects out of the GC's view."""
    gc.collect()
    gc.freeze()
