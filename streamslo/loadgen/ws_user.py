"""WebSocket stream users: one connection per user, carrying one request after another."""

from __future__ import annotations

from streamslo.loadgen.base import StreamUser
from streamslo.stream.timing import Wire

__all__ = ["SlowWebSocketStreamUser", "WebSocketStreamUser"]


class WebSocketStreamUser(StreamUser):
    """Streams over ``/v1/ws``, reusing its connection between requests."""

    protocol = Wire.WS


class SlowWebSocketStreamUser(StreamUser):
    """A WebSocket reader that reads slowly (small reads with pauses)."""

    protocol = Wire.WS
    slow = True
