"""Server-Sent Events encoding (one ``data:`` line per event; our JSON never holds a newline)."""

from __future__ import annotations

__all__ = ["DONE", "HEADERS", "encode"]

#: The terminal event.
DONE = b"data: [DONE]\n\n"
#: Response headers of a stream; ``x-accel-buffering`` keeps nginx-style proxies from buffering.
HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


def encode(data: str) -> bytes:
    """One event carrying ``data`` (a JSON text without newlines)."""
    return b"data: " + data.encode() + b"\n\n"
