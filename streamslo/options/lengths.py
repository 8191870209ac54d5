"""Length distributions for synthetic prompts and outputs: fixed, uniform or normal.

A distribution is written as one compact string (``docs/workloads.md``), the same on a command
line, in a scenario's ``[load]`` table and in Locust's web UI:

- ``256`` — every request 256;
- ``uniform:128,512`` — an integer drawn uniformly from 128 to 512, both included;
- ``normal:256,64`` — a normal draw (mean 256, standard deviation 64), rounded, at least 1;
- ``normal:256,64,32,1024`` — the same, clipped to 32 … 1024 (GuideLLM's ``prompt_tokens``,
  ``prompt_tokens_stdev``, ``prompt_tokens_min``, ``prompt_tokens_max`` in one value).

Times (an agentic session's tool time) are a :class:`SecondsDist`: ``0.5``, ``uniform:0.2,1.5``
or ``exp:0.8`` (exponential, mean 0.8 s). Draws come from the caller's :class:`random.Random`, so
a seed fixes every length and time. No I/O.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import ClassVar

from streamslo.options.values import ValueType

__all__ = ["SECONDS_FORMS", "LengthDist", "LengthSpec", "SecondsDist", "SecondsSpec"]

_KINDS = ("fixed", "uniform", "normal")


@dataclass(frozen=True)
class LengthDist:
    """A distribution of positive integer lengths (tokens, or words without a tokenizer)."""

    kind: str
    """``fixed``, ``uniform`` or ``normal``."""
    mean: float
    """The fixed value, the uniform range's midpoint, or the normal's mean."""
    stdev: float = 0.0
    """The normal's standard deviation (0 otherwise)."""
    minimum: int = 1
    maximum: int | None = None
    """The largest value drawn; None: no upper clip (normal only)."""

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise ValueError(f"unknown length distribution {self.kind!r} (use {', '.join(_KINDS)})")
        if self.minimum < 1:
            raise ValueError(f"a length must be at least 1, not {self.minimum}")
        if self.maximum is not None and self.maximum < self.minimum:
            raise ValueError(f"maximum {self.maximum} below minimum {self.minimum}")
        if self.stdev < 0:
            raise ValueError(f"a standard deviation cannot be negative ({self.stdev:g})")

    @classmethod
    def fixed(cls, n: int) -> LengthDist:
        """Always ``n``."""
        return cls("fixed", float(n), 0.0, n, n)

    @classmethod
    def parse(cls, raw: object) -> LengthDist:
        """Read ``256``, ``uniform:MIN,MAX`` or ``normal:MEAN,STDEV[,MIN[,MAX]]``.

        Raises:
            ValueError: anything else (the message shows the accepted forms).
        """
        if isinstance(raw, LengthDist):
            return raw
        if isinstance(raw, bool) or not isinstance(raw, (str, int, float)):
            raise ValueError(f"not a length distribution: {raw!r}")
        text = str(raw).strip().lower()
        kind, sep, rest = text.partition(":")
        try:
            if not sep:
                n = _whole(kind)
                if n < 1:
                    raise ValueError("a length must be at least 1")
                return cls.fixed(n)
            nums = [float(p) for p in rest.split(",")]
            if kind == "uniform" and len(nums) == 2:
                lo, hi = _whole(nums[0]), _whole(nums[1])
                return cls("uniform", (lo + hi) / 2, 0.0, lo, hi)
            if kind == "normal" and 2 <= len(nums) <= 4:
                low = _whole(nums[2]) if len(nums) > 2 else 1
                high = _whole(nums[3]) if len(nums) > 3 else None
                return cls("normal", nums[0], nums[1], low, high)
        except ValueError as exc:
            raise ValueError(f"bad length distribution {raw!r}: {exc}; {_FORMS}") from None
        raise ValueError(f"bad length distribution {raw!r}; {_FORMS}")

    def sample(self, rng: random.Random) -> int:
        """One length, drawn with ``rng``."""
        if self.kind == "fixed":
            return self.minimum
        if self.kind == "uniform":
            assert self.maximum is not None
            return rng.randint(self.minimum, self.maximum)
        value = round(rng.gauss(self.mean, self.stdev))
        if self.maximum is not None:
            value = min(value, self.maximum)
        return max(self.minimum, value)

    @property
    def upper(self) -> int:
        """The largest value a draw can give (a normal without a maximum: mean + 6 stdev)."""
        if self.maximum is not None:
            return self.maximum
        return max(self.minimum, round(self.mean + 6 * self.stdev))

    def spec(self) -> str:
        """The compact text form (:meth:`parse` reads it back)."""
        if self.kind == "fixed":
            return str(self.minimum)
        if self.kind == "uniform":
            return f"uniform:{self.minimum},{self.maximum}"
        tail = f",{self.minimum}" if self.minimum != 1 or self.maximum is not None else ""
        if self.maximum is not None:
            tail += f",{self.maximum}"
        return f"normal:{self.mean:g},{self.stdev:g}{tail}"

    def as_dict(self) -> dict[str, object]:
        """For ``run.json``: the spec and its parts."""
        return {
            "spec": self.spec(),
            "kind": self.kind,
            "mean": self.mean,
            "stdev": self.stdev,
            "min": self.minimum,
            "max": self.maximum,
        }


