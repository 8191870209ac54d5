"""A scenario file (``--scenario``), read once into its typed sections (``docs/scenarios.md``).

``[load]`` gives run options (the option table's ``[load]`` keys), ``[scenarios.NAME]`` k6
executors, ``[thresholds]`` the SLO and ``[budget]`` the error budget. The file is read and
parsed once (:func:`streamslo.options.toml_file.read_toml`); ``run``, ``soak`` and ``sweep``
take every section from the one :class:`ScenarioFile`. Every error names the file and, where it
can, the line.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streamslo.options.run_options import scenario_values
from streamslo.options.toml_file import TomlFile, read_toml
from streamslo.slo.budget import Budget, parse_budget
from streamslo.slo.thresholds import SLO, thresholds_of, truth_of
from streamslo.workload.scenarios import parse_scenarios, to_wire

__all__ = ["ScenarioFile", "read_scenario", "scenario_of"]

_SECTIONS = ("load", "scenarios", "thresholds", "budget", "truth")


@dataclass(frozen=True)
class ScenarioFile:
    """The typed sections of one scenario file."""

    path: str
    """The file, as named (errors and run.json name it so)."""
    values: dict[str, Any]
    """The run options it sets, by :class:`~streamslo.options.run_options.RunOptions` field
    name (typed values; ``scenarios`` in their wire form when it has ``[scenarios.*]``)."""
    slo: SLO | None
    """Its ``[thresholds]``; None without."""
    budget: Budget | None
    """Its ``[budget]``; None without."""


def read_scenario(path: str | Path) -> ScenarioFile:
    """Read and parse a scenario file, once.

    Raises:
        SLOFileError: an unreadable file, bad TOML, an unknown key or a bad value, in any
            section (the message names the file, and the line where it can).
    """
    return scenario_of(read_toml(path, "a scenario file"))


def scenario_of(toml: TomlFile) -> ScenarioFile:
    """The typed sections of a parsed scenario file (see :func:`read_scenario`).

    Raises:
        BadInputError: a bad section (an :class:`~streamslo.errors.SLOFileError` naming the
            file and the line).
    """
    unknown = [k for k in toml.doc if k not in _SECTIONS]
    if unknown:
        raise toml.error(
            toml.table_line(unknown[0]),
            f"unknown top-level key {unknown[0]!r}: a scenario file holds "
            + ", ".join(f"[{k}]" for k in _SECTIONS),
        )
    values = scenario_values(toml.doc.get("load", {}), toml.path, toml)
    if "scenarios" in toml:
        parse_scenarios(toml.doc["scenarios"], toml.path, toml.text)  # every mistake, its line
        values["scenarios"] = to_wire(toml.doc["scenarios"])
    budget = parse_budget(toml.doc["budget"], toml.path, toml.text) if "budget" in toml else None
    slo = thresholds_of(toml)
    if slo is not None:
        slo = truth_of(toml, slo)
    return ScenarioFile(toml.path, values, slo, budget)
