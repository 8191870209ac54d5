"""The client's fixed caps on what a server may send (docs/outcomes.md, "Caps").

A load generator is used exactly when servers misbehave, so nothing a server sends may grow
the client's memory or work without bound. Every cap here ends the stream ``malformed`` (with
the cap named in ``error``) when a server passes it, except the two waits, which only stop
reading: a short read after ``[DONE]`` and a short read of an error body.

The line/event/message cap is configurable (``ClientLimits.max_event_bytes``); the rest are
fixed, far above what any real server sends and far below what could hurt the generator.
"""

from __future__ import annotations

__all__ = [
    "AFTER_DONE_WAIT_S",
    "DEFAULT_MAX_EVENT_BYTES",
    "ERROR_BODY_WAIT_S",
    "MAX_AFTER_DONE_BYTES",
    "MAX_CHUNK_LINE_BYTES",
    "MAX_CONTENT_LENGTH_DIGITS",
    "MAX_CONTROL_FRAMES",
    "MAX_ERROR_BODY_BYTES",
    "MAX_HEAD_BYTES",
    "MAX_INTERIM_RESPONSES",
    "MAX_JSON_DEPTH",
    "MAX_RETRY_DIGITS",
    "MAX_TRAILER_BYTES",
]

#: One SSE line, one SSE event (its data and every line since the last event), one WebSocket
#: message: 1 MiB, far above any real token chunk (a few hundred bytes).
DEFAULT_MAX_EVENT_BYTES = 1 << 20

#: One response head (status line and headers), interim heads included one by one.
MAX_HEAD_BYTES = 64 * 1024
#: Interim (1xx) responses before the final one: ``100 Continue``, ``103 Early Hints``.
MAX_INTERIM_RESPONSES = 16
#: A chunk-size line, extensions included.
MAX_CHUNK_LINE_BYTES = 1024
#: The trailer section after the last chunk.
MAX_TRAILER_BYTES = 16 * 1024
#: Digits of a Content-Length (10^18 bytes is an exabyte).
MAX_CONTENT_LENGTH_DIGITS = 18

#: Bytes of a non-2xx body kept for its error message; the rest is not read.
MAX_ERROR_BODY_BYTES = 8 * 1024
#: Seconds spent reading a non-2xx body; then the status is recorded with what came.
ERROR_BODY_WAIT_S = 2.0

#: Body bytes read after ``[DONE]`` while waiting for the body's end; more is ``malformed``.
MAX_AFTER_DONE_BYTES = 4 * 1024
#: Seconds the client waits after ``[DONE]`` for the body's end; then it stops reading
#: (the outcome stays what ``[DONE]`` made it) and closes the connection.
AFTER_DONE_WAIT_S = 0.5

#: Nesting of one JSON chunk (a real chunk nests 4 deep).
MAX_JSON_DEPTH = 64
#: Digits of an SSE ``retry`` field; a longer one is ignored, as an invalid field.
MAX_RETRY_DIGITS = 10
#: WebSocket control frames (ping, pong) in a row without a data message.
MAX_CONTROL_FRAMES = 256
