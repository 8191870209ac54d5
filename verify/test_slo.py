"""The SLO checks over one run, collected by plain pytest from a clone:
``pytest verify/ --streamslo-run-dir DIR [--streamslo-slo FILE]``.

They live in :mod:`streamslo.verify.checks`; this file only re-exports them.
"""

from streamslo.verify.checks.test_run import test_run_is_not_empty, test_run_is_valid
from streamslo.verify.checks.test_thresholds import pytest_generate_tests, test_threshold

__all__ = ["pytest_generate_tests", "test_run_is_not_empty", "test_run_is_valid", "test_threshold"]
