"""The ``[regression]`` table of an SLO file: how ``streamslo history`` judges a run against the
runs before it (docs/history.md).

::

    [regression]
    baseline = 7            # the last K runs of the series that passed
    last = 30               # runs in the trend
    min_baseline = 3        # fewer runs that passed before: no verdict yet
    confidence = 0.95       # of each change's interval
    metrics = ["itl_ms.p99", "ttft_ms.p99", "truncation_rate"]   # judged (default: DEFAULT_JUDGED)

    [regression.margins]    # a change smaller than its margin is no regression
    itl_ms.p99 = "10%"      # relative to the baseline
    truncation_rate = 0.0005  # absolute, in the metric's unit (ms, a share, per second)

A metric is a history metric's id (:data:`HISTORY_METRICS`): a trend and its percentile
(``itl_ms.p99``), a rate (``truncation_rate``) or a throughput (``tokens_per_s``). A margin
table's keys may be written dotted (``itl_ms.p99 = "10%"``) or quoted (``"itl_ms.p99" =``).

Errors are :class:`~streamslo.errors.SLOFileError`, naming the file and line, as every other
table of an SLO file.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from streamslo.errors import SLOFileError
from streamslo.options.toml_file import TomlFile, header_line, read_toml

__all__ = [
    "DEFAULT_JUDGED",
    "DEFAULT_REGRESSION",
    "HISTORY_METRICS",
    "HistoryMetric",
    "Margin",
    "RegressionSettings",
    "parse_margin",
    "parse_regression",
    "read_regression",
    "regression_of",
]


@dataclass(frozen=True, slots=True)
class Margin:
    """How large a change must be before it counts: a share of the baseline, or an amount."""

    value: float
    """0.10 for ``"10%"`` (relative), else the amount in the metric's unit."""
    relative: bool

    def amount(self, baseline: float) -> float:
        """The margin in the metric's unit, for a baseline value."""
        return abs(baseline) * self.value if self.relative else self.value

    def text(self, unit: str = "") -> str:
        """``10 %`` or ``0.0005`` (with the unit when it has one)."""
        if self.relative:
            return f"{self.value * 100:g} %"
        return f"{self.value:g}{(' ' + unit) if unit and unit != 'ratio' else ''}"


@dataclass(frozen=True, slots=True)
class HistoryMetric:
    """One figure a run history keeps per run, with its interval."""

    id: str
    """``itl_ms.p99``, ``truncation_rate``, ``tokens_per_s``."""
    base: str
    """The metric of the registry it is computed from (``itl_ms``)."""
    kind: Literal["trend", "rate", "gauge"]
    percentile: float | None
    """N of a trend's pN; None for rates and gauges."""
    unit: str
    """``ms``, ``ratio`` or ``per_s``."""
    higher_is_better: bool
    margin: Margin
    """The default margin (docs/history.md says why each)."""


def _trend(base: str, p: int) -> HistoryMetric:
    # 10 % of the baseline: over 100 noise-only histories of 10 nights (240 streams a night,
    # 3 % drift from night to night: bench/bench_history.py) it flagged 3 nights of 700 and
    # caught a 30 % rise of ITL p99 every time (bench/RESULTS.md, "Run history").
    return HistoryMetric(f"{base}.p{p}", base, "trend", float(p), "ms", False, Margin(0.10, True))


_TRENDS = ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms")
_PERCENTILES = (50, 90, 95, 99)

