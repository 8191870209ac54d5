"""Generation: the per-request token stream and the batched decode thread (no ASGI here).

:class:`TokenStream` is what a request handler iterates (``async for item in stream``). Tokens
reach it from a producer — the :class:`BatchEngine` thread (fixed mode) or a coroutine on the
loop (:mod:`streamslo.server.naive`) — through a bounded buffer. The engine hands each step's
tokens to the loop with *one* ``loop.call_soon_threadsafe`` per step (not one per token), and
never waits on the loop.

Back-pressure: a stream whose buffer holds ``cap`` unwritten tokens (a slow reader) is parked
— left out of decode steps — until its writer has drained half the buffer. Parked streams are
swapped to the end of the packed slot range so a step still runs on a view of the KV cache.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import torch

from streamslo.server import metrics
from streamslo.server.config import ServerConfig
from streamslo.server.model import GPT, KVCache
from streamslo.server.sampling import sample
from streamslo.server.tokenizer import EOS_ID, Tokenizer

__all__ = ["BatchEngine", "GenRequest", "Overloaded", "Producer", "StreamItem", "TokenStream"]

log = logging.getLogger(__name__)

#: ("token", text) | ("end", finish_reason) | ("error", message)
StreamItem = tuple[str, str]


#: Prefills per decode step (each costs about a decode step of a small batch).
_ADMIT_PER_STEP = 16
#: The share of a step's interval after which no further prefill starts in that step.
_PREFILL_SHARE = 0.75
#: Steps over which :class:`_OutputPhase` takes the peak of the steps' work.
_PHASE_WINDOW = 64


class Overloaded(Exception):
    """Admission refused: the server holds ``max_streams`` streams (HTTP 429, WS 1013)."""


@dataclass(frozen=True)
class GenRequest:
    """A validated generation request, in token ids."""

    prompt_ids: list[int]
    max_tokens: int
    temperature: float
    seed: int
    ignore_eos: bool
    prefill_s: float = 0.0
    """Simulated prefill time of the prompt's uncached tokens, paid before generation starts."""


class TokenStream:
    """One request's tokens on their way from a producer to the writer on the event loop.

    The producer side (``produced``) is touched only by the producer; the consumer side
    (``consumed``, ``cancelled``) only by the loop. Each counter has one writer, so the engine
    thread can read both without a lock.
    """

    def __init__(self, req: GenRequest, loop: asyncio.AbstractEventLoop, cap: int | None) -> None:
        self.req = req
        self.loop = loop
        self.cap = cap
        """Tokens that may wait unwritten; None means unbounded (the ``unbounded-write`` fault)."""
        self.produced = 0
        self.consumed = 0
        self.cancelled = False
        self.finish_reason: str | None = None
        self.started = time.monotonic()
        self._items: deque[StreamItem] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._space: asyncio.Event | None = None
        self._closed = False
        self.on_close: list[Any] = []
        # Writer bookkeeping (loop thread): the write-timeout sweeper and the backlog gauge.
        self.write_started = 0.0
        self.timed_out = False
        self.writer_task: asyncio.Task[Any] | None = None
        self.chunk_bytes = 0
        self.leak = False
        """The ``leak-cancelled`` fault: a client that leaves abandons the stream instead of
        cancelling it (set by the producer)."""
        self.abandoned = False
        """The client left, and the fault keeps generating: tokens are thrown away, the slot
        is never given back."""

    # -- producer side -------------------------------------------------------------------
    def has_space(self) -> bool:
        """Whether the producer may add a token now."""
        return self.cap is None or self.produced - self.consumed < self.cap

    def can_resume(self) -> bool:
        """Hysteresis for parked streams: resume once half the buffer is written."""
        return self.cap is None or self.produced - self.consumed <= self.cap // 2

    # -- loop side -----------------------------------------------------------------------
    def push(self, item: StreamItem) -> None:
        """Add an item (on the loop thread) and wake the consumer."""
        if self.abandoned:
            self.consumed += 1 if item[0] == "token" else 0  # nobody reads: the buffer never fills
            if item[0] != "token":
                self.finish_reason = item[1] if item[0] == "end" else "error"
            return
        self._items.append(item)
        if item[0] != "token":
            self.finish_reason = item[1] if item[0] == "end" else None
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    async def wait_space(self) -> None:
        """Producer on the loop: wait until the writer drains some of the buffer."""
        if self._space is None:
            self._space = asyncio.Event()
        self._space.clear()
        while not self.can_resume() and not self.cancelled:
            await self._space.wait()
            self._space.clear()

    def mark_consumed(self) -> None:
        """The writer has handed one token to the transport."""
        self.consumed += 1
        if self._space is not None:
            self._space.set()

    def client_gone(self) -> None:
        """The client disconnected: stop generation, or, under the ``leak-cancelled`` fault,
        abandon the stream (it generates on for nobody and keeps its slot)."""
        if self.leak and self.finish_reason is None and not self.cancelled:
            self.abandoned = True
            self._items.clear()
            w = self._waiter
            if w is not None and not w.done():
                w.set_result(None)
            return
        self.cancel()

    def cancel(self) -> None:
        """Stop generation (client gone, write timeout, shutdown). Idempotent."""
        if self.abandoned:
            return  # the fault: the writer's end does not free an abandoned stream
        self.cancelled = True
        if self._space is not None:
            self._space.set()
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)
        self.close()

    def close(self) -> None:
        """Release admission (runs the ``on_close`` callbacks once)."""
        if not self._closed:
            self._closed = True
            for cb in self.on_close:
                cb()

    def __aiter__(self) -> TokenStream:
        return self

    async def __anext__(self) -> StreamItem:
        while not self._items:
            if (self._closed and self.cancelled) or self.abandoned:
                raise StopAsyncIteration
            self._waiter = self.loop.create_future()
            await self._waiter
            self._waiter = None
        return self._items.popleft()


