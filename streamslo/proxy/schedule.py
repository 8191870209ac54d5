"""The proxy's decisions, with no I/O in them: what to write, when, and when to cut.

The engine feeds each flow's bytes in as they are read, with the time they were read, and asks
:meth:`Pipe.poll` what to do next; every answer is computed from the times it is given, so the
tests drive it with a scripted clock.

One connection has one :class:`FaultSchedule` holding two :class:`Pipe` objects, ``down``
(upstream to client) and ``up`` (client to upstream). A pipe is a delay line followed by a
token bucket::

    feed(t, data) ──► cut rule ──► delay line ─────────► token bucket ──► poll(now) → Write
                     (reset /      (release at t +        (bandwidth)
                      blackhole     latency + jitter,
                      after N)      never before the previous piece)

* The delay line keeps order: a piece is released at ``max(t + latency + jitter, previous
  release)``, so jitter delays but never reorders, and latency does not throttle (pieces in
  flight overlap, as on a long wire).
* A byte count ``N`` (``reset_after`` / ``blackhole_after``) lets exactly the first ``N`` bytes
  through; the fault fires when byte ``N + 1`` arrives. A reset is queued behind those bytes,
  so the client receives all ``N`` before the RST. A blackhole darkens both pipes: everything
  read afterwards is discarded and a close from the upstream is swallowed; only the client
  hanging up ends the connection.
* A close (EOF) from a faulted flow's source is passed on ``slow_close`` seconds late.
"""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass
from enum import Enum

from streamslo.proxy.config import Faults

__all__ = [
    "Action",
    "Close",
    "Eof",
    "FaultSchedule",
    "Idle",
    "Pipe",
    "Reset",
    "Selector",
    "TokenBucket",
    "Wait",
    "Write",
]

_EPS = 1e-9


class TokenBucket:
    """A token bucket: ``rate`` tokens (bytes) per second, at most ``size`` saved up.

    It starts full, so the first ``size`` bytes pass at once; after that bytes pass at
    ``rate``. Args: ``rate`` bytes per second, ``size`` bytes, ``now`` the clock's time.
    """

    def __init__(self, rate: float, size: int, now: float) -> None:
        if rate <= 0 or size < 1:
            raise ValueError(f"a token bucket needs rate > 0 and size >= 1, not {rate!r}, {size!r}")
        self.rate = float(rate)
        self.size = size
        self._tokens = float(size)
        self._t = now

    def _refill(self, now: float) -> None:
        if now > self._t:
            self._tokens = min(float(self.size), self._tokens + (now - self._t) * self.rate)
            self._t = now

    def delay(self, now: float, want: int) -> float:
        """Seconds until ``min(want, size)`` tokens are saved up (0 when they are)."""
        self._refill(now)
        need = min(want, self.size) - self._tokens
        return 0.0 if need <= _EPS * self.rate else need / self.rate

    def take(self, now: float, n: int) -> None:
        """Spend ``n`` tokens (call when :meth:`delay` said 0 for ``n``)."""
        self._refill(now)
        self._tokens = max(0.0, self._tokens - n)


# --- what poll() answers ---------------------------------------------------------------------


@dataclass(frozen=True)
class Write:
    """Write these bytes to the destination now."""

    data: bytes


@dataclass(frozen=True)
class Wait:
    """Nothing is due yet; ask again after ``seconds`` (or when more data was fed)."""

    seconds: float


class Idle:
    """Nothing is queued; wait for data."""


class Eof:
    """The source closed: half-close the destination (``write_eof``)."""


class Reset:
    """Reset both sides (RST)."""


class Close:
    """Close both sides normally (FIN): the client hung up on a blackholed connection."""


Action = Write | Wait | type[Idle] | type[Eof] | type[Reset] | type[Close]


class _Kind(Enum):
    DATA = "data"
    EOF = "eof"
    RESET = "reset"
    CLOSE = "close"


_TERMINAL: dict[_Kind, type[Eof] | type[Reset] | type[Close]] = {
    _Kind.EOF: Eof,
    _Kind.RESET: Reset,
    _Kind.CLOSE: Close,
}


