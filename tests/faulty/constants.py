"""The faulty server's settings: the client settings :data:`EXPECTED` assumes, and the
server's own timings and sizes (the hostile cases' too)."""

from __future__ import annotations

__all__ = [
    "DEEP_JSON_LEVELS",
    "DEFAULT_MAX_TOKENS",
    "DRIBBLE_PAUSE_S",
    "DRIBBLE_SIZES",
    "DRIP_INTERVAL_S",
    "ENDLESS_INTERVAL_S",
    "ENDLESS_LINE_BLOCK",
    "ENDLESS_LINE_INTERVAL_S",
    "ENDLESS_LINE_MAX_BYTES",
    "ENDLESS_S",
    "FLOOD_BLOCK",
    "FLOOD_BYTES",
    "GIANT_EVENT_BYTES",
    "GIANT_STATUS_DIGITS",
    "HOLD_MAX_S",
    "IDLE_TIMEOUT_S",
    "INTERIM_HEADS",
    "KEEPALIVE_INTERVAL_S",
    "OUTCOMES",
    "REQUEST_TIMEOUT_S",
    "SHORT_PAUSE_S",
    "STALL_S",
    "STALL_TIMEOUT_S",
    "TIMED_ITL_S",
    "TIMED_TTFT_S",
    "TIMER_BOUNDED",
    "UNTIMED_TIMEOUTS_S",
    "WS_CLOSE_WAIT_S",
    "WS_FRAGMENT",
]

#: Client stall timeout (``--stall-timeout``) that :data:`EXPECTED` assumes.
STALL_TIMEOUT_S = 1.0
#: Client request deadline (``--request-timeout``) that :data:`EXPECTED` assumes.
REQUEST_TIMEOUT_S = 4.0
#: (stall timeout, request deadline) of a client where no timer decides the outcome (a status,
#: a head, a frame, a size cap does): ample for a starved client, never met by one that works.
#: With the timeouts above such a client still had to read the answer in time, and on a loaded
#: machine it did not: ``line_flood`` read 100,028 SSE comments (0.9 MiB of its 1 MiB cap)
#: within the 1 s stall timeout and came out stalled, ``http_400``'s head came after 1 s
#: (issue 36). Which scenarios get them: tests/faulty/scenarios.py, ``client_timeouts``.
UNTIMED_TIMEOUTS_S = (30.0, 60.0)
#: Scenarios whose server outlasts any deadline or whose point is a delay under a timeout, so a
#: client's timers bound them though their outcome is not ``stalled`` or ``timeout``: the pause
#: the stall timeout must not take for a stall, the error body dripped for ever.
TIMER_BOUNDED = frozenset({"ok_short_pause", "error_body_drip"})
#: Token count when the request has no ``max_tokens``.
DEFAULT_MAX_TOKENS = 16
#: Silence in the stall scenarios (3x the stall timeout), after which the server hangs up.
STALL_S = 3.0
#: ``no_headers`` holds the connection silent until the client leaves, at most this long.
HOLD_MAX_S = 30.0
#: ``endless`` streams this long (7.5x the request timeout), one chunk every interval.
ENDLESS_S = 30.0
ENDLESS_INTERVAL_S = (
    0.7  # under the stall timeout; n - 1 tokens outlast the request timeout (n >= 8)
)
#: ``keepalive_*``: one keep-alive (comment, ping, chunk without a token) this often.
KEEPALIVE_INTERVAL_S = 0.2
#: ``timed``: first token this long after the request is read, then one every TIMED_ITL_S.
TIMED_TTFT_S = 0.3
TIMED_ITL_S = 0.05
#: ``ok_short_pause``: one pause, well under the stall timeout.
SHORT_PAUSE_S = 0.4
#: ``giant_event``: one content chunk whose text is this many bytes.
GIANT_EVENT_BYTES = 8 * 1024 * 1024
#: ``endless_line``: bytes of one line (WS: one frame) with no end, sent in blocks.
ENDLESS_LINE_MAX_BYTES = 64 * 1024 * 1024
ENDLESS_LINE_BLOCK = 64 * 1024
ENDLESS_LINE_INTERVAL_S = 0.0  # yield to the loop between blocks, no more
#: ``ok_dribble``: SSE pieces cycle through these sizes (bytes), a pause every 2 pieces.
DRIBBLE_SIZES = (1, 2, 3)
DRIBBLE_PAUSE_S = 0.001
#: ``ok_dribble`` on WebSocket: fragment payload size (bytes).
WS_FRAGMENT = 16
#: How long the server waits for the client's close frame after sending its own.
WS_CLOSE_WAIT_S = 2.0
#: Idle keep-alive connections are closed after this long.
IDLE_TIMEOUT_S = 120.0

#: Hostile cases: a byte dripped this often (10 per stall timeout).
DRIP_INTERVAL_S = 0.1
#: Hostile floods (after [DONE], error bodies, header lines...): this much, at full speed.
FLOOD_BYTES = 30 * 1024 * 1024
FLOOD_BLOCK = 64 * 1024
#: ``deep_json``: arrays nested this deep.
DEEP_JSON_LEVELS = 100_000
#: ``giant_status``: digits of the status code (and of ``retry_digits``' retry field).
GIANT_STATUS_DIGITS = 5000
#: ``interim_flood``: ``100 Continue`` heads before the final one.
INTERIM_HEADS = 1000

#: Every outcome of the taxonomy (docs/outcomes.md).
OUTCOMES = (
    "ok",
    "truncated",
    "silent_truncation",
    "error_event",
    "malformed",
    "stalled",
    "timeout",
    "http_4xx",
    "http_5xx",
    "connect_error",
    "cancelled",
)
