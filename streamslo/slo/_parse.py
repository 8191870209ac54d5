"""Parsing of SLO files and threshold expressions (k6's grammar) into check objects.

Internal to :mod:`streamslo.slo.thresholds`, which re-exports the public names; see it for the
grammar.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streamslo.errors import SLOFileError
from streamslo.figures.registry import (
    COUNTER_METRICS,
    GAUGE_METRICS,
    METRICS,
    RATE_METRICS,
    SELECTOR_KEYS,
    TREND_METRICS,
    metric_kind,
)
from streamslo.options.toml_file import TomlFile, header_line, parse_toml, read_toml
from streamslo.stream.truth import CHECKS

__all__ = [
    "AGGREGATIONS",
    "DEFAULT_SLO",
    "OPERATORS",
    "SLO",
    "SLO_TABLES",
    "Threshold",
    "check_top_level",
    "load_slo",
    "parse_expression",
    "parse_metric_key",
    "parse_slo",
    "parse_thresholds_table",
    "slo_of",
    "thresholds_of",
    "truth_of",
]

#: Every operator, as k6 writes them.
OPERATORS: tuple[str, ...] = ("<", "<=", ">", ">=", "==", "!=")
#: Aggregations each metric kind accepts (``p`` stands for ``p(N)``).
AGGREGATIONS: Mapping[str, tuple[str, ...]] = {
    "rate": ("rate",),
    "trend": ("p", "avg", "min", "max", "med", "count"),
    "counter": ("count", "rate"),
    "gauge": ("value",),
}
_ALL_AGGREGATIONS = ("rate", "p(N)", "avg", "min", "max", "med", "count", "value")
_TABLE_KEYS = ("threshold", "abortOnFail", "delayAbortEval")

_AGG_RE = re.compile(r"\s*(?P<agg>[A-Za-z_][A-Za-z0-9_.]*)\s*(?:\(\s*(?P<arg>[^)]*?)\s*\))?\s*")
_OP_RE = re.compile(r"(?P<op><>|=>|=<|<=|>=|==|!=|<|>|=)\s*")
_NUM_RE = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_KEY_RE = re.compile(r"^\s*(?P<metric>[A-Za-z_][A-Za-z0-9_]*)\s*(?:\{(?P<sel>[^{}]*)\})?\s*$")


# --------------------------------------------------------------------------- check objects
@dataclass(frozen=True, slots=True)
class Threshold:
    """One parsed threshold: a metric (with its selector) and one expression."""

    metric: str
    """The metric's name, e.g. ``itl_ms``."""
    selector: tuple[tuple[str, str], ...]
    """``(key, value)`` pairs, in the order written; empty for the whole run."""
    expression: str
    """The expression, normalised without spaces: ``p(99)<200``."""
    aggregation: str
    """``rate``, ``p``, ``avg``, ``min``, ``max``, ``med`` or ``count``."""
    percentile: float | None
    """N of ``p(N)``; None for other aggregations."""
    op: str
    """One of :data:`OPERATORS`."""
    value: float
    """The bound."""
    abort_on_fail: bool = False
    """Stop a live run once this threshold fails (after :attr:`delay_abort_eval_s`)."""
    delay_abort_eval_s: float = 0.0
    """Seconds into a run before :attr:`abort_on_fail` is considered."""
    source: str = "<default>"
    """The SLO file (or another source) this came from."""
    line: int | None = None
    """1-based line in :attr:`source`, when known."""

    @property
    def metric_key(self) -> str:
        """The metric with its selector, as written in the file: ``itl_ms{protocol:ws}``."""
        if not self.selector:
            return self.metric
        return self.metric + "{" + ",".join(f"{k}:{v}" for k, v in self.selector) + "}"

    @property
    def name(self) -> str:
        """``itl_ms{protocol:ws} p(99)<200``: a readable, unique id (pytest's test id)."""
        return f"{self.metric_key} {self.expression}"

    @property
    def where(self) -> str:
        """``file:line`` (or the file) this threshold was written at."""
        return f"{self.source}:{self.line}" if self.line is not None else self.source


