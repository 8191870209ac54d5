"""k6-style stages: ``(duration, target)`` pairs, parsed from ``"30s:50,1m:50,10s:0"``.

A stage moves the user count linearly from the previous target to ``target`` over
``duration`` seconds, as k6's ``ramping-vus`` does. No Locust import here: the runner uses it.
"""

from __future__ import annotations

from dataclasses import dataclass

from streamslo.errors import BadInputError
from streamslo.options.units import parse_duration

__all__ = ["Stage", "builtin_stages", "parse_stages", "total_duration"]


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
            raise BadInputError(
                f"--stages: bad stage {part!r} ({exc}); use duration:users"
            ) from None
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
            out += [
                Stage(min(1.0, q / 10), users * i // 4),
                Stage(q - min(1.0, q / 10), users * i // 4),
            ]
        return out
    if name == "spike":
        base = max(1, users // 5)
        t = duration / 5
        return [
            Stage(1, base),
            Stage(2 * t - 1, base),
            Stage(1, users),
            Stage(t - 1, users),
            Stage(1, base),
            Stage(2 * t - 1, base),
        ]
    raise BadInputError(f"unknown shape {name!r}")


def total_duration(stages: list[Stage]) -> float:
    """Seconds from the first stage's start to the last one's end."""
    return sum(st.duration for st in stages)
