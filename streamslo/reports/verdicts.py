"""SLO verdict rows: every threshold checked on both runs, through :mod:`streamslo.slo.thresholds`.

The thresholds engine (``DEFAULT_SLO``, ``load_slo(path)``, ``evaluate(slo, data)`` returning
checks with ``metric``, ``expression``, ``observed``, ``passed``, ``message``) is the one
``verify`` uses, so the report's verdicts are verify's verdicts.

Verdicts of a comparison: ``fixed`` (failed before, holds after), ``pass`` (held on both),
``regressed`` (held before, fails after), ``fail`` (failed on both). A single run: ``pass`` or
``fail``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from streamslo.reports.model import VerdictRow
from streamslo.results.layout import RunData
from streamslo.slo import thresholds

__all__ = ["evaluate_runs", "resolve_slo", "verdict_word"]


def resolve_slo(slo: thresholds.SLO | str | Path | None) -> tuple[thresholds.SLO, str]:
    """The SLO object to check, and a description of where it came from.

    Args:
        slo: None (the incidents' default SLO), a path to a TOML file, or a
            :class:`streamslo.slo.thresholds.SLO` already loaded.

    Raises:
        SLOFileError: the file does not parse (the message names the file and line).
    """
    if slo is None:
        return thresholds.DEFAULT_SLO, "default (the incidents' SLO)"
    if isinstance(slo, (str, Path)):
        return thresholds.load_slo(Path(slo)), str(slo)
    return slo, str(getattr(slo, "source", "given by the caller"))


def verdict_word(before: bool | None, after: bool) -> str:
    """``fixed`` / ``pass`` / ``regressed`` / ``fail`` (single run: ``pass`` / ``fail``)."""
    if before is None or before == after:
        return "pass" if after else "fail"
    return "fixed" if after else "regressed"


def _key(check: Any) -> tuple[str, str]:
    return str(check.metric), str(check.expression)


def _num(v: Any) -> float | None:
    return None if v is None else float(v)


def evaluate_runs(slo: thresholds.SLO, runs: Sequence[RunData]) -> tuple[VerdictRow, ...]:
    """Check ``slo`` on each run (``(after,)`` or ``(before, after)``) and pair the checks."""
    after_checks = list(thresholds.evaluate(slo, runs[-1]))
    before_checks: dict[tuple[str, str], Any] = {}
    if len(runs) > 1:
        before_checks = {_key(c): c for c in thresholds.evaluate(slo, runs[0])}
    rows: list[VerdictRow] = []
    for chk in after_checks:
        b = before_checks.get(_key(chk))
        after_v, before_v = _num(chk.observed), (None if b is None else _num(b.observed))
        before_passed = None if b is None else bool(b.passed)
        delta = None if after_v is None or before_v is None else after_v - before_v
        rows.append(
            VerdictRow(
                metric=str(chk.metric),
                expression=str(chk.expression),
                before=before_v,
                after=after_v,
                delta=delta,
                before_passed=before_passed,
                after_passed=bool(chk.passed),
                verdict=verdict_word(before_passed, bool(chk.passed)),
                message=str(chk.message),
            )
        )
    return tuple(rows)