@dataclass
class _Item:
    release: float
    kind: _Kind
    data: bytes = b""
    offset: int = 0


class _Cut(Enum):
    RESET = "reset"
    BLACKHOLE = "blackhole"


class Pipe:
    """One flow through the proxy: a delay line, a token bucket and a cut rule.

    Args:
        faults: the faults to apply, or None to pass bytes straight through.
        rng: draws the jitter.
        now: the clock's time at creation (the token bucket starts full then).
    """

    def __init__(self, faults: Faults | None, rng: random.Random, now: float) -> None:
        f = faults or Faults()
        self._latency = f.latency_s
        self._jitter = f.jitter_s
        self._slow_close = f.slow_close_s
        self._rng = rng
        size = f.bucket_size
        self._bucket = (
            TokenBucket(f.bandwidth, size, now) if f.bandwidth is not None and size else None
        )
        cuts = [
            (n, kind)
            for n, kind in ((f.reset_after, _Cut.RESET), (f.blackhole_after, _Cut.BLACKHOLE))
            if n is not None
        ]
        # Only the smaller count can ever fire: once it has, the pipe forwards nothing more.
        self._cut = min(cuts, key=lambda c: c[0]) if cuts else None
        self._queue: deque[_Item] = deque()
        self._last_release = -math.inf
        self.passed = 0
        """Bytes accepted for forwarding (they are, or will be, written)."""
        self.dropped = 0
        """Bytes read and discarded (after a reset or blackhole)."""
        self.buffered = 0
        """Bytes queued and not yet handed out by :meth:`poll`."""
        self.dark = False
        """True once the pipe discards what it is fed."""
        self.fired: str | None = None
        """``"reset"`` or ``"blackhole"`` once this pipe's byte count fired it."""
        self.slow_close_pending = False
        """True while a close held back by ``slow_close`` is queued."""

    def _release_at(self, t: float) -> float:
        self._last_release = max(t, self._last_release)
        return self._last_release

    def _enqueue(self, now: float, data: bytes) -> None:
        jitter = self._rng.uniform(0.0, self._jitter) if self._jitter else 0.0
        self._queue.append(_Item(self._release_at(now + self._latency + jitter), _Kind.DATA, data))
        self.passed += len(data)
        self.buffered += len(data)

    def feed(self, now: float, data: bytes) -> None:
        """Bytes read from the source at ``now``."""
        if self.dark:
            self.dropped += len(data)
            return
        if self._cut is not None and self.passed + len(data) > self._cut[0]:
            keep = self._cut[0] - self.passed
            if keep > 0:
                self._enqueue(now, data[:keep])
            self.dropped += len(data) - max(keep, 0)
            self.dark = True
            self.fired = self._cut[1].value
            if self._cut[1] is _Cut.RESET:
                self._queue.append(_Item(self._release_at(now + self._latency), _Kind.RESET))
            return
        if data:
            self._enqueue(now, data)

    def feed_eof(self, now: float) -> None:
        """The source closed at ``now``: pass the close on after the data, ``slow_close`` late."""
        if self.dark:
            return
        self.dark = True
        self.slow_close_pending = self._slow_close > 0
        self._queue.append(
            _Item(self._release_at(now + self._latency + self._slow_close), _Kind.EOF)
        )

    def feed_reset(self, now: float) -> None:
        """The source reset the connection at ``now``: reset the other side after the data."""
        if self.dark:
            return
        self.dark = True
        self._queue.append(_Item(self._release_at(now + self._latency), _Kind.RESET))

    def go_dark(self) -> None:
        """Discard everything fed from now on (what is queued still goes out)."""
        self.dark = True

    def end(self, now: float, reset: bool) -> None:
        """Drop what is queued and end the connection at once (RST when ``reset``, else FIN)."""
        self.dark = True
        self._queue.clear()
        self.buffered = 0
        self._queue.append(_Item(now, _Kind.RESET if reset else _Kind.CLOSE))

    def has_room(self, max_buffer: int) -> bool:
        """True while fewer than ``max_buffer`` bytes are queued (the engine reads only then)."""
        return self.buffered < max_buffer

    def poll(self, now: float) -> Action:
        """What to do at ``now``: :class:`Write`, :class:`Wait`, or one of :class:`Idle`,
        :class:`Eof`, :class:`Reset`, :class:`Close`."""
        if not self._queue:
            return Idle
        item = self._queue[0]
        if item.release > now:
            return Wait(item.release - now)
        if item.kind is not _Kind.DATA:
            self._queue.popleft()
            if item.kind is _Kind.EOF:
                self.slow_close_pending = False
            return _TERMINAL[item.kind]
        left = len(item.data) - item.offset
        n = left
        if self._bucket is not None:
            n = min(left, self._bucket.size)
            wait = self._bucket.delay(now, n)
            if wait > 0:
                return Wait(wait)
            self._bucket.take(now, n)
        piece = item.data[item.offset : item.offset + n] if n < len(item.data) else item.data
        item.offset += n
        self.buffered -= n
        if item.offset >= len(item.data):
            self._queue.popleft()
        return Write(piece)


