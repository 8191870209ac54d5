"""The stream outcome taxonomy (docs/outcomes.md), one enum used everywhere.

Every request ends with exactly one :class:`Outcome`. ``cancelled`` (the load test itself
stopped the stream) and ``client_cancelled`` (a client that hung up on purpose) are excluded
from every rate (:data:`EXCLUDED_OUTCOMES`).
"""

from __future__ import annotations

from enum import StrEnum

__all__ = [
    "BEGUN_STATUSES_WS",
    "EXCLUDED_OUTCOMES",
    "FAILURE_OUTCOMES",
    "NOT_BEGUN_OUTCOMES",
    "OUTCOMES",
    "Outcome",
    "began",
    "status_began",
]


class Outcome(StrEnum):
    """How one request ended."""

    OK = "ok"
    """2xx / accepted, terminal marker seen, no error, token count consistent."""
    TRUNCATED = "truncated"
    """The transport ended before the terminal marker."""
    SILENT_TRUNCATION = "silent_truncation"
    """The terminal marker came, but content is missing."""
    ERROR_EVENT = "error_event"
    """An error object arrived inside the stream."""
    MALFORMED = "malformed"
    """Not valid HTTP / SSE / JSON / WS; past a cap; data after the terminal marker; counts
    that do not add up."""
    STALLED = "stalled"
    """No progress (no head, no complete SSE line or WS message) for the stall timeout."""
    TIMEOUT = "timeout"
    """The whole request ran past its deadline while still streaming."""
    HTTP_4XX = "http_4xx"
    """A 4xx before the stream began (WS: refused handshake, or close 1008/1009/1013)."""
    HTTP_5XX = "http_5xx"
    """A 5xx before the stream began (WS: refused handshake, or close 1011)."""
    CONNECT_ERROR = "connect_error"
    """No connection, refused, or reset before any response."""
    CANCELLED = "cancelled"
    """The load test stopped the stream (end of run after the drain); excluded from rates."""
    CLIENT_CANCELLED = "client_cancelled"
    """The client hung up on purpose (``--cancel-rate``, a user closing the tab); excluded
    from every rate, counted on its own."""

    def __str__(self) -> str:
        return self.value


#: Every outcome name, in the documented order.
OUTCOMES: tuple[str, ...] = tuple(o.value for o in Outcome)

#: Outcomes the load test itself caused: in no rate, numerator or denominator, and in no
#: latency figure (``cancelled`` at the run's end, ``client_cancelled`` by ``--cancel-rate``).
EXCLUDED_OUTCOMES: frozenset[str] = frozenset({"cancelled", "client_cancelled"})

#: Outcomes that count as failures (everything but ok and the excluded ones).
FAILURE_OUTCOMES: frozenset[str] = frozenset(OUTCOMES) - {"ok"} - EXCLUDED_OUTCOMES

#: The status recorded for an accepted WebSocket.
BEGUN_STATUSES_WS = 101

#: Outcomes that end a request before its stream began (a non-2xx status, a refused or
#: errored WebSocket before its first content chunk, no connection).
NOT_BEGUN_OUTCOMES: frozenset[str] = frozenset({"http_4xx", "http_5xx", "connect_error"})


def began(status: int | None, outcome: str) -> bool:
    """Whether a stream *began* (docs/outcomes.md): 2xx headers arrived (WS: accepted, and no error came
    before the first content chunk, which the outcome then says).

    Args:
        status: the HTTP status recorded for the request (101 for an accepted WS), or None.
        outcome: the request's outcome name.
    """
    return outcome not in NOT_BEGUN_OUTCOMES and status_began(status)


def status_began(status: int | None) -> bool:
    """Whether a response status lets a stream begin: 2xx, or 101 for an accepted WebSocket
    (the half of :func:`began` known before the outcome)."""
    return status is not None and (200 <= status < 300 or status == BEGUN_STATUSES_WS)
