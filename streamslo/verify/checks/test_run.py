"""Checks on the run as a whole: it measured something, and it measured the server."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from streamslo.verify.explain import explain_empty, explain_incomplete, explain_invalid
from streamslo.verify.plugin import get_state

if TYPE_CHECKING:
    from streamslo.results.layout import RunData

__all__ = [
    "test_run_could_check_what_the_slo_requires",
    "test_run_is_complete",
    "test_run_is_not_empty",
    "test_run_is_valid",
]


def _required(holds: bool, allowed: bool, allowance: str, explain: str) -> None:
    """Pass when ``holds``; skip (saying why) when the user allowed it; fail otherwise."""
    if holds:
        return
    if allowed:
        pytest.skip(f"{allowance}: {explain}")
    pytest.fail(explain, pytrace=False)


def test_run_is_complete(streamslo_results: RunData, pytestconfig: pytest.Config) -> None:
    """The run was finalized (run.json ``complete``), unless --streamslo-allow-incomplete."""
    _required(
        streamslo_results.complete,
        get_state(pytestconfig).settings.allow_incomplete,
        "unfinalized run allowed (--streamslo-allow-incomplete)",
        explain_incomplete(streamslo_results),
    )


def test_run_is_not_empty(streamslo_results: RunData) -> None:
    """A run with no streams cannot meet an SLO: it fails, with a clear message."""
    if len(streamslo_results.streams) == 0:
        pytest.fail(explain_empty(streamslo_results), pytrace=False)


def test_run_is_valid(streamslo_results: RunData, pytestconfig: pytest.Config) -> None:
    """The load generator was not saturated (run.json ``valid``), unless --streamslo-allow-invalid."""
    allowed = get_state(pytestconfig).settings.allow_invalid
    _required(
        streamslo_results.valid,
        allowed,
        "invalid run allowed (--streamslo-allow-invalid)",
        explain_invalid(streamslo_results, allowed=allowed),
    )


def test_run_could_check_what_the_slo_requires(
    streamslo_results: RunData, pytestconfig: pytest.Config
) -> None:
    """The run could check what the SLO's ``[truth] require`` names (a silent stop, a lost
    chunk): a run that could not see them fails instead of passing."""
    from streamslo.slo.thresholds import unmet_requirements

    unmet = unmet_requirements(get_state(pytestconfig).session_slo(), streamslo_results.run)
    if unmet:
        pytest.fail("; ".join(unmet), pytrace=False)