#: Every figure a history keeps, in display order.
HISTORY_METRICS: Mapping[str, HistoryMetric] = {
    m.id: m
    for m in (
        *(_trend(base, p) for base in _TRENDS for p in _PERCENTILES),
        # 0.1 percentage point: the default SLO's own bound on these rates.
        HistoryMetric(
            "truncation_rate", "truncation_rate", "rate", None, "ratio", False, Margin(0.001, False)
        ),
        HistoryMetric(
            "http_5xx_rate", "http_5xx_rate", "rate", None, "ratio", False, Margin(0.001, False)
        ),
        HistoryMetric(
            "error_rate", "error_rate", "rate", None, "ratio", False, Margin(0.001, False)
        ),
        HistoryMetric(
            "tokens_per_s", "tokens_per_s", "gauge", None, "per_s", True, Margin(0.10, True)
        ),
        HistoryMetric(
            "requests_per_s", "requests_per_s", "gauge", None, "per_s", True, Margin(0.10, True)
        ),
    )
}

#: The metrics judged by default: the SLO's own (truncation, ITL p99), the first token, the
#: stream as a whole, and throughput.
DEFAULT_JUDGED: tuple[str, ...] = (
    "ttft_ms.p50",
    "ttft_ms.p99",
    "itl_ms.p50",
    "itl_ms.p99",
    "tpot_ms.p50",
    "e2e_ms.p99",
    "truncation_rate",
    "error_rate",
    "tokens_per_s",
)


@dataclass(frozen=True)
class RegressionSettings:
    """A parsed ``[regression]`` (or the defaults)."""

    baseline: int = 7
    """K: the baseline is the last K runs of the series that passed (a week of nights)."""
    last: int = 30
    """N: runs shown in the trend."""
    min_baseline: int = 3
    """Fewer runs that passed before the one judged: no verdict for it ("no baseline yet")."""
    confidence: float = 0.95
    """Of every interval (a point's, and a change's)."""
    metrics: tuple[str, ...] = DEFAULT_JUDGED
    """The metrics judged (their verdicts decide the exit code)."""
    margins: Mapping[str, Margin] = field(default_factory=dict)
    """Margins given in the file; the others are each metric's default."""
    source: str = "<default>"

    def margin(self, metric: str) -> Margin:
        """The margin of ``metric``: the file's, else the metric's default."""
        given = self.margins.get(metric)
        return given if given is not None else HISTORY_METRICS[metric].margin


DEFAULT_REGRESSION = RegressionSettings()

_KEYS = ("baseline", "last", "min_baseline", "confidence", "metrics", "margins")
_MARGIN = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*%\s*$")


def _line(text: str | None, needle: str | None = None, table: str = "regression") -> int | None:
    """The line of ``[regression]`` (or ``[regression.margins]``), or of the first line in it
    that holds ``needle``."""
    if not text:
        return None
    parts = table.split(".")
    head = header_line(text, *parts)
    if head is None:
        return header_line(text, "regression", prefix=True)
    if needle is None:
        return head
    lines = text.splitlines()
    for i in range(head, len(lines)):
        if lines[i].lstrip().startswith("["):
            break
        if needle in lines[i]:
            return i + 1
    return head


def parse_margin(value: object) -> Margin:
    """``"10%"`` (a share of the baseline) or a number (an amount in the metric's unit).

    Raises:
        ValueError: anything else, or a negative margin.
    """
    if isinstance(value, str):
        m = _MARGIN.match(value)
        if m is None:
            raise ValueError(
                f"a margin is a share such as '10%' or a number in the metric's unit, got {value!r}"
            )
        return Margin(float(m.group(1)) / 100.0, True)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(
            f"a margin is a share such as '10%' or a number in the metric's unit, got {value!r}"
        )
    if value < 0:
        raise ValueError(f"a margin cannot be negative, got {value!r}")
    return Margin(float(value), False)


