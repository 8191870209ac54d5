"""Error budgets and multiwindow, multi-burn-rate alerts (the SRE workbook's), from windows.

A scenario or SLO file may hold a ``[budget]`` table::

    [budget]
    objective = "truncation_rate"   # any rate metric but goodput_fraction
    target = 0.999                  # the budget is 1 - target of the objective's population
    time_scale = 1                  # 60 turns 1h/5m into 1m/5s for a short soak
    alerts = [{ long = "1h", short = "5m", factor = 14.4, abortOnFail = true },
              { long = "6h", short = "30m", factor = 6 }]

Burn rate over a span = the objective's error rate over the windows of that span / (1 − target).
An alert fires when both its long and its short span burn faster than ``factor`` (strictly),
evaluated each time a window closes, on the windows that end within each span (a span not yet
full uses what there is, as Prometheus would). It fires once per episode: again only after it
stopped firing. ``fired_at`` is the end of the window whose close made it fire, so a replay of
``windows.csv`` (``streamslo finalize`` of a killed run) gives the same alerts.
Without ``alerts``, the workbook's two page alerts apply (1h/5m × 14.4 and 6h/30m × 6).

Errors are :class:`~streamslo.errors.SLOFileError`, naming the file and line.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streamslo.errors import SLOFileError
from streamslo.figures.metrics import RATE_METRICS, metric_kind
from streamslo.options.toml_file import TomlFile, header_line, key_line, read_toml
from streamslo.options.units import format_duration, parse_duration
from streamslo.results.layout import iso_utc
from streamslo.slo.live_eval import LIVE_UNSUPPORTED, rate_from_counts
from streamslo.stream.outcome import OUTCOMES

if TYPE_CHECKING:
    from streamslo.slo.thresholds import SLO

__all__ = [
    "DEFAULT_ALERTS",
    "Budget",
    "BurnAlert",
    "BurnTracker",
    "FiredAlert",
    "budget_line",
    "burn_down",
    "describe",
    "parse_budget",
    "read_slo_file",
    "replay",
    "sections_of",
]

_BUDGET_KEYS = ("objective", "target", "alerts", "time_scale")
_ALERT_KEYS = ("long", "short", "factor", "abortOnFail", "name")


@dataclass(frozen=True)
class BurnAlert:
    """One multiwindow alert, its spans already divided by the budget's ``time_scale``."""

    long_s: float
    short_s: float
    factor: float
    abort_on_fail: bool = False
    name: str = ""
    """``1h/5m×14.4`` unless the file names it."""


#: The SRE workbook's page alerts (for a 30-day budget): 2 % of it in an hour, 5 % in 6 hours.
DEFAULT_ALERTS: tuple[BurnAlert, ...] = (
    BurnAlert(3600.0, 300.0, 14.4, name="1h/5m×14.4"),
    BurnAlert(21600.0, 1800.0, 6.0, name="6h/30m×6"),
)


