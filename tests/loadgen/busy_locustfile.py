"""The suite's locustfile, for a worker whose process is saturated: a greenlet burns the CPU in
50 ms slices from test start, as a generator with too many streams for its core would. Its
CPU and greenlet lag are then over the validity limits, and the run must say so, naming it."""

from __future__ import annotations

import time
from typing import Any

import gevent
from locust import events

from streamslo.loadgen.locustfile import (
    OpenLoopStreamUser,
    SlowSSEStreamUser,
    SlowWebSocketStreamUser,
    SSEStreamUser,
    WebSocketStreamUser,
)

__all__ = [
    "OpenLoopStreamUser",
    "SSEStreamUser",
    "SlowSSEStreamUser",
    "SlowWebSocketStreamUser",
    "WebSocketStreamUser",
]


def _burn() -> None:
    while True:
        end = time.perf_counter() + 0.05
        while time.perf_counter() < end:
            pass
        gevent.sleep(0)  # let heartbeats and the streams run between slices


@events.test_start.add_listener
def _start_burning(environment: Any, **_: Any) -> None:
    gevent.spawn(_burn)
