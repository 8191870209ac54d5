"""streamslo's bundled target server: a tiny PyTorch LLM behind an OpenAI-style streaming API.

It runs in one of two modes (SPEC §7, ``streamslo serve``):

- ``fixed``: a continuous-batching decode thread, admission control, bounded per-stream
  buffers with write timeouts, a loop watchdog. What good looks like.
- ``naive``: the three incidents' "before", built from composable faults (see
  :mod:`target_server.config`): compute on the event loop, a device sync per token, per-request
  setup, unbounded writes, a co-located training process, silent cancellation.

Layout: :mod:`~target_server.config` (typed settings), :mod:`~target_server.tokenizer`,
:mod:`~target_server.model` (the transformer and its KV cache), :mod:`~target_server.engine`
(batched decode thread) and :mod:`~target_server.naive` (loop-blocking generation),
:mod:`~target_server.protocol` (request validation, chunks), :mod:`~target_server.sse` and
:mod:`~target_server.streaming` (writing a stream), :mod:`~target_server.app` (routes),
:mod:`~target_server.launch` (the command line, uvicorn or gunicorn).
"""

__all__: list[str] = []
