"""``--duration`` is the length of the load: counted from the first request, not from Locust's
start (docs/cli.md).

Locust's ``--run-time`` clock starts when its runner does, before the users spawn, the test-start
listeners run (results directory, ``gc.collect()``, the ``inspect`` prewarm) and the first user
asks ``/v1/models`` for the model: on this machine a 5 s run loaded for 2.8 s and a 30 s run for
28-29.7 s. ``streamslo run`` therefore passes the load's length as ``--load-time`` (warm-up plus
duration) and a ``--run-time`` that is only a safety net; the process that runs Locust's clock
(the local runner, or a master) ends the load here, ``load_time`` after its first request began
(a master, which sends none, counts from its test start). Ending it is what Locust's own timer
does in a headless run: ``runner.quit()``, and the streams in flight get the drain.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import gevent

from streamslo.loadgen.recorder import get_recorder

if TYPE_CHECKING:
    from locust.env import Environment

__all__ = ["FIRST_REQUEST_POLL_S", "start"]

log = logging.getLogger(__name__)

#: How often the timer looks for the first request before it starts counting.
FIRST_REQUEST_POLL_S = 0.005


def start(environment: Environment) -> None:
    """At test start: end the load ``load_time`` seconds after its first request (no-op
    without ``--load-time``)."""
    rec = get_recorder(environment)
    load_time = rec.opts.load_time
    if load_time <= 0:
        return
    from locust.runners import MasterRunner

    master = isinstance(environment.runner, MasterRunner)
    started = time.perf_counter()

    def end_load() -> None:
        while not master and rec.source.first_request_t is None:
            gevent.sleep(FIRST_REQUEST_POLL_S)
        first = started if master else rec.source.first_request_t
        assert first is not None
        gevent.sleep(max(0.0, first + load_time - time.perf_counter()))
        log.info("streamslo: %gs of load since the first request, shutting down", load_time)
        rec.source.load_over = (
            True  # stopping hundreds of users takes a moment: none starts a stream
        )
        assert environment.runner is not None  # (set before the test starts)
        environment.runner.quit()

    gevent.spawn(end_load)
