"""k6-style scenarios: the ``[scenarios.NAME]`` tables of a scenario file (``docs/scenarios.md``).

Each table names an ``executor`` (k6's four: ``constant-vus``, ``ramping-vus``,
``constant-arrival-rate``, ``ramping-arrival-rate``) and its options under k6's names and units
(``timeUnit``, ``preAllocatedVUs``, durations such as ``"30s"``). They parse into frozen
:class:`Scenario` objects; a mistake names the file and the line.

The schedules are pure functions here (no Locust): :meth:`Scenario.vus_at` for the VU
executors, :func:`arrival_offsets` for the arrival-rate ones, so the runner, the Locust side
and the tests agree on them.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from streamslo.errors import SLOFileError
from streamslo.options.lengths import LengthDist
from streamslo.options.stages import Stage
from streamslo.options.toml_file import header_line, key_line
from streamslo.options.units import parse_duration
from streamslo.results.schema import Dropped

__all__ = [
    "EXECUTORS",
    "Scenario",
    "ScenarioFileError",
    "arrival_offsets",
    "dropped_totals",
    "from_wire",
    "parse_scenarios",
    "process_share",
    "to_wire",
]

#: k6's executors this tool runs, and ``trace`` (a timed trace replay, ``docs/workloads.md``).
EXECUTORS = (
    "constant-vus",
    "ramping-vus",
    "constant-arrival-rate",
    "ramping-arrival-rate",
    "trace",
)

_COMMON = (
    "executor",
    "startTime",
    "gracefulStop",
    "protocol",
    "slowReaders",
    "promptTokens",
    "outputTokens",
)
#: Keys each executor accepts besides the common ones (k6's names).
_KEYS: Mapping[str, tuple[str, ...]] = {
    "constant-vus": ("vus", "duration"),
    "ramping-vus": ("startVUs", "stages", "gracefulRampDown"),
    "constant-arrival-rate": ("rate", "timeUnit", "duration", "preAllocatedVUs", "maxVUs"),
    "ramping-arrival-rate": ("startRate", "timeUnit", "stages", "preAllocatedVUs", "maxVUs"),
    "trace": ("trace", "speed", "format", "late", "maxLag", "blockTokens", "maxVUs"),
}
_TRACE_LATE = ("send", "drop")
_PROTOCOLS = ("sse", "ws")
_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")


class ScenarioFileError(SLOFileError):
    """A ``[scenarios.*]`` table that does not parse; the message names the file and line
    (``path``, ``line``, as for the SLO the same file may hold)."""


@dataclass(frozen=True)
class Scenario:
    """One parsed scenario. Durations in seconds; rates in arrivals per second."""

    name: str
    executor: str
    """One of :data:`EXECUTORS`."""
    start_time: float = 0.0
    """Seconds after the run's start before this scenario begins (k6 ``startTime``)."""
    graceful_stop: float = 30.0
    """Seconds its iterations in flight get once its schedule ends (k6 ``gracefulStop``)."""
    vus: int = 0
    """``constant-vus``: the VUs; ``ramping-vus``: ``startVUs``."""
    duration: float = 0.0
    """The schedule's length: ``duration``, or the stages' sum."""
    stages: tuple[Stage, ...] = ()
    """``ramping-vus``: ``(duration, target VUs)``."""
    rate: float = 0.0
    """Arrival-rate executors: ``rate`` (constant) or ``startRate`` (ramping), per second."""
    rate_stages: tuple[tuple[float, float], ...] = ()
    """``ramping-arrival-rate``: each stage's (seconds, target rate per second)."""
    time_unit: float = 1.0
    pre_allocated_vus: int = 0
    max_vus: int = 0
    graceful_ramp_down: float = 30.0
    protocol: tuple[tuple[str, float], ...] | None = None
    """``(protocol, share)`` pairs summing to 1; None: the run's ``--protocol``."""
    slow_readers: float | None = None
    """The share of slow readers; None: the run's ``--slow-readers``."""
    prompt_tokens: LengthDist | None = None
    output_tokens: LengthDist | None = None
    line: int | None = None
    """The line of its ``[scenarios.NAME]`` header."""
    trace: str | None = None
    """``trace``: the trace file (relative paths: from the working directory)."""
    trace_format: str = "auto"
    trace_speed: float = 1.0
    trace_late: str = "send"
    trace_max_lag: float = 0.05
    trace_block_tokens: int = 512

    @property
    def arrival_rate(self) -> bool:
        """An arrival-rate executor (open loop) rather than a VU one (closed loop)."""
        return self.executor.endswith("arrival-rate")

    @property
    def end(self) -> float:
        """Seconds after the run's start when its schedule ends."""
        return self.start_time + self.duration

    def vus_at(self, t: float) -> int | None:
        """VU executors: the VUs wanted ``t`` seconds into the scenario; None once it ended."""
        if t >= self.duration:
            return None
        if self.executor == "constant-vus":
            return self.vus
        prev = float(self.vus)
        for st in self.stages:
            if t < st.duration:
                return round(
                    prev + (st.target - prev) * (t / st.duration if st.duration > 0 else 1.0)
                )
            t -= st.duration
            prev = float(st.target)
        return round(prev)

    def peak_vus(self) -> int:
        """The most VUs it can hold: VUs (or their peak), or ``maxVUs``."""
        if self.arrival_rate or self.executor == "trace":
            return self.max_vus
        return max([self.vus, *(st.target for st in self.stages)])


