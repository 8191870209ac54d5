"""Single streams end to end against a live endpoint (``--streamslo-probe-url URL``); skipped without it.

Each probe feeds the bytes it reads into the shared stream tracker, so ``ok`` here means what
it means in a load run: the terminal marker came, with every token the request asked for.
"""

from __future__ import annotations

import pytest

from streamslo.verify.probes import (
    ProbeRequest,
    assert_stream_ok,
    health_check,
    probe_sse,
    probe_ws,
)

__all__ = ["test_health_check_stream_completes", "test_one_sse_stream_is_ok", "test_one_ws_stream_is_ok"]


@pytest.mark.asyncio
async def test_health_check_stream_completes(streamslo_probe_url: str) -> None:
    """The third incident's health check: a short streaming request that must end ``ok``."""
    assert_stream_ok(await health_check(streamslo_probe_url))


@pytest.mark.asyncio
async def test_one_sse_stream_is_ok(streamslo_probe_url: str) -> None:
    """One SSE stream of 32 tokens arrives whole."""
    assert_stream_ok(await probe_sse(streamslo_probe_url, ProbeRequest(max_tokens=32)))


@pytest.mark.asyncio
async def test_one_ws_stream_is_ok(streamslo_probe_url: str) -> None:
    """One WebSocket stream of 32 tokens arrives whole."""
    assert_stream_ok(await probe_ws(streamslo_probe_url, ProbeRequest(max_tokens=32)))