def _metric_id(name: object) -> str:
    if not isinstance(name, str) or name not in HISTORY_METRICS:
        close = difflib.get_close_matches(str(name), list(HISTORY_METRICS), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(
            f"unknown history metric {name!r}{hint}; known: {', '.join(HISTORY_METRICS)}"
        )
    return name


def _flatten(table: Mapping[str, Any], prefix: str = "") -> list[tuple[str, str, Any]]:
    """``{itl_ms: {p99: "10%"}}`` as ``[("itl_ms.p99", "p99", "10%")]`` (full key, the last
    part as written, the value)."""
    out: list[tuple[str, str, Any]] = []
    for k, v in table.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out += _flatten(v, key + ".")
        else:
            out.append((key, str(k), v))
    return out


def _int(value: object, what: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{what} must be a whole number of runs, at least {low}, got {value!r}")
    return value


def parse_regression(
    table: object, source: str = "<regression>", text: str | None = None
) -> RegressionSettings:
    """Parse a ``[regression]`` table.

    Args:
        table: the table's contents.
        source: the file (named in errors).
        text: the file's text, so errors can name the line.

    Raises:
        SLOFileError: an unknown key, a bad value, an unknown metric; names the file and line.
    """
    if not isinstance(table, Mapping):
        raise SLOFileError(source, _line(text), "[regression] must be a table")
    unknown = [k for k in table if k not in _KEYS]
    if unknown:
        raise SLOFileError(
            source,
            _line(text, unknown[0]),
            f"[regression]: unknown key {unknown[0]!r}; expected {', '.join(_KEYS)}",
        )
    values: dict[str, Any] = {}
    key = ""
    try:
        for key in ("baseline", "last", "min_baseline"):
            if key in table:
                values[key] = _int(table[key], key, 1)
        key = "confidence"
        if key in table:
            c = table[key]
            if isinstance(c, bool) or not isinstance(c, (int, float)) or not 0.5 <= c < 1.0:
                raise ValueError(
                    f"confidence must be a number in [0.5, 1), such as 0.95, got {c!r}"
                )
            values[key] = float(c)
        key = "metrics"
        if key in table:
            raw = table[key]
            if isinstance(raw, str) or not isinstance(raw, list) or not raw:
                raise ValueError('metrics must be a list such as ["itl_ms.p99", "truncation_rate"]')
            values[key] = tuple(dict.fromkeys(_metric_id(m) for m in raw))
    except ValueError as exc:
        raise SLOFileError(source, _line(text, key), f"[regression] {exc}") from None
    base = values.get("baseline", DEFAULT_REGRESSION.baseline)
    if values.get("min_baseline", DEFAULT_REGRESSION.min_baseline) > base:
        raise SLOFileError(
            source,
            _line(text, "min_baseline"),
            f"[regression] min_baseline ({values['min_baseline']}) cannot exceed baseline ({base})",
        )
    margins: dict[str, Margin] = {}
    raw_margins = table.get("margins", {})
    if not isinstance(raw_margins, Mapping):
        raise SLOFileError(
            source,
            _line(text, "margins"),
            '[regression] margins must be a table: [regression.margins] then itl_ms.p99 = "10%"',
        )
    for full, last, value in _flatten(raw_margins):
        line = _line(text, last, "regression.margins") or _line(text, "margins")
        try:
            margins[_metric_id(full)] = parse_margin(value)
        except ValueError as exc:
            raise SLOFileError(source, line, f"[regression.margins] {full}: {exc}") from None
    return RegressionSettings(margins=margins, source=source, **values)


def regression_of(toml: TomlFile) -> RegressionSettings:
    """The ``[regression]`` of a parsed SLO file; the defaults without that table.

    Raises:
        SLOFileError: see :func:`parse_regression`.
    """
    if "regression" not in toml.doc:
        return RegressionSettings(source=toml.path)
    return parse_regression(toml.doc["regression"], toml.path, toml.text)


def read_regression(path: str | Path) -> RegressionSettings:
    """Read an SLO file's ``[regression]``. The file is checked as an SLO file (no unknown
    table, a ``[thresholds]`` that parses when it has one), but may hold ``[regression]`` alone.

    Raises:
        SLOFileError: the file cannot be read or does not parse (names the file and line).
    """
    from streamslo.slo._parse import check_top_level, thresholds_of

    toml = read_toml(path)
    check_top_level(toml)
    thresholds_of(toml)
    return regression_of(toml)
