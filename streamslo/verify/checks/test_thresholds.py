"""One test per SLO threshold, its id the threshold itself (``itl_ms p(99)<200``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from streamslo.verify.explain import explain_result
from streamslo.verify.plugin import get_state

if TYPE_CHECKING:
    from streamslo.results.layout import RunData
    from streamslo.slo.thresholds import Threshold

__all__ = ["pytest_generate_tests", "test_threshold"]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize over the session's SLO (parsed once, at configure)."""
    if "streamslo_threshold" in metafunc.fixturenames:
        slo = get_state(metafunc.config).session_slo()
        metafunc.parametrize(
            "streamslo_threshold", slo.thresholds, ids=[th.name for th in slo.thresholds]
        )


def test_threshold(
    streamslo_threshold: Threshold, streamslo_results: RunData, pytestconfig: pytest.Config
) -> None:
    """The run meets this threshold; a failure says by how much and which streams."""
    from streamslo.slo.thresholds import evaluate_threshold

    result = evaluate_threshold(streamslo_threshold, streamslo_results)
    get_state(pytestconfig).results.append(result)
    if not result.passed:
        pytest.fail(explain_result(result, streamslo_results), pytrace=False)
