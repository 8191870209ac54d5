"""A stand-in for :mod:`streamslo.thresholds`, used only while that module is absent.

It knows the k6 aggregations the incidents' SLO needs (``rate``, ``p(N)``, ``avg``, ``med``,
``min``, ``max``) on metrics without selectors, and reads ``[thresholds]`` from a TOML file.
Once :mod:`streamslo.thresholds` exists, :mod:`reports.verdicts` uses it instead.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from streamslo.errors import SLOFileError
from streamslo.metrics import metric_kind, rate_value, trend_samples
from streamslo.results import RunData

__all__ = ["DEFAULT_SLO", "FallbackCheck", "FallbackSLO", "evaluate", "load_slo"]

_EXPR = re.compile(
    r"^\s*(?P<agg>rate|avg|med|min|max|p\((?P<p>\d+(?:\.\d+)?)\))\s*"
    r"(?P<op><=|>=|==|!=|<|>)\s*(?P<value>-?\d+(?:\.\d+)?(?:[eE]-?\d+)?)\s*$"
)
_OPS = {
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
}


@dataclass(frozen=True)
class FallbackSLO:
    """Thresholds as ``(metric, expression)`` pairs."""

    thresholds: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class FallbackCheck:
    """One checked threshold (the fields of the real engine's CheckResult)."""

    metric: str
    expression: str
    observed: float | None
    passed: bool
    message: str


DEFAULT_SLO = FallbackSLO(
    (
        ("truncation_rate", "rate<0.001"),
        ("http_5xx_rate", "rate<0.001"),
        ("itl_ms", "p(99)<200"),
    )
)


def load_slo(path: str | Path) -> FallbackSLO:
    """Read ``[thresholds]`` from a TOML file.

    Raises:
        SLOFileError: the file does not parse or holds an unknown metric or expression.
    """
    p = Path(path)
    try:
        doc = tomllib.loads(p.read_text())
    except OSError as exc:
        raise SLOFileError(str(p), None, f"cannot be read ({exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise SLOFileError(str(p), getattr(exc, "lineno", None), str(exc)) from None
    table = doc.get("thresholds")
    if not isinstance(table, dict):
        raise SLOFileError(str(p), None, "no [thresholds] table")
    out: list[tuple[str, str]] = []
    for metric, items in table.items():
        if metric_kind(metric) is None:
            raise SLOFileError(str(p), None, f"unknown metric {metric!r}")
        for item in items if isinstance(items, list) else [items]:
            expr = item.get("threshold") if isinstance(item, dict) else item
            if not isinstance(expr, str) or not _EXPR.match(expr):
                raise SLOFileError(str(p), None, f"{metric}: cannot parse {expr!r}")
            out.append((metric, expr))
    return FallbackSLO(tuple(out))


def _observe(data: RunData, metric: str, agg: str, p: str | None) -> float | None:
    if agg == "rate":
        num, den = rate_value(data, metric)
        return None if den == 0 else num / den
    samples: Any = trend_samples(data, metric)
    if samples.size == 0:
        return None
    if p is not None:
        return float(np.percentile(samples, float(p)))
    fn = {"avg": np.mean, "med": np.median, "min": np.min, "max": np.max}[agg]
    return float(fn(samples))


def evaluate(slo: FallbackSLO, data: RunData) -> list[FallbackCheck]:
    """Check every threshold of ``slo`` on one run."""
    out: list[FallbackCheck] = []
    for metric, expr in slo.thresholds:
        m = _EXPR.match(expr)
        assert m is not None  # checked when loaded
        agg = "p" if m.group("p") else m.group("agg")
        observed = _observe(data, metric, agg, m.group("p"))
        if observed is None:
            out.append(FallbackCheck(metric, expr, None, False, f"{metric} {expr}: no data"))
            continue
        ok = bool(_OPS[m.group("op")](observed, float(m.group("value"))))
        word = "held" if ok else "failed"
        out.append(FallbackCheck(metric, expr, observed, ok, f"{metric} {expr}: {observed:.6g} {word}"))
    return out
