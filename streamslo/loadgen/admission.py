"""Which workers a master takes: the same streamslo and Locust versions, and a clock close to
its own, checked before any load (docs/kubernetes.md, docs/distributed.md).

A worker's first word to its master is Locust's ``client_ready`` (Locust's version only, and
Locust itself only logs a mismatch). Right after it, at Locust's ``init``, a streamslo worker
sends ``streamslo_hello``: its streamslo and Locust versions, its clock and its host. The master
judges it (:func:`judge`, pure) as it arrives:

- admitted: nothing more is said;
- refused: the master sends ``streamslo_refused`` with the reason, which the worker logs as an
  error naming both versions (or both clocks) before it exits with code 2, then Locust's own
  ``quit``; the master takes the worker out of its ready workers (it never gets users), logs
  the same line and keeps it in ``relay.json`` ``refused_workers``. The run goes on waiting for
  ``--expect-workers`` workers that are admitted.

Why refuse rather than warn: a worker of another version may format its streams otherwise (the
master would reject its batches, and the run would count streams it never measured), and a
worker whose clock is off puts its streams' ``started_at`` in other windows (the window a stream
counts in is that of its end, by the worker's clock).

A worker that sent no hello by the time the test starts (an older streamslo, or a locustfile
without streamslo) is refused then, before the master hands out users: the master waits up to
:data:`HELLO_GRACE_S` for hellos still on their way first.

The clock check compares the time the worker wrote into its hello with the master's clock when
the hello is taken in: the figure includes the message's transit (milliseconds before any load).
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from locust.runners import MasterRunner

__all__ = [
    "CLOCK_SKEW_ENV",
    "HELLO",
    "HELLO_GRACE_S",
    "MAX_CLOCK_SKEW_S",
    "REFUSED",
    "Admission",
    "Hello",
    "install",
    "judge",
    "wall_clock",
]

log = logging.getLogger(__name__)

HELLO = "streamslo_hello"
REFUSED = "streamslo_refused"

#: A worker whose clock is further than this from the master's is refused (seconds). Hosts kept
#: by NTP agree within milliseconds; 2 s is a clock that nobody keeps, and about a fifth of a
#: 10 s window: streams would land in the neighbouring window that often.
MAX_CLOCK_SKEW_S = 2.0
#: Sets another limit on the master (seconds; ``inf`` turns the check off).
CLOCK_SKEW_ENV = "STREAMSLO_MAX_CLOCK_SKEW_S"
#: At test start, how long the master waits for hellos still on their way.
HELLO_GRACE_S = 2.0


def wall_clock() -> float:
    """The clock a hello carries (epoch seconds)."""
    return time.time()


@dataclass(frozen=True)
class Hello:
    """What a worker says of itself."""

    streamslo: str
    locust: str
    time: float
    """The worker's clock when it sent the hello (epoch seconds)."""
    host: str

    @classmethod
    def here(cls) -> Hello:
        """This process's hello."""
        import locust

        import streamslo

        return cls(streamslo.__version__, locust.__version__, wall_clock(), socket.gethostname())

    def as_message(self) -> dict[str, object]:
        return {
            "streamslo": self.streamslo,
            "locust": self.locust,
            "time": self.time,
            "host": self.host,
        }

    @classmethod
    def from_message(cls, data: object) -> Hello | None:
        """A hello as it came over the wire; None for one that is not (a damaged message)."""
        if not isinstance(data, Mapping):
            return None
        t = data.get("time")
        if not isinstance(t, (int, float)) or isinstance(t, bool):
            return None
        return cls(
            str(data.get("streamslo")), str(data.get("locust")), float(t), str(data.get("host"))
        )


def judge(
    hello: Hello, master: Hello, now: float, max_skew_s: float = MAX_CLOCK_SKEW_S
) -> str | None:
    """Why a worker must be refused, in words naming both sides; None to admit it.

    Args:
        hello: the worker's hello.
        master: the master's own versions (its ``time`` is not used).
        now: the master's clock when the hello was taken in.
        max_skew_s: the largest clock difference admitted.
    """
    if (hello.streamslo, hello.locust) != (master.streamslo, master.locust):
        return (
            f"it runs streamslo {hello.streamslo} with Locust {hello.locust}, the master "
            f"streamslo {master.streamslo} with Locust {master.locust}: run the same versions "
            "of both on every host (the same image)"
        )
    skew = hello.time - now
    if abs(skew) > max_skew_s:
        side = "ahead of" if skew > 0 else "behind"
        return (
            f"its clock is {abs(skew):.1f} s {side} the master's (worker {_iso(hello.time)}, "
            f"master {_iso(now)}; at most {max_skew_s:g} s): synchronise the hosts' clocks (NTP)"
        )
    return None


def _iso(t: float) -> str:
    from streamslo.results.layout import iso_utc

    return iso_utc(t)


def max_skew_from_env() -> float:
    """:data:`MAX_CLOCK_SKEW_S`, or ``$STREAMSLO_MAX_CLOCK_SKEW_S`` when set to a number."""
    raw = os.environ.get(CLOCK_SKEW_ENV)
    if not raw:
        return MAX_CLOCK_SKEW_S
    try:
        value = float(raw)
    except ValueError:
        log.warning(
            "streamslo: %s=%r is not a number; using %g s", CLOCK_SKEW_ENV, raw, MAX_CLOCK_SKEW_S
        )
        return MAX_CLOCK_SKEW_S
    return value if value > 0 else MAX_CLOCK_SKEW_S


