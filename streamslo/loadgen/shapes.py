"""Load shapes: k6-style ``stages``, and ramp, steps and spike built from them.

A stage ``(duration, target)`` moves the user count linearly from the previous target to
``target`` over ``duration`` seconds, as k6's ``ramping-vus`` does.
"""

from __future__ import annotations

from locust import LoadTestShape

from streamslo.options.stages import Stage, builtin_stages, parse_stages

__all__ = ["Stage", "StagesShape", "builtin_stages", "parse_stages"]


class StagesShape(LoadTestShape):
    """Follows a list of stages, then stops the test."""

    def __init__(self, stages: list[Stage]) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # Locust is untyped here
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
        users = self.target_at(self.get_run_time())  # type: ignore[no-untyped-call]
        if users is None:
            return None
        return users, max(1.0, float(max(st.target for st in self.stages)))
