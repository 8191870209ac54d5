"""Blocking-socket transports for one stream: SSE over HTTP/1.1 and WebSocket.

They do the I/O around the Sans-I/O core (:mod:`streamslo.stream`): connect, write the request,
read, and hand each read to the tracker with one ``perf_counter()`` timestamp taken right after
the read returned. Under Locust, gevent patches :mod:`socket` and :mod:`ssl`, so the same code
runs cooperatively with hundreds of streams per process; outside gevent it simply blocks.

The decisions live in Sans-I/O readers (:mod:`streamslo.stream.exchange`, :mod:`streamslo.stream.ws`);
:func:`~streamslo.transport.common.pump` feeds them. A process-wide :class:`ReadWatchdog` ends
any read once the stream made no progress (no head, no complete SSE line or WebSocket message)
for the stall timeout (``stalled``), or ran past the request deadline (``timeout``) or a short
wait (an error body, the read after ``[DONE]``); reads themselves carry no timer. Nothing a
server sends raises out of a transport: every other exception ends the stream ``malformed``.
Only a ``BaseException`` that is not an ``Exception`` (gevent's ``GreenletExit`` when Locust
stops a user, ``KeyboardInterrupt``) records the stream as ``cancelled`` and propagates.
"""

from __future__ import annotations

from streamslo.transport.common import ClientLimits, Target, make_ssl_context
from streamslo.transport.sse import SSEConnection, stream_sse
from streamslo.transport.watchdog import ReadWatchdog
from streamslo.transport.ws import WSConnection

__all__ = [
    "ClientLimits",
    "ReadWatchdog",
    "SSEConnection",
    "Target",
    "WSConnection",
    "make_ssl_context",
    "stream_sse",
]
