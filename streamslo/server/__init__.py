"""streamslo's bundled target server: a tiny PyTorch LLM behind an OpenAI-style streaming API.

It runs in one of two modes (``streamslo serve``; see ``docs/server.md``):

- ``fixed``: a continuous-batching decode thread, admission control, bounded per-stream
  buffers with write timeouts, a loop watchdog. What good looks like.
- ``naive``: the three incidents' "before", built from composable faults (see
  :mod:`streamslo.server.config`): compute on the event loop, a device sync per token, per-request
  setup, unbounded writes, a co-located training process, silent cancellation.

Layout: :mod:`~streamslo.server.config` (typed settings), :mod:`~streamslo.server.tokenizer`,
:mod:`~streamslo.server.model` (the transformer and its KV cache), :mod:`~streamslo.server.engine`
(batched decode thread) and :mod:`~streamslo.server.naive` (loop-blocking generation),
:mod:`~streamslo.server.protocol` (request validation, chunks), :mod:`~streamslo.server.sse_encode` and
:mod:`~streamslo.server.streaming` (writing a stream), :mod:`~streamslo.server.app` (routes),
:mod:`~streamslo.server.launch` (uvicorn or gunicorn; the shell is :mod:`streamslo.commands.serve`).
"""

__all__: list[str] = []
