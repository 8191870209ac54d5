"""Server-Sent Events stream users."""

from __future__ import annotations

from streamslo.loadgen.base import StreamUser
from streamslo.stream.timing import Wire

__all__ = ["SSEStreamUser", "SlowSSEStreamUser"]


class SSEStreamUser(StreamUser):
    """Streams over SSE (``POST`` with ``stream: true``), one request at a time."""

    protocol = Wire.SSE


class SlowSSEStreamUser(StreamUser):
    """An SSE reader that reads small pieces with pauses: the server's send buffer fills."""

    protocol = Wire.SSE
    slow = True
