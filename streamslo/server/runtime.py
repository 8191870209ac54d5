"""One server process's state: model, generator, watchdog, trainer, drain — and stream opening.

:func:`current` returns the process's :class:`Runtime`, so the Uvicorn server subclass
(:mod:`streamslo.server.server`) can drain it on SIGTERM without the app passing it around.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import subprocess
import sys
import time

import torch

from streamslo.server import metrics, workerstate
from streamslo.server.config import ServerConfig
from streamslo.server.dialects import chunk_factory
from streamslo.server.engine import BatchEngine, GenRequest, Overloaded, TokenStream
from streamslo.server.model import GPT, GPTConfig
from streamslo.server.naive import LoopGenerator, RequestSetup, freeze_heap, heavy_boot_heap
from streamslo.server.prefix_cache import PrefixCache
from streamslo.server.protocol import APIError, ChunkFactory, ParsedRequest
from streamslo.server.tokenizer import EOS_ID, Tokenizer
from streamslo.server.watchdog import LoopWatchdog

__all__ = ["Runtime", "current"]

log = logging.getLogger(__name__)
_CURRENT: list[Runtime] = []


def current() -> Runtime | None:
    """The most recently started runtime of this process, if any."""
    return _CURRENT[-1] if _CURRENT else None


def _resolve_device(name: str) -> torch.device:
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: CUDA is not available on this machine")
    return torch.device(name)


class Runtime:
    """Everything a running server process holds; built by the app's lifespan."""

    def __init__(self, cfg: ServerConfig) -> None:
        self.cfg = cfg
        self.started_at = time.time()
        self.draining = False
        self.drain_started = 0.0
        self.streams: set[TokenStream] = set()
        self.watchdog = LoopWatchdog()
        self.rng = random.Random(cfg.seed)
        self.gen: BatchEngine | LoopGenerator | None = None
        self.setup: RequestSetup | None = None
        self.trainer: subprocess.Popen[bytes] | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self.prefix_cache = PrefixCache(cfg.prefix_block_tokens, cfg.prefix_cache_blocks)
        self.device = _resolve_device(cfg.device)
        self.tok = Tokenizer.from_seed(cfg.seed)
        gcfg = GPTConfig(vocab_size=self.tok.size)
        if cfg.checkpoint:
            self.model = GPT(gcfg)
            self.model.load_state_dict(torch.load(cfg.checkpoint, map_location="cpu"))
            self.model.eval()
        else:
            self.model = GPT.from_seed(gcfg, cfg.seed)
        self.model.to(self.device)

    # -- lifecycle -------------------------------------------------------------------------
    async def startup(self) -> None:
        """Start generation, the watchdog, the trainer (fault) and the write-timeout sweeper."""
        cfg = self.cfg
        torch.set_num_threads(cfg.torch_threads)
        if cfg.batched:
            engine = BatchEngine(cfg, self.model, self.tok, self.device)
            engine.start()
            self.gen = engine
        else:
            self.gen = LoopGenerator(cfg, self.model, self.tok, self.device)
        if cfg.has("per-request-setup"):
            self.setup = RequestSetup(self.tok, cfg.seed)
            heavy_boot_heap()
        else:
            freeze_heap()
        if cfg.has("training-contention"):
            self._start_trainer()
        metrics.install_restart_collector(cfg.state_file)
        metrics.WRITE_BACKLOG.set_function(self.backlog_bytes)
        gen = self.gen
        metrics.REQUESTS_RUNNING.set_function(lambda: float(gen.inflight))
        self.watchdog.start()
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep())
        _CURRENT.append(self)
        log.info(
            "streamslo target ready: mode=%s faults=%s device=%s pid=%d",
            cfg.mode,
            ",".join(cfg.faults) or "-",
            self.device,
            os.getpid(),
        )

    def _start_trainer(self) -> None:
        # Fixed mode isolates inference: the trainer gets one thread at the lowest priority.
        nice = "19" if self.cfg.mode == "fixed" else "0"
        cmd = [
            sys.executable,
            "-m",
            "streamslo.server.trainer",
            "--parent-pid",
            str(os.getpid()),
            "--threads",
            "1",
            "--nice",
            nice,
            "--device",
            self.device.type,
        ]
        self.trainer = subprocess.Popen(cmd, stdin=subprocess.DEVNULL)
        log.info("training-contention: trainer pid %d (nice %s)", self.trainer.pid, nice)

    async def shutdown(self) -> None:
        """Stop everything started by :meth:`startup`."""
        self.watchdog.stop()
        if self._sweeper is not None:
            self._sweeper.cancel()
        for s in list(self.streams):
            s.cancel()
        if isinstance(self.gen, BatchEngine):
            await asyncio.to_thread(self.gen.stop)
        if self.setup is not None:
            self.setup.close()
        if self.trainer is not None:
            self.trainer.terminate()
            try:
                self.trainer.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.trainer.kill()
                self.trainer.wait()
        if self in _CURRENT:
            _CURRENT.remove(self)
        if self.cfg.state_file:
            workerstate.mark_clean(self.cfg.state_file, os.getpid())

    def begin_drain(self) -> None:
        """SIGTERM: refuse new streams (503), let in-flight ones finish."""
        if not self.draining:
            self.draining = True
            self.drain_started = time.monotonic()
            log.info("draining: %d streams in flight, new requests get 503", len(self.streams))

    # -- streams ---------------------------------------------------------------------------
    def open(self, req: ParsedRequest) -> tuple[TokenStream, ChunkFactory]:
        """Admit a validated request and start its generation (call on the loop).

        Raises:
            APIError: 503 while draining, 429 when the server is full.
        """
        if self.draining or self.gen is None:
            raise APIError(503, "server is shutting down; retry on another instance")
        if self.setup is not None:
            self.setup.run()  # the per-request-setup fault: on the loop, on purpose
        ids = [EOS_ID, *self.tok.encode(req.prompt)]  # <eos> doubles as BOS, as in GPT-2
        cached = self.prefix_cache.lookup(ids)
        metrics.PREFIX_CACHE_QUERIES.inc(len(ids))
        metrics.PREFIX_CACHE_HITS.inc(cached)
        prefill_s = (len(ids) - cached) * self.cfg.prefill_us_per_token / 1e6
        greq = GenRequest(ids, req.max_tokens, req.temperature, req.seed, req.ignore_eos, prefill_s)
        try:
            stream = self.gen.submit(greq)
        except Overloaded as exc:
            raise APIError(429, f"server is at capacity: {exc}", "rate_limit_error") from None
        self.streams.add(stream)
        stream.on_close.append(lambda: self.streams.discard(stream))
        # A tools request's answer ends with a tool call (its last quarter, unless
        # --tool-call-tokens says how long): the shape an agent's step gets back.
        tool = self.cfg.tool_call_tokens or (max(1, req.max_tokens // 4) if req.tools else 0)
        return stream, chunk_factory(
            req,
            len(ids),
            self.cfg.reasoning_tokens,
            tool,
            cached_tokens=cached,
        )

    def backlog_bytes(self) -> float:
        """Bytes generated but not yet accepted by the transport, over all streams."""
        return float(
            sum(max(0, s.produced - s.consumed) * s.chunk_bytes for s in list(self.streams))
        )

    async def _sweep(self) -> None:
        """Abort streams whose single write has been blocked past ``write_timeout_s``."""
        if self.cfg.has("unbounded-write"):
            return  # the fault: no write timeout at all
        while True:
            await asyncio.sleep(0.5)
            now = time.perf_counter()
            for s in list(self.streams):
                if s.write_started and now - s.write_started > self.cfg.write_timeout_s:
                    log.warning(
                        "write blocked %.1f s: aborting a slow reader's stream",
                        now - s.write_started,
                    )
                    s.timed_out = True
                    if s.writer_task is not None:
                        s.writer_task.cancel()

    def health(self) -> dict[str, object]:
        """The ``/healthz`` body."""
        from streamslo import __version__

        return {
            "status": "draining" if self.draining else "ok",
            "server": "streamslo-target",
            "mode": self.cfg.mode,
            "faults": list(self.cfg.faults),
            "pid": os.getpid(),
            "version": __version__,
            "device": str(self.device),
            "server_kind": self.cfg.server,
            "active_streams": len(self.streams),
            "token_interval_ms": self.cfg.token_interval_ms,
        }
