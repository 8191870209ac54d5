"""Load shapes: k6-style ``stages``, and ramp, steps and spike built from them.

A stage ``(duration, target)`` moves the user count linearly from the previous target to
``target`` over ``duration`` seconds, as k6's ``ramping-vus`` does.
"""

from __future__ import annotations

from dataclasses import dataclass

from locust import LoadTestShape

from streamslo.errors import BadInputError
from streamslo.units import parse_duration

__all__ = ["Stage", "StagesShape", "builtin_stages", "parse_stages"]


@dataclass(frozen=True)
class Stage:
    duration: float
    """Seconds."""
    target: int
    """Users at the end of the stage."""


def parse_stages(text: str) -> list[Stage]:
    """Parse ``"30s:50,1m:50,10s:0"``.

    Raises:
        BadInputError: not a list of ``duration:target`` pairs.
    """
    stages: list[Stage] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        dur, sep, target = part.partition(":")
        try:
            if not sep:
                raise ValueError("missing ':'")
            stage = Stage(parse_duration(dur), int(target))
        except ValueError as exc:
            raise BadInputError(f"--stages: bad stage {part!r} ({exc}); use duration:users") from None
        if stage.target < 0:
            raise BadInputError(f"--stages: a target cannot be negative: {part!r}")
        stages.append(stage)
    if not stages:
        raise BadInputError("--stages: no stage given")
    return stages


def builtin_stages(name: str, users: int, duration: float) -> list[Stage]:
    """``ramp`` (up over the first half, hold), ``steps`` (4 equal steps), ``spike``
    (a base load, a jump to the full count, back down)."""
    if name == "ramp":
        return [Stage(duration / 2, users), Stage(duration / 2, users)]
    if name == "steps":
        q = duration / 4
        out: list[Stage] = []
        for i in range(1, 5):
            out += [Stage(min(1.0, q / 10), users * i // 4), Stage(q - min(1.0, q / 10), users * i // 4)]
        return out
    if name == "spike":
        base = max(1, users // 5)
        t = duration / 5
        return [Stage(1, base), Stage(2 * t - 1, base), Stage(1, users), Stage(t - 1, users), Stage(1, base), Stage(2 * t - 1, base)]
    raise BadInputError(f"unknown shape {name!r}")


class StagesShape(LoadTestShape):
    """Follows a list of stages, then stops the test."""

    def __init__(self, stages: list[Stage]) -> None:
        super().__init__()
        self.stages = stages

    def target_at(self, t: float) -> int | None:
        prev = 0
        for st in self.stages:
            if t < st.duration:
                frac = t / st.duration if st.duration > 0 else 1.0
                return round(prev + (st.target - prev) * frac)
            t -= st.duration
            prev = st.target
        return None

    def tick(self) -> tuple[int, float] | None:
        users = self.target_at(self.get_run_time())
        if users is None:
            return None
        return users, max(1.0, float(max(st.target for st in self.stages)))