def arrival_offsets(sc: Scenario) -> Iterator[float]:
    """Arrival-rate executors: each arrival's time, in seconds from the scenario's start.

    Arrival ``k`` comes when the integral of the rate reaches ``k`` (the first at 0, as in k6);
    the ramping rate moves linearly within a stage. The times are fixed in advance: a late or
    full generator never moves them (no catch-up burst).
    """
    if sc.executor == "constant-arrival-rate":
        if sc.rate <= 0:
            return
        gap = 1.0 / sc.rate
        k = 0
        while k * gap < sc.duration:
            yield k * gap
            k += 1
        return
    t0, done, r0 = 0.0, 0.0, sc.rate  # stage start, arrivals owed by then, rate at its start
    k = 0
    for d, r1 in sc.rate_stages:
        a = (r1 - r0) / (2 * d) if d > 0 else 0.0
        total = done + (r0 + r1) / 2 * d
        while k < total:
            # Solve done + r0*s + a*s^2 = k for s in [0, d] (the stable form of the root).
            c = max(0.0, k - done)
            denom = r0 + math.sqrt(max(0.0, r0 * r0 + 4 * a * c))
            s = 2 * c / denom if denom > 0 else 0.0
            yield t0 + min(s, d)
            k += 1
        t0, done, r0 = t0 + d, total, r1


def process_share(total: int, index: int, processes: int) -> int:
    """Process ``index``'s part of ``total`` (VUs, maxVUs) split over ``processes``."""
    n = max(1, processes)
    return total // n + (1 if index % n < total % n else 0)