_FORMS = "use N, uniform:MIN,MAX or normal:MEAN,STDEV[,MIN[,MAX]]"


def _whole(v: str | float) -> int:
    f = float(v)
    if not f.is_integer():
        raise ValueError(f"{v} is not a whole number")
    return int(f)


@dataclass(frozen=True)
class LengthSpec(ValueType):
    """A run option holding a :class:`LengthDist`; ``optional``: empty text means "not given"."""

    optional: bool = False
    _metavar: ClassVar[str] = "DIST"

    def parse(self, raw: object) -> LengthDist | None:
        if self.optional and (raw is None or (isinstance(raw, str) and not raw.strip())):
            return None
        return LengthDist.parse(raw)

    def wire(self, value: object) -> object:
        return "" if value is None else LengthDist.parse(value).spec()

    def describe(self) -> str:
        return "length: `N`, `uniform:MIN,MAX`, `normal:MEAN,STDEV[,MIN[,MAX]]`"


#: The forms of a distribution of seconds.
SECONDS_FORMS = "use SECONDS, uniform:LOW,HIGH or exp:MEAN (seconds)"


@dataclass(frozen=True, slots=True)
class SecondsDist:
    """A distribution of seconds (tool and think times): fixed, uniform or exponential."""

    kind: str
    a: float
    b: float = 0.0

    @classmethod
    def parse(cls, raw: object) -> SecondsDist:
        """Read ``0.5``, ``uniform:0.2,1.5`` or ``exp:0.8``.

        Raises:
            ValueError: anything else (the message shows the forms).
        """
        text = str(raw).strip().lower().removesuffix("s")
        kind, sep, rest = text.partition(":")
        try:
            if not sep:
                value = float(kind)
                if value >= 0 and math.isfinite(value):
                    return cls("fixed", value)
            nums = [float(x.strip().removesuffix("s")) for x in rest.split(",")]
            ok = all(v >= 0 and math.isfinite(v) for v in nums)
            if kind == "uniform" and len(nums) == 2 and ok and nums[0] <= nums[1]:
                return cls("uniform", nums[0], nums[1])
            if kind == "exp" and len(nums) == 1 and ok:
                return cls("exp", nums[0])
        except ValueError:
            pass
        raise ValueError(f"bad distribution of seconds {raw!r}; {SECONDS_FORMS}")

    def sample(self, rng: random.Random) -> float:
        if self.kind == "fixed":
            return self.a
        if self.kind == "uniform":
            return rng.uniform(self.a, self.b)
        return rng.expovariate(1.0 / self.a) if self.a > 0 else 0.0

    def spec(self) -> str:
        if self.kind == "fixed":
            return f"{self.a:g}"
        if self.kind == "uniform":
            return f"uniform:{self.a:g},{self.b:g}"
        return f"exp:{self.a:g}"


@dataclass(frozen=True)
class SecondsSpec(ValueType):
    """A :class:`SecondsDist` (``0.5``, ``uniform:0.2,1.5``, ``exp:0.8``), kept as its text."""

    _metavar: ClassVar[str] = "SECONDS"

    def parse(self, raw: object) -> SecondsDist:
        if isinstance(raw, SecondsDist):
            return raw
        return SecondsDist.parse(self.text(raw))

    def wire(self, value: object) -> object:
        return value.spec() if isinstance(value, SecondsDist) else value

    def show(self, value: object) -> str:
        return value.spec() if isinstance(value, SecondsDist) else str(value)

    def describe(self) -> str:
        return "seconds, `uniform:LOW,HIGH` or `exp:MEAN`"