@dataclass(frozen=True, slots=True)
class SLO:
    """A parsed SLO: its thresholds, in file order, and what a run must be able to check."""

    thresholds: tuple[Threshold, ...]
    source: str = "<default>"
    """Where it came from: a path, ``<default>``, or a description such as a test marker."""
    require: tuple[str, ...] = ()
    """``[truth] require``: the checks a run must be able to make (``silent_stop``,
    ``lost_chunk``, ``cut``: :data:`streamslo.stream.truth.CHECKS`); a run that cannot fails."""
    require_line: int | None = None
    """The line of ``require`` in :attr:`source`."""

    @property
    def require_where(self) -> str:
        """``file:line`` of ``[truth] require``."""
        return f"{self.source}:{self.require_line}" if self.require_line else self.source

    def __len__(self) -> int:
        return len(self.thresholds)

    def __iter__(self) -> Iterator[Threshold]:
        return iter(self.thresholds)


# --------------------------------------------------------------------------- parsing
def parse_metric_key(key: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """Split ``itl_ms{protocol:ws,user_class:SlowSSEUser}`` into metric and selector.

    Args:
        key: a key of the ``[thresholds]`` table.

    Returns:
        ``(metric, ((key, value), ...))``; the metric is not checked against the registry.

    Raises:
        ValueError: the key is not ``metric`` or ``metric{key:value,...}``, a selector key is
            unknown, empty or repeated.
    """
    m = _KEY_RE.match(key)
    if m is None:
        raise ValueError(
            f"bad metric key {key!r}: expected a metric name, optionally with a selector "
            "such as 'itl_ms{protocol:ws}'"
        )
    sel_text = m.group("sel")
    selector: list[tuple[str, str]] = []
    if sel_text is not None:
        if not sel_text.strip():
            raise ValueError(f"empty selector in {key!r}: expected {{key:value,...}}")
        for part in sel_text.split(","):
            k, sep, v = part.partition(":")
            k, v = k.strip(), v.strip()
            if not sep or not k or not v:
                raise ValueError(f"bad selector {part.strip()!r} in {key!r}: expected key:value")
            if k not in SELECTOR_KEYS:
                raise ValueError(
                    f"unknown selector key {k!r} in {key!r}; expected one of {', '.join(SELECTOR_KEYS)}"
                )
            if any(k == seen for seen, _ in selector):
                raise ValueError(f"selector key {k!r} given twice in {key!r}")
            selector.append((k, v))
    return m.group("metric"), tuple(selector)


def parse_expression(text: str) -> tuple[str, float | None, str, float]:
    """Parse one k6 threshold expression.

    Args:
        text: e.g. ``"p(99)<200"``, ``"rate <= 0.001"``, ``"avg!=0"``.

    Returns:
        ``(aggregation, percentile, op, value)``; ``aggregation`` is ``p`` for ``p(N)``.

    Raises:
        ValueError: an unknown aggregation, a bad percentile, a bad operator or a value that
            is not a finite number; the message says what was expected.
    """
    if not isinstance(text, str):
        raise ValueError(f"expected a threshold string such as 'p(99)<200', got {text!r}")
    m = _AGG_RE.match(text)
    if m is None or not m.group("agg"):
        raise ValueError(
            f"bad threshold {text!r}: expected AGGREGATION OPERATOR NUMBER, e.g. 'p(99)<200'"
        )
    agg, arg = m.group("agg"), m.group("arg")
    pct: float | None = None
    if agg == "p":
        if arg is None:
            raise ValueError(f"bad threshold {text!r}: 'p' needs a percentile, e.g. p(99)")
        try:
            pct = float(arg)
        except ValueError:
            raise ValueError(
                f"bad percentile {arg!r} in {text!r}: expected a number in [0, 100]"
            ) from None
        if not (_NUM_RE.fullmatch(arg) and 0.0 <= pct <= 100.0):
            raise ValueError(f"bad percentile {arg!r} in {text!r}: expected a number in [0, 100]")
    elif agg not in _ALL_AGGREGATIONS or arg is not None:
        shown = text[m.start("agg") : m.end()].strip()
        pm = re.fullmatch(r"p(\d+(?:\.\d+)?)", agg)
        hint = f" (did you mean p({pm.group(1)})?)" if pm else ""
        raise ValueError(
            f"unknown aggregation {shown!r}{hint} in {text!r}; "
            f"expected one of {', '.join(_ALL_AGGREGATIONS)}"
        )
    rest = text[m.end() :]
    o = _OP_RE.match(rest)
    if o is None or o.group("op") not in OPERATORS:
        shown = o.group("op") if o is not None else (rest.strip()[:1] or "nothing")
        raise ValueError(
            f"bad operator {shown!r} in {text!r}; expected one of {' '.join(OPERATORS)}"
        )
    op = o.group("op")
    num = rest[o.end() :].strip()
    if not _NUM_RE.fullmatch(num):
        raise ValueError(f"bad value {num!r} in {text!r}: expected a number after {op!r}")
    value = float(num)
    if not math.isfinite(value):
        raise ValueError(f"bad value {num!r} in {text!r}: expected a finite number")
    return agg, pct, op, value


def _fmt_pct(pct: float) -> str:
    return str(int(pct)) if pct.is_integer() else repr(pct)


def _known_metrics() -> str:
    return (
        f"trends: {', '.join(TREND_METRICS)}; rates: {', '.join(RATE_METRICS)}; "
        f"counters: {', '.join(COUNTER_METRICS)}; gauges: {', '.join(GAUGE_METRICS)}"
    )


def _metric_names() -> list[str]:
    return list(METRICS)


def _line_of(text: str | None, key: str, needle: str | None = None) -> int | None:
    """The line that defines ``key`` in ``[thresholds]`` (or, after it, holds ``needle``)."""
    if not text:
        return None
    lines = text.splitlines()
    esc = re.escape(key)
    pat = re.compile(rf"""^\s*(?:thresholds\s*\.\s*)?(?:"{esc}"|'{esc}'|{esc})\s*=""")
    start = next((i for i, ln in enumerate(lines) if pat.match(ln)), None)
    if start is None:
        return None
    if needle is not None:
        for i in range(start, len(lines)):
            if needle in lines[i]:
                return i + 1
    return start + 1


def _delay_seconds(value: Any) -> float:
    from streamslo.options.units import parse_duration

    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"delayAbortEval must be a duration such as '10s', got {value!r}")
    return parse_duration(value)


