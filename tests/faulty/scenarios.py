"""The whole catalogue: every family of scenarios, loaded in a stable order, and what a
correct client reports for each (:data:`EXPECTED`)."""

from __future__ import annotations

import importlib

from tests.faulty.catalogue import SCENARIOS
from tests.faulty.constants import (
    REQUEST_TIMEOUT_S,
    STALL_TIMEOUT_S,
    TIMER_BOUNDED,
    UNTIMED_TIMEOUTS_S,
)

# The families register themselves on import, in this order (``ok`` first: it is the first
# model of ``/v1/models``).
for _family in (
    "scenarios_ok",
    "scenarios_broken",
    "scenarios_waits",
    "scenarios_hostile_heads",
    "scenarios_hostile",
    "scenarios_real",
):
    importlib.import_module(f"tests.faulty.{_family}")

from tests.faulty.scenarios_hostile import HOSTILE  # noqa: E402

__all__ = [
    "EXPECTED",
    "HOSTILE",
    "MIXES",
    "SCENARIOS",
    "TIMED",
    "UNSETTLED",
    "WS_HANDSHAKE_SCENARIOS",
    "client_timeouts",
]

#: Path-selected mixes: ``/s/<mix>/...`` gives each request (each WebSocket connection) the
#: next scenario of the mix in turn.
MIXES: dict[str, tuple[str, ...]] = {
    "mix_hostile": ("ok", *HOSTILE),
    # /v1/responses and /v1/messages (tests/faulty/dialects.py): each dialect's faults in turn.
    "mix_dialect": (
        "ok",
        "cut",
        "no_terminal",
        "error_midway",
        "filtered",
        "keepalive",
        "empty_deltas",
        "usage_more",
        "ok_reasoning",
    ),
}

#: Scenarios that, on WebSocket, act on the handshake when selected by the path prefix.
#: :data:`EXPECTED` assumes the path prefix for these on ``ws``.
WS_HANDSHAKE_SCENARIOS = frozenset(n for n, s in SCENARIOS.items() if s.handshake is not None)

#: (scenario, "sse" | "ws") -> the outcome a correct client reports (see the module doc).
EXPECTED: dict[tuple[str, str], str] = {}
for _name, _sc in SCENARIOS.items():
    EXPECTED[(_name, "sse")] = _sc.expected_sse
    if _sc.expected_ws is not None:
        EXPECTED[(_name, "ws")] = _sc.expected_ws

#: Cases the protocol does not settle, with why; left out of :data:`EXPECTED` on purpose.
UNSETTLED: dict[tuple[str, str], str] = {
    ("data_after_done", "ws"): (
        "A WS request's stream ends at its [DONE], so the stray frame that follows "
        "belongs to no request; a client that reads on may call it malformed, one that "
        "stops at [DONE] reports ok."
    ),
    ("close_immediately", "ws (by model)"): (
        "A TCP drop after the request frame with no close frame: the stream began, so "
        "truncated, or 'reset before any response', so connect_error."
    ),
    ("reset_immediately", "ws (by model)"): "As close_immediately by model.",
}

#: Scenarios a client's timers decide (``stalled``, ``timeout`` on either transport) or bound
#: (:data:`~tests.faulty.constants.TIMER_BOUNDED`): their clients run with the stall timeout
#: and deadline :data:`EXPECTED` assumes.
TIMED = frozenset(
    {name for (name, _), outcome in EXPECTED.items() if outcome in ("stalled", "timeout")}
    | TIMER_BOUNDED
)


def client_timeouts(scenario: str) -> tuple[float, float]:
    """(stall timeout, request deadline), seconds, for a client of ``scenario``: those
    :data:`EXPECTED` assumes where a timer decides (:data:`TIMED`), ample ones elsewhere
    (:data:`~tests.faulty.constants.UNTIMED_TIMEOUTS_S`; :data:`EXPECTED` holds with either)."""
    if scenario in TIMED:
        return STALL_TIMEOUT_S, REQUEST_TIMEOUT_S
    return UNTIMED_TIMEOUTS_S