# ------------------------------------------------------------------------------ parsing
class _Table:
    """One ``[scenarios.NAME]`` table being read: typed getters whose errors name the line."""

    def __init__(self, name: str, table: Mapping[str, Any], source: str, text: str) -> None:
        self.name, self.table, self.source, self.text = name, table, source, text
        self.line = header_line(text, "scenarios", name)

    def fail(self, key: str | None, message: str) -> ScenarioFileError:
        line = key_line(self.text, self.line, key) if key else self.line
        where = f"[scenarios.{self.name}]" + (f" {key}" if key else "")
        return ScenarioFileError(self.source, line, f"{where}: {message}")

    def duration(self, key: str, default: float | None = None) -> float:
        raw = self.table.get(key)
        if raw is None:
            if default is None:
                raise self.fail(None, f'{key} is required (a duration such as "30s")')
            return default
        try:
            return parse_duration(raw)
        except ValueError as exc:
            raise self.fail(key, str(exc)) from None

    def number(
        self, key: str, default: float | None = None, *, whole: bool = False, minimum: float = 0.0
    ) -> float:
        raw = self.table.get(key)
        if raw is None:
            if default is None:
                raise self.fail(None, f"{key} is required")
            return default
        if (
            isinstance(raw, bool)
            or not isinstance(raw, (int, float))
            or (whole and not float(raw).is_integer())
        ):
            raise self.fail(
                key, f"expected {'a whole number' if whole else 'a number'}, got {raw!r}"
            )
        if raw < minimum:
            raise self.fail(key, f"must be at least {minimum:g}, got {raw!r}")
        return float(raw)

    def stages(self, whole: bool) -> list[tuple[float, float]]:
        raw = self.table.get("stages")
        if raw is None:
            raise self.fail(
                None, 'stages is required, e.g. stages = [{ duration = "30s", target = 10 }]'
            )
        if not isinstance(raw, list) or not raw:
            raise self.fail("stages", "expected a non-empty list of { duration, target } tables")
        out = []
        for i, st in enumerate(raw, 1):
            if not isinstance(st, dict) or set(st) != {"duration", "target"}:
                raise self.fail(
                    "stages", f'stage {i}: expected {{ duration = "30s", target = N }}, got {st!r}'
                )
            try:
                d = parse_duration(st["duration"])
            except ValueError as exc:
                raise self.fail("stages", f"stage {i}: {exc}") from None
            tgt = st["target"]
            if (
                isinstance(tgt, bool)
                or not isinstance(tgt, (int, float))
                or tgt < 0
                or (whole and not float(tgt).is_integer())
            ):
                raise self.fail(
                    "stages",
                    f"stage {i}: target must be a {'whole ' if whole else ''}number >= 0, got {tgt!r}",
                )
            out.append((d, float(tgt)))
        return out

    def protocol(self) -> tuple[tuple[str, float], ...] | None:
        raw = self.table.get("protocol")
        if raw is None:
            return None
        if isinstance(raw, str):
            if raw not in _PROTOCOLS:
                raise self.fail(
                    "protocol",
                    f'expected "sse", "ws" or a mix such as {{ sse = 0.8, ws = 0.2 }}, got {raw!r}',
                )
            return ((raw, 1.0),)
        if not isinstance(raw, dict) or not raw:
            raise self.fail(
                "protocol",
                f'expected "sse", "ws" or a mix such as {{ sse = 0.8, ws = 0.2 }}, got {raw!r}',
            )
        bad = [k for k in raw if k not in _PROTOCOLS]
        if bad:
            raise self.fail("protocol", f"unknown protocol {bad[0]!r} in the mix (use sse and ws)")
        shares = list(raw.values())
        if (
            any(isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 for v in shares)
            or sum(shares) <= 0
        ):
            raise self.fail(
                "protocol", f"the mix's shares must be numbers >= 0, not all 0: {raw!r}"
            )
        total = float(sum(shares))
        return tuple((k, float(v) / total) for k, v in raw.items() if v > 0)

    def length(self, key: str) -> LengthDist | None:
        raw = self.table.get(key)
        if raw is None:
            return None
        try:
            return LengthDist.parse(raw)
        except ValueError as exc:
            raise self.fail(key, str(exc)) from None


def _parse_one(t: _Table) -> Scenario:
    table, name = t.table, t.name
    executor = table.get("executor")
    if executor is None:
        raise t.fail(None, f"executor is required (one of {', '.join(EXECUTORS)})")
    if executor not in EXECUTORS:
        raise t.fail("executor", f"unknown executor {executor!r} (use {', '.join(EXECUTORS)})")
    allowed = _COMMON + _KEYS[executor]
    for key in table:
        if key not in allowed:
            elsewhere = [e for e, ks in _KEYS.items() if key in ks]
            if elsewhere:
                hint = f" (it belongs to {', '.join(elsewhere)})"
            else:
                close = difflib.get_close_matches(key, allowed, n=1)
                hint = (
                    f" (did you mean {close[0]!r}?)" if close else f" (known: {', '.join(allowed)})"
                )
            raise t.fail(key, f"{key!r} does not apply to {executor}{hint}")
    slow = table.get("slowReaders")
    if slow is not None and (
        isinstance(slow, bool) or not isinstance(slow, (int, float)) or not 0 <= slow <= 1
    ):
        raise t.fail("slowReaders", f"expected a share between 0 and 1, got {slow!r}")
    common: dict[str, Any] = {
        "name": name,
        "executor": executor,
        "start_time": t.duration("startTime", 0.0),
        "graceful_stop": t.duration("gracefulStop", 30.0),
        "protocol": t.protocol(),
        "slow_readers": None if slow is None else float(slow),
        "prompt_tokens": t.length("promptTokens"),
        "output_tokens": t.length("outputTokens"),
        "line": t.line,
    }
    if executor == "constant-vus":
        return Scenario(
            **common,
            vus=int(t.number("vus", 1, whole=True, minimum=1)),
            duration=t.duration("duration"),
        )
    if executor == "trace":
        return _parse_trace(t, common)
    if executor == "ramping-vus":
        stages = tuple(Stage(d, int(tgt)) for d, tgt in t.stages(whole=True))
        return Scenario(
            **common,
            vus=int(t.number("startVUs", 1, whole=True)),
            stages=stages,
            duration=sum(st.duration for st in stages),
            graceful_ramp_down=t.duration("gracefulRampDown", 30.0),
        )
    unit = t.duration("timeUnit", 1.0)
    if unit <= 0:
        raise t.fail("timeUnit", "must be longer than 0")
    pre = int(t.number("preAllocatedVUs", whole=True))
    max_vus = int(t.number("maxVUs", pre, whole=True))
    if max_vus < max(1, pre):
        raise t.fail(
            "maxVUs", f"must be at least preAllocatedVUs ({pre}) and at least 1, got {max_vus}"
        )
    pool: dict[str, Any] = {"time_unit": unit, "pre_allocated_vus": pre, "max_vus": max_vus}
    if executor == "constant-arrival-rate":
        rate = t.number("rate")
        if rate <= 0:
            raise t.fail("rate", "must be more than 0")
        return Scenario(**common, **pool, rate=rate / unit, duration=t.duration("duration"))
    rate_stages = tuple((d, tgt / unit) for d, tgt in t.stages(whole=False))
    return Scenario(
        **common,
        **pool,
        rate=t.number("startRate", 0.0) / unit,
        rate_stages=rate_stages,
        duration=sum(d for d, _ in rate_stages),
    )