class Producer:
    """Admission control, shared by both producers: at most ``limit`` open streams (past it
    :class:`Overloaded`: HTTP 429, WS 1013); a stream's close gives its place back.

    Subclasses start generation in :meth:`_start`. Loop thread only.
    """

    def __init__(self, cfg: ServerConfig, limit: int) -> None:
        self.cfg = cfg
        self.limit = limit
        """Open streams admitted at most."""
        self.inflight = 0
        """Admitted streams not yet closed."""

    @property
    def full(self) -> bool:
        """Whether the next :meth:`submit` would be refused."""
        return self.inflight >= self.limit

    def submit(self, req: GenRequest) -> TokenStream:
        """Admit a request and start generating it (call on the loop).

        Raises:
            Overloaded: ``limit`` streams are open.
        """
        if self.full:
            raise Overloaded(f"server holds {self.inflight} streams (--max-streams)")
        cap = None if self.cfg.has("unbounded-write") else self.cfg.stream_buffer_tokens
        loop = asyncio.get_running_loop()
        stream = TokenStream(req, loop, cap)
        stream.leak = self.cfg.has("leak-cancelled")
        self.inflight += 1
        stream.on_close.append(self._release)
        if req.prefill_s > 0:
            # The prefill of the uncached prompt tokens: the first token comes this much later
            # (off the decode loop, so the running streams' gaps do not pay for it).
            loop.call_later(req.prefill_s, self._start_unless_cancelled, stream)
        else:
            self._start(stream)
        return stream

    def _start_unless_cancelled(self, stream: TokenStream) -> None:
        if not stream.cancelled:
            self._start(stream)

    def _release(self) -> None:
        self.inflight -= 1

    def _start(self, stream: TokenStream) -> None:
        raise NotImplementedError


class _OutputPhase:
    """When a decode step hands its tokens to the loop: at the same point of every step's
    interval, the peak of the last ``window`` steps' work (at most ``cap`` seconds after the
    step's scheduled start), or when the step's work ends if that is later.

    A step that admits streams is longer by their prefills. Had it posted its tokens as soon
    as its work ended, it would post later than the next step, and a new stream's first gap
    would be an interval less its admitting step's prefill work. A peak that decayed instead of
    leaving the window would move every post a little earlier: a bias in every gap.
    """

    def __init__(self, cap: float, window: int = _PHASE_WINDOW) -> None:
        self._cap = cap
        self._n = window
        self._i = 0
        self._q: deque[tuple[int, float]] = deque()  # (step, work); works decreasing

    def after(self, work: float) -> float:
        """Seconds after its scheduled start at which a step whose work took ``work`` posts."""
        q = self._q
        while q and q[-1][1] <= work:
            q.pop()
        q.append((self._i, work))
        if q[0][0] <= self._i - self._n:
            q.popleft()
        self._i += 1
        return max(work, min(q[0][1], self._cap))

    def clear(self) -> None:
        """Forget the steps so far (the engine went idle)."""
        self._q.clear()