class FaultSchedule:
    """Both flows of one connection, and the rules that tie them (a blackhole darkens both;
    a client hanging up on a dark connection ends it).

    Args:
        faults: the faults, or None for a connection that passes through untouched.
        rng: this connection's random source (jitter).
        now: the clock's time when the connection was accepted.
    """

    def __init__(self, faults: Faults | None, rng: random.Random, now: float) -> None:
        self.faults = faults
        d = faults.direction if faults is not None else None
        # One random source per flow, drawn in a fixed order: the jitter of one flow does not
        # depend on how reads of the two flows interleave.
        down_rng, up_rng = random.Random(rng.random()), random.Random(rng.random())
        self.down = Pipe(faults if d is not None and d.covers(True) else None, down_rng, now)
        """Upstream to client."""
        self.up = Pipe(faults if d is not None and d.covers(False) else None, up_rng, now)
        """Client to upstream."""

    @property
    def blackholed(self) -> bool:
        return "blackhole" in (self.down.fired, self.up.fired)

    def pipe(self, downstream: bool) -> Pipe:
        return self.down if downstream else self.up

    def feed(self, downstream: bool, now: float, data: bytes) -> None:
        """Bytes read at ``now`` from the upstream (``downstream``) or from the client."""
        pipe = self.pipe(downstream)
        pipe.feed(now, data)
        if pipe.fired == "blackhole":
            self.down.go_dark()
            self.up.go_dark()
        elif pipe.fired == "reset":
            self.pipe(not downstream).go_dark()

    def feed_eof(self, downstream: bool, now: float) -> None:
        """A side closed its sending half at ``now``."""
        if self.blackholed:
            if not downstream:
                self.down.end(now, reset=False)  # the client gave up: end both sides
            return  # the upstream's close is swallowed: the client keeps hearing silence
        self.pipe(downstream).feed_eof(now)

    def feed_reset(self, downstream: bool, now: float) -> None:
        """A side reset the connection (or failed) at ``now``."""
        if self.blackholed:
            if not downstream:
                self.down.end(now, reset=True)
            return
        self.pipe(downstream).feed_reset(now)


class Selector:
    """Which connections get the faults (``every`` / ``probability``), and each connection's
    random source, both fixed by the seed and the connection's number (1-based)."""

    def __init__(self, faults: Faults) -> None:
        self.faults = faults

    def choose(self, index: int) -> tuple[bool, random.Random]:
        """``(faulted, rng)`` for connection number ``index``."""
        f = self.faults
        rng = random.Random(f.seed * 1_000_003 + index)
        draw = rng.random()  # always drawn, so the jitter sequence does not depend on the mode
        if not f.active:
            return False, rng
        if f.every is not None:
            return index % f.every == 0, rng
        if f.probability is not None:
            return draw < f.probability, rng
        return True, rng
