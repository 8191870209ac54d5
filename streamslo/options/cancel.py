"""Clients that hang up: which streams the client closes early, and when (``--cancel-rate``,
``--cancel-after``; ``docs/workloads.md``).

AIPerf's semantics (``--request-cancellation-rate``, ``--request-cancellation-delay``): a share
of requests, drawn at random (seeded), is closed by the client after a delay; a request that
ends before its delay ends normally and is not cancelled. The delay counts from the request's
start (before connecting when it must connect, else just before its bytes are written: the
start of every streamslo duration; AIPerf counts from the request fully sent, the same point
give or take the write). streamslo also hangs up after N content chunks (``20tok``), which
AIPerf does not.

``--cancel-after`` forms: ``2s`` / ``500ms`` / ``2`` (seconds), ``20tok`` (content chunks),
``uniform:1s,3s`` or ``uniform:10tok,40tok`` (a uniform draw per stream). Pure; draws come from
the caller's :class:`random.Random`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import ClassVar

from streamslo.options.units import format_duration, parse_duration
from streamslo.options.values import ValueType

__all__ = ["CancelAfter", "CancelAfterSpec", "CancelPlan"]

_FORMS = "use a duration (2s, 500ms), a token count (20tok), or uniform:LOW,HIGH of either (uniform:1s,3s)"


@dataclass(frozen=True)
class CancelAfter:
    """When a cancelled stream's client hangs up: ``low``..``high`` seconds, or content chunks."""

    unit: str
    """``s`` (seconds after the start) or ``tok`` (content chunks)."""
    low: float
    high: float

    @classmethod
    def parse(cls, raw: object) -> CancelAfter:
        """Read ``2s``, ``20tok``, ``uniform:1s,3s`` or ``uniform:10tok,40tok``.

        Raises:
            ValueError: anything else (the message shows the accepted forms).
        """
        if isinstance(raw, CancelAfter):
            return raw
        if isinstance(raw, bool) or not isinstance(raw, (str, int, float)):
            raise ValueError(f"not a cancel delay: {raw!r}; {_FORMS}")
        text = str(raw).strip().lower()
        kind, sep, rest = text.partition(":")
        parts = rest.split(",") if sep else [text]
        if (sep and (kind != "uniform" or len(parts) != 2)) or not parts:
            raise ValueError(f"bad cancel delay {raw!r}; {_FORMS}")
        try:
            values = [_one(p.strip()) for p in parts]
        except ValueError as exc:
            raise ValueError(f"bad cancel delay {raw!r}: {exc}; {_FORMS}") from None
        units = {u for u, _ in values}
        if len(units) != 1:
            raise ValueError(f"bad cancel delay {raw!r}: both bounds need the same unit")
        lo, hi = values[0][1], values[-1][1]
        if hi < lo:
            raise ValueError(f"bad cancel delay {raw!r}: the upper bound is below the lower")
        return cls(units.pop(), lo, hi)

    def spec(self) -> str:
        """The compact text form (:meth:`parse` reads it back)."""

        def one(v: float) -> str:
            return f"{int(v)}tok" if self.unit == "tok" else format_duration(v)

        if self.low == self.high:
            return one(self.low)
        return f"uniform:{one(self.low)},{one(self.high)}"

    def sample(self, rng: random.Random) -> tuple[float | None, int | None]:
        """One stream's hang-up: (seconds, None) or (None, content chunks)."""
        if self.unit == "tok":
            return None, rng.randint(int(self.low), int(self.high))
        return (self.low if self.low == self.high else rng.uniform(self.low, self.high)), None


def _one(text: str) -> tuple[str, float]:
    if text.endswith("tok"):
        n = float(text[:-3])
        if not n.is_integer() or n < 1:
            raise ValueError(f"{text}: a token count must be a whole number >= 1")
        return "tok", n
    seconds = parse_duration(text)
    if seconds <= 0:
        raise ValueError(f"{text}: a delay must be longer than 0")
    return "s", seconds


@dataclass(frozen=True)
class CancelAfterSpec(ValueType):
    """A run option holding a :class:`CancelAfter`, kept as its canonical text."""

    _metavar: ClassVar[str] = "DIST"

    def parse(self, raw: object) -> str:
        return CancelAfter.parse(raw).spec()

    def describe(self) -> str:
        return "`2s`, `20tok`, `uniform:1s,3s`, `uniform:10tok,40tok`"


class CancelPlan:
    """Which streams of one load process the client hangs up on, seeded.

    Args:
        rate: the share of streams to cancel (0 to 1).
        after: ``--cancel-after`` (its text).
        seed: the draws' seed (the run's seed and the process).
    """

    def __init__(self, rate: float, after: str, seed: int) -> None:
        self.rate = rate
        self.after = CancelAfter.parse(after)
        self._rng = random.Random(seed)

    def draw(self) -> tuple[float | None, int | None]:
        """The next stream's hang-up (seconds, chunks), or (None, None) to let it finish."""
        rng = self._rng
        # Always two draws per stream, so which streams are cancelled does not depend on when.
        pick, value = rng.random(), random.Random(rng.getrandbits(64))
        if pick >= self.rate:
            return None, None
        return self.after.sample(value)

    def describe(self) -> dict[str, object]:
        return {"rate": self.rate, "after": self.after.spec()}
