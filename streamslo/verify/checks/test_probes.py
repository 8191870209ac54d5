"""Single streams end to end against a live endpoint (``--streamslo-probe-url URL``); skipped without it.

Each probe feeds the bytes it reads into the shared stream tracker, so ``ok`` here means what
it means in a load run: the terminal marker came, with every token the request asked for.

The probes are coroutines run with :func:`asyncio.run`, so the checks need no pytest-asyncio
(which, installed as a dependency, would change the warnings of every other project's pytest).
"""

from __future__ import annotations

import asyncio

from streamslo.verify.probes import (
    ProbeRequest,
    assert_stream_ok,
    health_check,
    probe_sse,
    probe_ws,
)

__all__ = [
    "test_health_check_stream_completes",
    "test_one_sse_stream_is_ok",
    "test_one_ws_stream_is_ok",
]


def test_health_check_stream_completes(streamslo_probe_url: str) -> None:
    """The third incident's health check: a short streaming request that must end ``ok``."""
    assert_stream_ok(asyncio.run(health_check(streamslo_probe_url)))


def test_one_sse_stream_is_ok(streamslo_probe_url: str) -> None:
    """One SSE stream of 32 tokens arrives whole."""
    assert_stream_ok(asyncio.run(probe_sse(streamslo_probe_url, ProbeRequest(max_tokens=32))))


def test_one_ws_stream_is_ok(streamslo_probe_url: str) -> None:
    """One WebSocket stream of 32 tokens arrives whole."""
    assert_stream_ok(asyncio.run(probe_ws(streamslo_probe_url, ProbeRequest(max_tokens=32))))
