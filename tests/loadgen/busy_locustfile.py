"""The suite's locustfile, for a worker whose process is saturated: a greenlet burns the CPU in
50 ms slices from test start, as a generator with too many streams for its core would. Its
CPU and greenlet lag are then over the validity limits, and the run must say so, naming it.

``STREAMSLO_TEST_BURN_S``: burn only that long (the run stays invalid for minutes after: its lag
p99 holds the burnt samples), so that a web UI stays quick to load."""

from __future__ import annotations

import os
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
    stop = time.perf_counter() + float(os.environ.get("STREAMSLO_TEST_BURN_S") or "inf")
    while time.perf_counter() < stop:
        end = time.perf_counter() + 0.05
        while time.perf_counter() < end:
            pass
        gevent.sleep(0)  # let heartbeats and the streams run between slices


@events.test_start.add_listener
def _start_burning(environment: Any, **_: Any) -> None:
    gevent.spawn(_burn)
