"""The report's optional sections, in the page's order: one builder each
(:class:`streamslo.reports.section.Section` is their protocol).

:func:`streamslo.reports.build.build_report` builds every one and hands them to the renderers,
and knows none of them by name: a new section is a class in its own module and one line here.
"""

from __future__ import annotations

from collections.abc import Callable

from streamslo.reports.levels import LevelsSection
from streamslo.reports.replay import ReplaySection
from streamslo.reports.scenarios import ScenariosSection
from streamslo.reports.section import Section, SectionInput
from streamslo.reports.session_view import SessionsSection
from streamslo.reports.soak import LongRunSection
from streamslo.reports.turns import TurnsSection

__all__ = ["SECTIONS", "build_sections"]

#: Every section's builder, in the page's order.
SECTIONS: tuple[Callable[[SectionInput], Section], ...] = (
    ScenariosSection.build,
    LevelsSection.build,
    TurnsSection.build,
    LongRunSection.build,
    SessionsSection.build,
    ReplaySection.build,
)


def build_sections(inp: SectionInput) -> tuple[Section, ...]:
    """Every section of the report, built from ``inp``, in the page's order."""
    return tuple(make(inp) for make in SECTIONS)
