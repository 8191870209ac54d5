"""One optional section of the report: the protocol every section follows, and what it is
built from (the list of sections is :mod:`streamslo.reports.sections`).

A section is an object built from the report's runs (:class:`SectionInput`) that says what it
adds to each output, and says nothing where its runs have nothing for it:

=================  ===========================================================================
``key``            its key in ``report.json`` (always written: an empty list or mapping when the
                   runs have nothing for it)
``title``          its heading on the page
``charts_first``   its charts go before the report's own (the load levels' knee chart) or after
``charts()``       its charts (none: an empty tuple)
``html()``         its HTML body ("": the section is left out of the page)
``markdown()``     its Markdown, heading included ("": left out)
``to_json()``      its ``report.json`` value
=================  ===========================================================================

Nothing here prints.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from streamslo.reports.charts import Chart
    from streamslo.reports.load import LoadedRun
    from streamslo.slo.thresholds import SLO

__all__ = ["Section", "SectionInput"]


@dataclass(frozen=True)
class SectionInput:
    """What every section is built from."""

    runs: tuple[LoadedRun, ...]
    """The report's runs: ``(run,)`` or ``(before, after)``."""
    slo: SLO
    """The SLO the report checks (a section may check it per level)."""
    stages: str | None
    """The ``--stages`` the runs ramped through (``compare``), or None."""


class Section(Protocol):
    """One optional section of the report (see the module's docstring)."""

    @property
    def key(self) -> str: ...

    @property
    def title(self) -> str: ...

    @property
    def charts_first(self) -> bool: ...

    def charts(self) -> tuple[Chart, ...]: ...

    def html(self) -> str: ...

    def markdown(self) -> str: ...

    def to_json(self) -> object: ...
