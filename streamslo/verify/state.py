"""The plugin's session state, kept in ``config.stash``: what :mod:`streamslo.verify.plugin` (the
hooks) and :mod:`streamslo.verify.fixtures` (the fixtures it registers) share, below both."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pytest

from streamslo.verify.slo import MarkerOverride, Settings

if TYPE_CHECKING:
    from streamslo.results.layout import RunData
    from streamslo.slo.thresholds import SLO, CheckResult

__all__ = ["MARKER_KEY", "STATE_KEY", "SessionState", "get_state"]


@dataclass
class SessionState:
    """What the plugin keeps for one pytest session (in ``config.stash``)."""

    settings: Settings
    slo: SLO | None = None
    """The session's :class:`streamslo.slo.thresholds.SLO`; None until first needed (default SLO)."""
    data: RunData | None = None
    """The :class:`streamslo.results.layout.RunData` of ``--streamslo-run-dir``, loaded at configure."""
    results: list[CheckResult] = field(default_factory=list)
    """Every :class:`streamslo.slo.thresholds.CheckResult` the generated checks produced."""

    def session_slo(self) -> SLO:
        """The session's SLO (the incidents' default when no file was given)."""
        if self.slo is None:
            from streamslo.slo.thresholds import DEFAULT_SLO

            self.slo = DEFAULT_SLO
        return self.slo


STATE_KEY = pytest.StashKey[SessionState]()
MARKER_KEY = pytest.StashKey[MarkerOverride]()


def get_state(config: pytest.Config) -> SessionState:
    """The plugin's :class:`SessionState` for this session."""
    return config.stash[STATE_KEY]