def parse_thresholds_table(
    table: Mapping[str, Any], source: str = "<thresholds>", text: str | None = None
) -> SLO:
    """Parse the contents of a ``[thresholds]`` table (from TOML, or a dict in Python).

    Args:
        table: metric key -> list of expressions (strings or ``{threshold, abortOnFail,
            delayAbortEval}`` tables).
        source: where the table came from (named in errors and kept on every threshold).
        text: the source text, when there is one, so errors can name the line.

    Returns:
        The :class:`SLO`.

    Raises:
        SLOFileError: anything wrong; the message names the source, the line when known,
            and what was expected.
    """
    if not isinstance(table, Mapping):
        raise SLOFileError(source, None, "[thresholds] must be a table of metric = [expressions]")
    if not table:
        raise SLOFileError(
            source,
            header_line(text or "", "thresholds", prefix=True),
            '[thresholds] is empty: expected at least one threshold, e.g. itl_ms = ["p(99)<200"]',
        )
    out: list[Threshold] = []
    for key, items in table.items():
        line = _line_of(text, key)
        try:
            metric, selector = parse_metric_key(key)
        except ValueError as exc:
            raise SLOFileError(source, line, str(exc)) from None
        kind = metric_kind(metric)
        if kind is None:
            close = difflib.get_close_matches(metric, _metric_names(), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise SLOFileError(
                source, line, f"unknown metric {metric!r}{hint}; known metrics: {_known_metrics()}"
            )
        if isinstance(items, (str, Mapping)) or not isinstance(items, Sequence):
            raise SLOFileError(
                source,
                line,
                f'{key}: expected a list of thresholds, e.g. {key} = ["p(99)<200"], got {items!r}',
            )
        if not items:
            raise SLOFileError(source, line, f"{key}: the list of thresholds is empty")
        for item in items:
            out.append(_parse_item(key, metric, selector, kind, item, source, text))
    return SLO(thresholds=tuple(out), source=source)


def _parse_item(
    key: str,
    metric: str,
    selector: tuple[tuple[str, str], ...],
    kind: str,
    item: Any,
    source: str,
    text: str | None,
) -> Threshold:
    abort, delay = False, 0.0
    if isinstance(item, Mapping):
        unknown = [k for k in item if k not in _TABLE_KEYS]
        if unknown:
            raise SLOFileError(
                source,
                _line_of(text, key, unknown[0]),
                f"{key}: unknown key {unknown[0]!r} in a threshold table; expected {', '.join(_TABLE_KEYS)}",
            )
        expr = item.get("threshold")
        if not isinstance(expr, str):
            raise SLOFileError(
                source,
                _line_of(text, key, "threshold"),
                f'{key}: a threshold table needs threshold = "..." (a string), e.g. {{ threshold = "p(99)<200", abortOnFail = true }}',
            )
        abort_v = item.get("abortOnFail", False)
        if not isinstance(abort_v, bool):
            raise SLOFileError(
                source,
                _line_of(text, key, "abortOnFail"),
                f"{key}: abortOnFail must be true or false, got {abort_v!r}",
            )
        abort = abort_v
        if "delayAbortEval" in item:
            try:
                delay = _delay_seconds(item["delayAbortEval"])
            except ValueError as exc:
                raise SLOFileError(
                    source, _line_of(text, key, "delayAbortEval"), f"{key}: {exc}"
                ) from None
    elif isinstance(item, str):
        expr = item
    else:
        raise SLOFileError(
            source,
            _line_of(text, key),
            f'{key}: expected a threshold string such as "p(99)<200" or a table '
            f'{{ threshold = "...", abortOnFail = true }}, got {item!r}',
        )
    line = _line_of(text, key, expr)
    try:
        agg, pct, op, value = parse_expression(expr)
    except ValueError as exc:
        raise SLOFileError(source, line, f"{key}: {exc}") from None
    if agg not in AGGREGATIONS[kind]:
        allowed = ", ".join("p(N)" if a == "p" else a for a in AGGREGATIONS[kind])
        shown = "p(N)" if agg == "p" else agg
        raise SLOFileError(
            source,
            line,
            f"{key}: aggregation {shown!r} does not apply to the {kind} metric {metric!r}; expected {allowed}",
        )
    value_text = expr.strip()[expr.strip().rfind(op) + len(op) :].strip()
    label = f"p({_fmt_pct(pct)})" if pct is not None else agg
    return Threshold(
        metric=metric,
        selector=selector,
        expression=f"{label}{op}{value_text}",
        aggregation=agg,
        percentile=pct,
        op=op,
        value=value,
        abort_on_fail=abort,
        delay_abort_eval_s=delay,
        source=source,
        line=line,
    )


def parse_slo(text: str, path: str = "<string>") -> SLO:
    """Parse the text of an SLO file.

    Args:
        text: TOML with a ``[thresholds]`` table.
        path: the file name to put in errors.

    Returns:
        The :class:`SLO`.

    Raises:
        SLOFileError: bad TOML, no ``[thresholds]`` table, an unknown top-level key or any
            error of :func:`parse_thresholds_table`.
    """
    return slo_of(parse_toml(text, path))


def slo_of(toml: TomlFile) -> SLO:
    """The SLO of a parsed SLO file (:func:`streamslo.options.toml_file.read_toml`).

    Raises:
        SLOFileError: no ``[thresholds]`` table, an unknown top-level key or any error of
            :func:`parse_thresholds_table`.
    """
    check_top_level(toml)
    slo = thresholds_of(toml)
    if slo is None:
        raise toml.error(
            None, 'no [thresholds] table: expected e.g. [thresholds] then itl_ms = ["p(99)<200"]'
        )
    return truth_of(toml, slo)


def truth_of(toml: TomlFile, slo: SLO) -> SLO:
    """``slo`` with the file's ``[truth]`` table: ``require = ["silent_stop", ...]``.

    Raises:
        SLOFileError: not a table, an unknown key, or a check that does not exist (its line).
    """
    from dataclasses import replace

    table = toml.doc.get("truth")
    if table is None:
        return slo
    if not isinstance(table, dict):
        raise toml.error(toml.table_line("truth"), "[truth] must be a table")
    for key in table:
        if key != "require":
            raise toml.error(
                toml.key_line("truth", str(key)),
                f'unknown [truth] key {key!r}: [truth] takes require = ["silent_stop", ...]',
            )
    line = toml.key_line("truth", "require")
    raw = table.get("require", [])
    items = [raw] if isinstance(raw, str) else raw
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
        raise toml.error(line, f"[truth] require must be a list of checks: {', '.join(CHECKS)}")
    for item in items:
        if item not in CHECKS:
            close = difflib.get_close_matches(item, CHECKS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise toml.error(
                line,
                f"[truth] require: unknown check {item!r}{hint}; the checks: {', '.join(CHECKS)}",
            )
    return replace(slo, require=tuple(dict.fromkeys(items)), require_line=line)


#: The tables an SLO file may hold: [budget] is read by streamslo.slo.budget, [regression] (how
#: ``streamslo history`` judges a run against the runs before it) by streamslo.slo.regression,
#: [truth] (what a run must be able to check) by :func:`truth_of`.
SLO_TABLES = ("thresholds", "budget", "regression", "truth")


def check_top_level(toml: TomlFile) -> None:
    """Refuse a top-level key that no table of an SLO file has (names its line).

    Raises:
        SLOFileError: the first unknown key.
    """
    unknown = [k for k in toml.doc if k not in SLO_TABLES]
    if unknown:
        raise toml.error(
            _line_of(toml.text, unknown[0]) or toml.table_line(unknown[0]),
            f"unknown top-level key {unknown[0]!r}: an SLO file holds a [thresholds] table "
            "(and optional [budget], [regression] and [truth] tables)",
        )


def thresholds_of(toml: TomlFile) -> SLO | None:
    """The ``[thresholds]`` of a parsed SLO or scenario file; None without that table.

    Raises:
        SLOFileError: any error of :func:`parse_thresholds_table`.
    """
    if "thresholds" not in toml.doc:
        return None
    return parse_thresholds_table(toml.doc["thresholds"], source=toml.path, text=toml.text)


def load_slo(path: str | Path) -> SLO:
    """Read and parse an SLO file.

    Args:
        path: the TOML file.

    Returns:
        The :class:`SLO`, its :attr:`SLO.source` the path as given.

    Raises:
        SLOFileError: the file cannot be read, or does not parse (see :func:`parse_slo`).
    """
    return slo_of(read_toml(path))


DEFAULT_SLO: SLO = SLO(
    thresholds=(
        Threshold("truncation_rate", (), "rate<0.001", "rate", None, "<", 0.001),
        Threshold("http_5xx_rate", (), "rate<0.001", "rate", None, "<", 0.001),
        # A server that stops answering refuses connections rather than answering 5xx: without
        # this bound a killed server passed (its 17 5xx diluted by 44,108 refused connections).
        Threshold("connect_error_rate", (), "rate<0.001", "rate", None, "<", 0.001),
        Threshold("itl_ms", (), "p(99)<200", "p", 99.0, "<", 200.0),
    ),
    source="<default>",
)
"""The incidents' SLO, and a bound on refused connections, used when no SLO file is given
(docs/thresholds.md)."""