def _parse_trace(t: _Table, common: dict[str, Any]) -> Scenario:
    """A ``trace`` scenario: the trace is read once here (its span is the schedule's length)."""
    from streamslo.errors import BadInputError
    from streamslo.workload.trace import TRACE_FORMATS, describe_trace

    path = t.table.get("trace")
    if not isinstance(path, str) or not path:
        raise t.fail(None, "trace is required (the trace file's path)")
    fmt = t.table.get("format", "auto")
    if fmt not in TRACE_FORMATS:
        raise t.fail("format", f"expected one of {', '.join(TRACE_FORMATS)}, got {fmt!r}")
    late = t.table.get("late", "send")
    if late not in _TRACE_LATE:
        raise t.fail("late", f"expected send or drop, got {late!r}")
    speed = t.number("speed", 1.0)
    if speed <= 0:
        raise t.fail("speed", "must be more than 0")
    try:
        info = describe_trace(path, fmt)
    except BadInputError as exc:
        raise t.fail("trace", str(exc)) from None
    return Scenario(
        **common,
        trace=path,
        trace_format=fmt,
        trace_speed=speed,
        trace_late=late,
        trace_max_lag=t.duration("maxLag", 0.05),
        trace_block_tokens=int(t.number("blockTokens", 512, whole=True, minimum=1)),
        max_vus=int(t.number("maxVUs", 0, whole=True)),
        duration=info.span_s / speed,
    )


def parse_scenarios(table: object, source: str, text: str = "") -> tuple[Scenario, ...]:
    """Parse a scenario file's ``scenarios`` table (``[scenarios.NAME]`` sub-tables).

    Args:
        table: the parsed TOML value of ``scenarios``.
        source: the file, for error messages.
        text: the file's text, so errors can name the line.

    Raises:
        ScenarioFileError: anything wrong; the message names the file and the line.
    """
    if not isinstance(table, dict) or not table:
        raise ScenarioFileError(
            source, None, "[scenarios] needs at least one [scenarios.NAME] table"
        )
    out = []
    for name, sub in table.items():
        if not _NAME_RE.match(name):
            raise ScenarioFileError(
                source,
                header_line(text, "scenarios", name),
                f"bad scenario name {name!r} (use letters, digits, _ . -)",
            )
        if not isinstance(sub, dict):
            raise ScenarioFileError(
                source, None, f"scenarios.{name} must be a table ([scenarios.{name}])"
            )
        out.append(_parse_one(_Table(name, sub, source, text)))
    return tuple(out)


def to_wire(table: Mapping[str, object]) -> str:
    """The ``[scenarios]`` table as compact JSON: how it travels to Locust and its workers."""
    return json.dumps(table, separators=(",", ":"), sort_keys=False, default=str)


def from_wire(text: str) -> tuple[Scenario, ...]:
    """Parse what :func:`to_wire` made (already checked by the runner; errors still say where)."""
    return parse_scenarios(json.loads(text), "<scenarios>")


def dropped_totals(procs: list[dict[str, Any]]) -> Dropped:
    """Sum the generator processes' ``dropped_iterations`` (per scenario).

    Returns:
        ``{"dropped_iterations": N, "dropped_iterations_by_scenario": {name: n}}``.
    """
    by: dict[str, int] = {}
    for p in procs:
        for name, n in (p.get("dropped_iterations") or {}).items():
            by[name] = by.get(name, 0) + int(n)
    return Dropped(dropped_iterations=sum(by.values()), dropped_iterations_by_scenario=by)
