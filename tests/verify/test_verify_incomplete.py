"""The plugin fails a run that was not finalized (run.json complete: false) unless allowed:
by flag, environment, ini or marker."""

from __future__ import annotations

from pathlib import Path

import numpy  # noqa: F401  (see test_verify_plugin: C extensions imported outside pytester runs)
import pandas  # noqa: F401
import pyarrow.parquet  # noqa: F401
import pytest

import streamslo.figures.metrics
import streamslo.slo.thresholds  # noqa: F401
from streamslo.results.layout import load_run
from streamslo.verify.slo import resolve_settings
from streamslo.verify.testing import stream_row, write_run

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestAssertRewriteWarning")

INI = "[pytest]\nasyncio_default_fixture_loop_scope = function\n"


@pytest.fixture
def unfinalized(tmp_path: Path) -> Path:
    run = write_run(
        tmp_path / "killed",
        [stream_row(f"s{i}") for i in range(4)],
        {f"s{i}": [20.0] * 9 for i in range(4)},
        run={"schema_version": 2, "complete": False, "valid": True},
    )
    load_run(run)  # warm pandas/pyarrow outside the in-process runs
    return run


def test_complete_follows_run_json(tmp_path: Path) -> None:
    def complete(run: dict) -> bool:
        return load_run(
            write_run(tmp_path / str(len(list(tmp_path.iterdir()))), [stream_row("a")], run=run)
        ).complete

    assert complete({"schema_version": 2, "complete": True})
    assert not complete({"schema_version": 2, "complete": False})
    assert not complete({"schema_version": 2})  # schema 2 without the flag: not finalized
    assert complete({"valid": True})  # schema 1 (before the flag): finalized when written


def test_setting_resolves_like_the_others() -> None:
    assert resolve_settings({}, {"STREAMSLO_ALLOW_INCOMPLETE": "yes"}, {}).allow_incomplete is True
    assert resolve_settings({}, {}, {"streamslo_allow_incomplete": "true"}).allow_incomplete is True
    assert resolve_settings({"allow_incomplete": None}, {}, {}).allow_incomplete is False


def test_help_lists_the_flag(pytester: pytest.Pytester) -> None:
    pytester.makeini(INI)
    result = pytester.runpytest("--help")
    result.stdout.fnmatch_lines(["*--streamslo-allow-incomplete*", "*streamslo_allow_incomplete*"])


def test_checks_fail_an_unfinalized_run(pytester: pytest.Pytester, unfinalized: Path) -> None:
    pytester.makeini(INI)
    args = ("--pyargs", "streamslo.verify.checks.test_run", f"--streamslo-run-dir={unfinalized}")
    result = pytester.runpytest(*args)
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(
        [
            "streamslo: run *killed*NOT finalized (run.json complete: false)*",
            "*was not finalized (run.json complete: false)*streamslo finalize*",
        ]
    )
    result = pytester.runpytest(*args, "--streamslo-allow-incomplete")
    result.assert_outcomes(passed=3, skipped=1)


def test_marker_allows_an_unfinalized_run(pytester: pytest.Pytester, unfinalized: Path) -> None:
    pytester.makeini(INI)
    pytester.makepyfile(f"""
        import pytest
        from streamslo.results.layout import load_run

        RUN = load_run({str(unfinalized)!r})

        @pytest.mark.streamslo(allow_incomplete=True)
        def test_allowed(streamslo_check):
            streamslo_check(RUN)

        def test_default(streamslo_check):
            streamslo_check(RUN)
    """)
    result = pytester.runpytest()
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*every SLO threshold held (<default>), but the run cannot be trusted as it is:*",
            "*was not finalized*",
        ]
    )


def test_marker_rejects_a_non_bool(pytester: pytest.Pytester) -> None:
    pytester.makeini(INI)
    pytester.makepyfile("""
        import pytest

        @pytest.mark.streamslo(allow_incomplete="yes")
        def test_it():
            pass
    """)
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*allow_incomplete must be True or False, got 'yes'*"])