def _deliver(batch: list[tuple[TokenStream, StreamItem]]) -> None:
    """Runs on the loop: hand one engine step's items to their streams."""
    for stream, item in batch:
        if not stream.cancelled:
            stream.push(item)


@dataclass
class _Active:
    stream: TokenStream
    last: int
    generated: int = 0
    parked: bool = False


class BatchEngine(Producer):
    """Continuous batching on its own thread: each step, every ready stream gains one token.

    Model compute never runs on the event loop; the step is paced to ``token_interval_ms``.
    """

    def __init__(self, cfg: ServerConfig, model: GPT, tok: Tokenizer, device: torch.device) -> None:
        super().__init__(cfg, cfg.max_streams)
        self.model = model
        self.tok = tok
        self.device = device
        self.cache = KVCache(model.cfg, cfg.max_streams, device)
        self._pending: queue.SimpleQueue[TokenStream] = queue.SimpleQueue()
        self._active: list[_Active] = []
        self._ready = 0  # slots 0.._ready-1 are decoded this step; the rest are parked
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="decode-engine", daemon=True)
        self._cuda_stream: Any = None

    def start(self) -> None:
        """Start the decode thread."""
        self._thread.start()

    def stop(self) -> None:
        """Stop the decode thread (streams in it get no further tokens)."""
        self._stop.set()
        self._thread.join(timeout=5)

    def _start(self, stream: TokenStream) -> None:
        self._pending.put(stream)

    # -- decode thread -------------------------------------------------------------------
    def _run(self) -> None:
        torch.set_num_threads(self.cfg.torch_threads)
        # The loop and this thread share the GIL; with the default 5 ms switch interval each
        # GIL hand-back inside a step (torch releases it per op) can cost the step 5 ms.
        sys.setswitchinterval(0.0005)
        if self.device.type == "cuda":
            # A high-priority stream, so a co-located job's kernels cannot starve decoding.
            self._cuda_stream = torch.cuda.Stream(device=self.device, priority=-1)  # type: ignore[no-untyped-call]
        interval = self.cfg.token_interval_ms / 1000.0
        next_step = time.perf_counter()
        phase = _OutputPhase(_PREFILL_SHARE * interval)
        while not self._stop.is_set():
            if not self._active and self._pending.empty():
                time.sleep(0.002)
                next_step = time.perf_counter()
                phase.clear()
                continue
            t0 = time.perf_counter()
            out: list[tuple[TokenStream, StreamItem]] = []
            try:
                if self._cuda_stream is not None:
                    with torch.cuda.stream(self._cuda_stream):
                        self._step(out)
                else:
                    self._step(out)
            except Exception:  # keep serving: fail the streams in the batch, not the thread
                log.exception("decode step failed")
                self._fail_all("internal error in the decode engine")
                out = []
            work = time.perf_counter() - t0
            metrics.ENGINE_STEP.observe(work)
            # From the step's scheduled start, so the sleep's own lateness does not move it.
            hold = min(t0, next_step) + phase.after(work) - time.perf_counter()
            if hold > 0:
                time.sleep(hold)
            if out:
                self._post(out)
            next_step = max(next_step + interval, time.perf_counter() - interval)
            delay = next_step - time.perf_counter()
            if delay > 0:
                time.sleep(delay)

    def _swap(self, i: int, j: int) -> None:
        if i == j:
            return
        a, b = self._active[i], self._active[j]
        self._active[i], self._active[j] = b, a
        c = self.cache
        c.k[:, [i, j]] = c.k[:, [j, i]]
        c.v[:, [i, j]] = c.v[:, [j, i]]
        c.pos[[i, j]] = c.pos[[j, i]]

    def _remove(self, i: int) -> None:
        last = len(self._active) - 1
        if i != last:
            self._active[i] = self._active[last]
            self.cache.move(last, i)
        self._active.pop()

    def _admit(self, out: list[tuple[TokenStream, StreamItem]], step_start: float) -> None:
        # A bounded number of prefills per step, so a burst of arrivals cannot stretch one
        # step (every running stream's inter-token gap) by hundreds of milliseconds; and no
        # prefill past the step's time budget once one has run: prefills then wait a step or
        # two (a little TTFT) rather than lengthen every running stream's gap, as a real
        # engine's per-step token budget does.
        budget = _ADMIT_PER_STEP
        deadline = step_start + _PREFILL_SHARE * self.cfg.token_interval_ms / 1000.0
        while len(self._active) < self.cfg.max_streams and budget > 0:
            if budget < _ADMIT_PER_STEP and time.perf_counter() > deadline:
                return
            try:
                stream = self._pending.get_nowait()
            except queue.Empty:
                return
            if stream.cancelled:
                continue  # costs nothing: neither a prefill of the budget nor the one always run
            budget -= 1
            entry = _Active(stream, last=-1)
            first: list[tuple[TokenStream, StreamItem]] = []
            try:
                logits = self.model.prefill(self.cache, len(self._active), stream.req.prompt_ids)
                self._emit_batch([entry], logits[None], first)
            except Exception as exc:
                # Only this request fails: its slot was never taken (the next prefill
                # overwrites it) and the running batch goes on.
                log.exception("prefill failed; failing that request only")
                out.append((stream, ("error", f"prefill failed: {type(exc).__name__}")))
                continue
            self._active.append(entry)
            out.extend(first)

    def _step(self, out: list[tuple[TokenStream, StreamItem]]) -> None:
        """One decode step and its admissions; the items for the loop go to ``out``."""
        start = time.perf_counter()
        # Drop finished/cancelled streams, then pack ready streams first.
        i = 0
        while i < len(self._active):
            e = self._active[i]
            if e.stream.cancelled or e.stream.finish_reason is not None or e.last < 0:
                self._remove(i)
            else:
                i += 1
        self._partition()
        b = self._ready
        if b:
            ids = torch.tensor([e.last for e in self._active[:b]], device=self.device)
            logits = self.model.decode(self.cache, ids)  # (B, vocab)
            self._emit_batch(self._active[:b], logits, out)
        self._admit(out, start)
        metrics.ENGINE_BATCH.observe(b)

    def _partition(self) -> None:
        """Ready streams to slots 0..R-1, parked (full buffer) ones after them."""
        r = 0
        for i in range(len(self._active)):
            e = self._active[i]
            if e.parked:
                e.parked = not e.stream.can_resume()
            else:
                e.parked = not e.stream.has_space()
            if not e.parked:
                self._swap(i, r)
                r += 1
        self._ready = r

    def _emit_batch(
        self,
        entries: list[_Active],
        logits: torch.Tensor,
        out: list[tuple[TokenStream, StreamItem]],
    ) -> None:
        reqs = [e.stream.req for e in entries]
        dev = logits.device
        toks = sample(
            logits,
            torch.tensor([r.temperature for r in reqs], device=dev),
            torch.tensor([r.seed for r in reqs], device=dev),
            torch.tensor([e.generated for e in entries], device=dev),
            torch.tensor([r.ignore_eos for r in reqs], device=dev),
        ).tolist()  # the one device->host sync of the step
        sync = self.cfg.has("per-token-sync")
        now = time.monotonic()
        for e, t in zip(entries, toks, strict=True):
            s = e.stream
            if sync:
                self._device_sync()
            if self.cfg.has("silent-cancel") and now - s.started > self.cfg.cancel_after_s:
                log.warning(
                    "GenerationCancelledError: Generation stopped due to resource contention"
                )
                self._finish(e, "stop", out)
                continue
            if t == EOS_ID and not s.req.ignore_eos:
                self._finish(e, "stop", out)
                continue
            e.last = t
            e.generated += 1
            s.produced += 1
            out.append((s, ("token", self.tok.decode_one(t))))
            if e.generated >= s.req.max_tokens:
                self._finish(e, "length", out)

    def _finish(self, e: _Active, reason: str, out: list[tuple[TokenStream, StreamItem]]) -> None:
        e.last = -1  # removed at the next step
        out.append((e.stream, ("end", reason)))

    def _device_sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        else:
            time.sleep(self.cfg.sync_ms / 1000.0)

    def _fail_all(self, message: str) -> None:
        out = [(e.stream, ("error", message)) for e in self._active]
        for e in self._active:
            e.last = -1
        self._post(out)

    def _post(self, out: list[tuple[TokenStream, StreamItem]]) -> None:
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[TokenStream, StreamItem]]] = {}
        for item in out:
            by_loop.setdefault(item[0].loop, []).append(item)
        for loop, items in by_loop.items():
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody is listening
                loop.call_soon_threadsafe(_deliver, items)