@dataclass(frozen=True)
class Budget:
    """A parsed ``[budget]``."""

    objective: str
    target: float
    alerts: tuple[BurnAlert, ...] = DEFAULT_ALERTS
    time_scale: float = 1.0
    source: str = "<budget>"

    @property
    def allowed(self) -> float:
        """The error rate the budget allows: 1 − target."""
        return 1.0 - self.target

    def as_dict(self) -> dict[str, object]:
        """``run.json``'s ``budget`` (what a replay needs)."""
        return {
            "objective": self.objective,
            "target": self.target,
            "time_scale": self.time_scale,
            "source": self.source,
            "alerts": [asdict(a) for a in self.alerts],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Budget:
        """From :meth:`as_dict`. Raises ValueError for anything else."""
        try:
            alerts = tuple(
                BurnAlert(
                    float(a["long_s"]),
                    float(a["short_s"]),
                    float(a["factor"]),
                    bool(a.get("abort_on_fail", False)),
                    str(a.get("name", "")),
                )
                for a in data["alerts"]
            )
            return cls(
                str(data["objective"]),
                float(data["target"]),
                alerts,
                float(data.get("time_scale", 1.0)),
                str(data.get("source", "<budget>")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a budget: {exc}") from None


@dataclass(frozen=True)
class FiredAlert:
    """An alert that fired: ``run.json``'s ``alerts``."""

    name: str
    fired_at: str
    """ISO 8601, UTC: the end of the window whose close made it fire."""
    fired_at_epoch: float
    burn_long: float
    burn_short: float
    long_s: float
    short_s: float
    factor: float
    abort_on_fail: bool

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


# ---------------------------------------------------------------------------- parsing
def budget_line(text: str | None, key: str | None = None, needle: str | None = None) -> int | None:
    """The line of ``[budget]`` (or of ``key`` in it, or of the first line after it holding
    ``needle``) in ``text``; None when unknown."""
    if not text:
        return None
    head = header_line(text, "budget")
    if head is None or (key is None and needle is None):
        return head
    start = head
    if key is not None:
        start = key_line(text, head, key) or head
        if needle is None or start == head:
            return start
    assert needle is not None
    lines = text.splitlines()
    end = next(
        (i for i in range(head, len(lines)) if lines[i].lstrip().startswith("[")), len(lines)
    )
    return next((i + 1 for i in range(start - 1, end) if needle in lines[i]), start)


def _duration(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"{what} must be a duration such as '1h' or '5m', got {value!r}")
    seconds = parse_duration(value)
    if seconds <= 0:
        raise ValueError(f"{what} must be longer than 0, got {value!r}")
    return seconds


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{what} must be a number, got {value!r}")
    return float(value)


def parse_budget(table: object, source: str = "<budget>", text: str | None = None) -> Budget:
    """Parse a ``[budget]`` table.

    Raises:
        SLOFileError: anything wrong; the message names the file and line.
    """
    if not isinstance(table, Mapping):
        raise SLOFileError(source, budget_line(text), "[budget] must be a table")
    unknown = [k for k in table if k not in _BUDGET_KEYS]
    if unknown:
        raise SLOFileError(
            source,
            budget_line(text, unknown[0]),
            f"[budget]: unknown key {unknown[0]!r}; expected {', '.join(_BUDGET_KEYS)}",
        )
    objective = table.get("objective")
    rates = [m for m in RATE_METRICS if m not in LIVE_UNSUPPORTED]
    if (
        not isinstance(objective, str)
        or metric_kind(objective) != "rate"
        or objective in LIVE_UNSUPPORTED
    ):
        raise SLOFileError(
            source,
            budget_line(text, "objective"),
            f"[budget] objective must be a rate metric ({', '.join(rates)}), got {objective!r}",
        )
    key = "target"  # the key being read: a bad value names its line
    try:
        target = _number(table.get("target"), "target")
        if not 0.0 < target < 1.0:
            raise ValueError(f"target must be between 0 and 1 (e.g. 0.999), got {target!r}")
        key = "time_scale"
        scale = _number(table.get("time_scale", 1), "time_scale")
        if scale <= 0:
            raise ValueError(f"time_scale must be above 0, got {scale!r}")
    except ValueError as exc:
        raise SLOFileError(source, budget_line(text, key), f"[budget] {exc}") from None
    raw = table.get("alerts")
    if raw is None:
        alerts = tuple(
            BurnAlert(a.long_s / scale, a.short_s / scale, a.factor, name=a.name)
            for a in DEFAULT_ALERTS
        )
        return Budget(objective, target, alerts, scale, source)
    if isinstance(raw, (str, Mapping)) or not isinstance(raw, Sequence) or not raw:
        raise SLOFileError(
            source,
            budget_line(text, "alerts"),
            "[budget] alerts must be a list of { long, short, factor, abortOnFail } tables",
        )
    out = []
    for i, item in enumerate(raw):
        out.append(_parse_alert(i, item, scale, source, text))
    return Budget(objective, target, tuple(out), scale, source)


def _parse_alert(i: int, item: Any, scale: float, source: str, text: str | None) -> BurnAlert:
    where = f"[budget] alerts[{i}]"
    if not isinstance(item, Mapping):
        raise SLOFileError(
            source,
            budget_line(text, "alerts"),
            f"{where}: expected a table {{ long, short, factor }}, got {item!r}",
        )
    line = budget_line(text, "alerts", _alert_needle(item))
    unknown = [k for k in item if k not in _ALERT_KEYS]
    if unknown:
        raise SLOFileError(
            source, line, f"{where}: unknown key {unknown[0]!r}; expected {', '.join(_ALERT_KEYS)}"
        )
    try:
        for key in ("long", "short", "factor"):
            if key not in item:
                raise ValueError(f"needs {key}")
        long_s, short_s = _duration(item["long"], "long"), _duration(item["short"], "short")
        factor = _number(item["factor"], "factor")
        if factor <= 0:
            raise ValueError(f"factor must be above 0, got {factor!r}")
        if short_s >= long_s:
            raise ValueError(
                f"the short window ({item['short']}) must be shorter than the long one ({item['long']})"
            )
        abort = item.get("abortOnFail", False)
        if not isinstance(abort, bool):
            raise ValueError(f"abortOnFail must be true or false, got {abort!r}")
    except ValueError as exc:
        raise SLOFileError(source, line, f"{where}: {exc}") from None
    name = str(item.get("name") or f"{item['long']}/{item['short']}×{factor:g}")
    return BurnAlert(long_s / scale, short_s / scale, factor, abort, name)


def _alert_needle(item: Any) -> str | None:
    if isinstance(item, Mapping) and isinstance(item.get("long"), str):
        return f'"{item["long"]}"'
    return None


def read_slo_file(path: str | Path) -> tuple[SLO | None, Budget | None]:
    """The thresholds and budget of an SLO file or a scenario file, read once.

    Returns:
        (the :class:`~streamslo.slo.thresholds.SLO`, or None without ``[thresholds]``; the
        :class:`Budget`, or None without ``[budget]``).

    Raises:
        SLOFileError: the file cannot be read or does not parse (names the file and line).
    """
    return sections_of(read_toml(path))


def sections_of(toml: TomlFile) -> tuple[SLO | None, Budget | None]:
    """The thresholds and budget of a parsed SLO or scenario file (see :func:`read_slo_file`).

    Raises:
        SLOFileError: a bad ``[thresholds]`` or ``[budget]`` (names the file and line).
    """
    from streamslo.slo import thresholds

    is_scenario = any(k in toml for k in ("load", "scenarios"))
    slo = thresholds.thresholds_of(toml) if is_scenario else thresholds.slo_of(toml)
    if is_scenario and slo is not None:
        slo = thresholds.truth_of(toml, slo)
    budget = parse_budget(toml.doc["budget"], toml.path, toml.text) if "budget" in toml else None
    return slo, budget


# ---------------------------------------------------------------------------- evaluation
@dataclass
class _Win:
    end: float
    num: int
    den: int


def _cell(v: float | None) -> float:
    """A windows.csv cell that is set in every row (TypeError when empty, as ``float(None)``)."""
    if v is None:
        raise TypeError("an empty windows.csv cell where a number is needed")
    return float(v)


@dataclass
class BurnTracker:
    """Feeds on closed windows (``windows.csv`` rows, in order); says which alerts fire."""

    budget: Budget
    fired: list[FiredAlert] = field(default_factory=list)
    """Every alert that fired, in order."""
    errors: int = 0
    eligible: int = 0
    _wins: deque[_Win] = field(default_factory=deque)
    _firing: dict[int, bool] = field(default_factory=dict)
    burns: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)
    """Alert name -> (long, short) burn rates after the last window."""

    def _burn(self, now_end: float, span: float) -> float | None:
        num = den = 0
        for w in reversed(self._wins):
            if w.end <= now_end - span + 1e-9:
                break
            num += w.num
            den += w.den
        return None if den == 0 else (num / den) / self.budget.allowed

    @property
    def consumed(self) -> float | None:
        """The share of the budget spent over the run so far (1.0: all of it); None before
        any eligible stream."""
        return None if self.eligible == 0 else (self.errors / self.eligible) / self.budget.allowed

    def add(self, row: Mapping[str, float | None]) -> list[FiredAlert]:
        """One closed window; returns the alerts that fire at its end."""
        outcomes = {o: int(row.get(o) or 0) for o in OUTCOMES}
        num, den = rate_from_counts(self.budget.objective, outcomes, int(row.get("began") or 0))
        end = _cell(row["window_start"]) + _cell(row["window_s"])
        self._wins.append(_Win(end, num, den))
        self.errors += num
        self.eligible += den
        horizon = max(a.long_s for a in self.budget.alerts)
        while self._wins and self._wins[0].end <= end - horizon:
            self._wins.popleft()
        new = []
        for i, a in enumerate(self.budget.alerts):
            bl, bs = self._burn(end, a.long_s), self._burn(end, a.short_s)
            self.burns[a.name] = (bl, bs)
            firing = bl is not None and bs is not None and bl > a.factor and bs > a.factor
            if firing and not self._firing.get(i):
                f = FiredAlert(
                    a.name,
                    iso_utc(end),
                    end,
                    round(bl or 0.0, 4),
                    round(bs or 0.0, 4),
                    a.long_s,
                    a.short_s,
                    a.factor,
                    a.abort_on_fail,
                )
                self.fired.append(f)
                new.append(f)
            self._firing[i] = firing
        return new


def replay(budget: Budget, rows: Iterable[Mapping[str, float | None]]) -> list[FiredAlert]:
    """The alerts a run's windows fire, in order."""
    tracker = BurnTracker(budget)
    for r in rows:
        tracker.add(r)
    return tracker.fired


def burn_down(
    budget: Budget, rows: Iterable[Mapping[str, float | None]]
) -> list[tuple[float, float | None]]:
    """(window end, budget remaining: 1 − consumed) after each window, for the report's chart."""
    tracker = BurnTracker(budget)
    out = []
    for r in rows:
        tracker.add(r)
        c = tracker.consumed
        out.append(
            (_cell(r["window_start"]) + _cell(r["window_s"]), None if c is None else 1.0 - c)
        )
    return out


def describe(budget: Budget) -> str:
    """One line: ``truncation_rate target 0.999; alerts 1h/5m×14.4 (abort), ...``."""
    parts = [
        f"{a.name} ({format_duration(a.long_s)}/{format_duration(a.short_s)}{', abort' if a.abort_on_fail else ''})"
        for a in budget.alerts
    ]
    return f"{budget.objective} target {budget.target:g}; alerts {', '.join(parts)}"