class Admission:
    """The master's side: judges each hello, refuses before load.

    Args:
        runner: Locust's master runner.
        on_refused: told of every refused worker (``relay.json`` keeps them).
        max_skew_s: the largest clock difference admitted.
    """

    def __init__(
        self,
        runner: MasterRunner,
        on_refused: Callable[[dict[str, object]], None] | None = None,
        max_skew_s: float = MAX_CLOCK_SKEW_S,
    ) -> None:
        self.runner = runner
        self.on_refused = on_refused
        self.max_skew_s = max_skew_s
        self.master = Hello.here()
        self.admitted: dict[str, Hello] = {}
        self.refused: dict[str, dict[str, object]] = {}

    def on_hello(self, environment: Any = None, msg: Any = None, **_: Any) -> None:
        """A worker's hello (Locust's custom-message handler, in the master's message loop)."""
        cid = str(msg.node_id)
        hello = Hello.from_message(msg.data)
        if hello is None:
            self.refuse(cid, None, "its hello could not be read: it runs another streamslo")
            return
        why = judge(hello, self.master, wall_clock(), self.max_skew_s)
        if why is None:
            self.admitted[cid] = hello
            self.refused.pop(cid, None)
            log.info(
                "streamslo: worker %s (%s) admitted: streamslo %s, Locust %s, clock within %.2f s",
                cid,
                hello.host,
                hello.streamslo,
                hello.locust,
                abs(hello.time - wall_clock()),
            )
        else:
            self.refuse(cid, hello, why)

    def refuse(self, cid: str, hello: Hello | None, why: str) -> None:
        """Take the worker out before it gets users, tell it why, and ask it to quit."""
        from locust.rpc import Message

        host = hello.host if hello is not None else "?"
        text = f"streamslo: worker {cid} ({host}) refused: {why}"
        log.error("%s", text)
        self.admitted.pop(cid, None)
        entry: dict[str, object] = {
            "worker": cid,
            "host": host,
            "streamslo": hello.streamslo if hello else None,
            "locust": hello.locust if hello else None,
            "clock_skew_s": round(hello.time - wall_clock(), 3) if hello else None,
            "reason": why,
            "at": _iso(wall_clock()),
        }
        self.refused[cid] = entry
        node = self.runner.clients.pop(cid, None)
        dispatcher = getattr(self.runner, "_users_dispatcher", None)
        if node is not None and dispatcher is not None:
            dispatcher.remove_worker(node)
        try:
            self.runner.send_message(REFUSED, {"reason": text}, client_id=cid)
            self.runner.server.send_to_client(Message("quit", None, cid))  # type: ignore[no-untyped-call]
        except Exception as exc:  # it may be gone already: it gets no users either way
            log.warning("streamslo: could not tell worker %s it was refused (%s)", cid, exc)
        if self.on_refused is not None:
            self.on_refused(entry)

    def on_test_start(self, **_: Any) -> None:
        """Before the master hands out users: refuse every worker that never said hello."""
        import gevent

        deadline = time.monotonic() + HELLO_GRACE_S
        while time.monotonic() < deadline and self._silent():
            gevent.sleep(0.05)
        for cid in self._silent():
            self.refuse(
                cid,
                None,
                "it sent no streamslo hello: it runs a streamslo older than the master's "
                f"({self.master.streamslo}) or a locustfile without streamslo",
            )

    def _silent(self) -> list[str]:
        return [cid for cid in list(self.runner.clients) if cid not in self.admitted]


def _on_refused(environment: Any, msg: Any, **_: Any) -> None:
    """A worker, refused by its master: say why, and exit with code 2 when the master's
    ``quit`` comes."""
    from streamslo.errors import EXIT_BAD_INPUT

    data = msg.data if isinstance(msg.data, Mapping) else {}
    log.error("%s", data.get("reason") or "streamslo: refused by the master")
    environment.process_exit_code = EXIT_BAD_INPUT


def install(
    events: Any, on_refused: Callable[[Any], Callable[[dict[str, object]], None] | None]
) -> None:
    """Register the admission on Locust's events (called once by
    :func:`streamslo.loadgen.hooks.install`).

    Args:
        events: Locust's events.
        on_refused: given the environment, what the master tells of each refused worker
            (the relay's receiver keeps them for ``relay.json``), or None.
    """
    from locust.runners import MasterRunner, WorkerRunner

    def _init(environment: Any, runner: Any = None, **_: Any) -> None:
        if isinstance(runner, MasterRunner):
            admission = Admission(runner, on_refused(environment), max_skew_from_env())
            runner.register_message(HELLO, admission.on_hello)
            environment.events.test_start.add_listener(admission.on_test_start)
        elif isinstance(runner, WorkerRunner):
            runner.register_message(REFUSED, _on_refused)
            runner.send_message(HELLO, Hello.here().as_message())

    events.init.add_listener(_init)
