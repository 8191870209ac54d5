"""The pytest plugin, driven through pytester: options, env, ini, marker, checks, slo.json."""

from __future__ import annotations

import json
from pathlib import Path

import numpy  # noqa: F401  (pytester's in-process runs drop modules first imported inside them;
import pandas  # noqa: F401   C extensions such as numpy cannot be imported twice)
import pyarrow.parquet  # noqa: F401
import pytest

import streamslo.figures.metrics
import streamslo.slo.thresholds  # noqa: F401
from streamslo.verify.testing import stream_row, write_run

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestAssertRewriteWarning")

INI = "[pytest]\nasyncio_default_fixture_loop_scope = function\n"


@pytest.fixture(scope="module", autouse=True)
def _warm_imports(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Write and load a run once out here, so pandas' lazy parquet imports happen outside the
    in-process runs (pytester drops modules first imported inside one; pyarrow type extensions
    then register twice)."""
    from streamslo.results.layout import load_run
    from streamslo.slo.thresholds import DEFAULT_SLO, evaluate

    run = write_run(tmp_path_factory.mktemp("warm"), [stream_row("a")], {"a": [1.0]})
    evaluate(DEFAULT_SLO, load_run(run))


@pytest.fixture
def good_run(tmp_path: Path) -> Path:
    streams = [stream_row(f"s{i}", protocol="ws" if i % 2 else "sse") for i in range(10)]
    return write_run(tmp_path / "good", streams, {f"s{i}": [20.0 + i] * 9 for i in range(10)})


@pytest.fixture
def bad_run(tmp_path: Path) -> Path:
    streams = [stream_row(f"s{i}") for i in range(9)]
    streams.append(stream_row("cut-7", outcome="truncated", error="connection closed mid-body"))
    gaps = {f"s{i}": [20.0] * 9 for i in range(9)}
    gaps["cut-7"] = [20.0, 20.0, 31_000.0]
    return write_run(tmp_path / "bad", streams, gaps)


def test_inert_without_options(pytester: pytest.Pytester) -> None:
    pytester.makeini(INI)
    pytester.makepyfile("def test_plain():\n    assert True\n")
    result = pytester.runpytest()
    result.assert_outcomes(passed=1)
    result.stdout.no_fnmatch_line("*streamslo:*")


def test_help_lists_one_group(pytester: pytest.Pytester) -> None:
    pytester.makeini(INI)
    result = pytester.runpytest("--help")
    result.stdout.fnmatch_lines(
        [
            "streaming SLO checks (streamslo):",
            "*--streamslo-run-dir=DIR*",
            "*--streamslo-slo=FILE*",
            "*--streamslo-allow-invalid*",
            "*--streamslo-probe-url=URL*",
            "*streamslo_run_dir*",
        ]
    )


def test_checks_pass_on_a_good_run(pytester: pytest.Pytester, good_run: Path) -> None:
    pytester.makeini(INI)
    result = pytester.runpytest(
        "--pyargs", "streamslo.verify.checks", f"--streamslo-run-dir={good_run}", "-v"
    )
    result.assert_outcomes(passed=8, skipped=3)  # the 3 probes skip without --streamslo-probe-url
    result.stdout.fnmatch_lines(
        [
            f"streamslo: run {good_run}, SLO <default> (4 thresholds)",
            "*test_threshold?truncation_rate rate<0.001? PASSED*",
            "*test_threshold?itl_ms p(99)<200? PASSED*",
        ]
    )
    doc = json.loads((good_run / "slo.json").read_text())
    assert doc["passed"] is True and len(doc["thresholds"]) == 4


def test_failures_are_readable(pytester: pytest.Pytester, bad_run: Path) -> None:
    pytester.makeini(INI)
    result = pytester.runpytest(
        "--pyargs", "streamslo.verify.checks.test_thresholds", f"--streamslo-run-dir={bad_run}"
    )
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines(
        [
            "*itl_ms p(99) = * ms (84 gaps from 10 streams); threshold p(99)<200: FAILED",
            "  threshold from <default>; run *",
            "  outcomes: ok 9, truncated 1",
            "  worst streams (largest max_gap_ms):",
            "    stream_id*max_gap_ms*error",
            "    cut-7 *truncated*31000.0*connection closed mid-body",
        ]
    )
    result.stdout.fnmatch_lines(
        ["truncation_rate rate = 0.1 (1 of 10 streams); threshold rate<0.001: FAILED"]
    )
    assert json.loads((bad_run / "slo.json").read_text())["passed"] is False


def test_slo_file_option_env_and_ini(
    pytester: pytest.Pytester, good_run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    slo = pytester.path / "slo.toml"
    slo.write_text('[thresholds]\n"itl_ms{protocol:ws}" = ["p(99)<25", "max<=29"]\n')
    pytester.makeini(INI + "streamslo_slo = slo.toml\n")
    args = (
        "--pyargs",
        "streamslo.verify.checks.test_thresholds",
        f"--streamslo-run-dir={good_run}",
        "-v",
    )
    result = pytester.runpytest(*args)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        ["*(2 thresholds)*", "*test_threshold?itl_ms{protocol:ws} max<=29? PASSED*"]
    )
    # The environment beats the ini file; the command line beats both.
    other = pytester.path / "other.toml"
    other.write_text('[thresholds]\nitl_ms = ["p(99)<1000"]\n')
    monkeypatch.setenv("STREAMSLO_SLO", str(other))
    pytester.runpytest(*args).assert_outcomes(passed=1)
    monkeypatch.delenv("STREAMSLO_SLO")
    monkeypatch.setenv("STREAMSLO_RUN_DIR", str(good_run))
    pytester.runpytest(
        "--pyargs", "streamslo.verify.checks.test_thresholds", f"--streamslo-slo={other}"
    ).assert_outcomes(passed=1)


def test_bad_slo_file_is_a_usage_error_naming_file_and_line(
    pytester: pytest.Pytester, good_run: Path
) -> None:
    pytester.makeini(INI)
    slo = pytester.path / "slo.toml"
    slo.write_text('[thresholds]\nitl_ms = ["p(99)<200"]\nttft_ms = ["p(95) => 5"]\n')
    result = pytester.runpytest(f"--streamslo-slo={slo}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{slo}:3: ttft_ms: bad operator '=>'*"])


def test_bad_env_bool_names_the_variable(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makeini(INI)
    monkeypatch.setenv("STREAMSLO_ALLOW_INVALID", "maybe")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*STREAMSLO_ALLOW_INVALID: expected true or false*"])


def test_missing_run_dir_is_a_usage_error(pytester: pytest.Pytester, tmp_path: Path) -> None:
    pytester.makeini(INI)
    result = pytester.runpytest("--streamslo-run-dir", str(tmp_path / "nope"))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*bad results directory (--streamslo-run-dir)*nope*"])


def test_checks_without_a_run_fail_clearly(pytester: pytest.Pytester) -> None:
    pytester.makeini(INI)
    result = pytester.runpytest("--pyargs", "streamslo.verify.checks.test_run")
    result.assert_outcomes(errors=4)
    result.stdout.fnmatch_lines(["*no results directory to check: pass --streamslo-run-dir DIR*"])


def test_empty_and_invalid_runs(pytester: pytest.Pytester, tmp_path: Path) -> None:
    pytester.makeini(INI)
    empty = write_run(tmp_path / "empty", [])
    result = pytester.runpytest(
        "--pyargs", "streamslo.verify.checks.test_run", f"--streamslo-run-dir={empty}"
    )
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(["*has no streams: streams.csv holds no request*"])
    invalid = write_run(
        tmp_path / "invalid",
        [stream_row("a")],
        run={"valid": False, "invalid_reason": "generator lag p99 41 ms"},
    )
    result = pytester.runpytest(
        "--pyargs", "streamslo.verify.checks.test_run", f"--streamslo-run-dir={invalid}"
    )
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(["*is INVALID (run.json valid: false): generator lag p99 41 ms*"])
    result = pytester.runpytest(
        "--pyargs",
        "streamslo.verify.checks.test_run",
        f"--streamslo-run-dir={invalid}",
        "--streamslo-allow-invalid",
    )
    result.assert_outcomes(passed=3, skipped=1)


def test_marker_overrides_the_slo(pytester: pytest.Pytester, bad_run: Path) -> None:
    pytester.makeini(INI)
    pytester.makepyfile(f"""
        import pytest
        from streamslo.results.layout import load_run

        RUN = load_run({str(bad_run)!r})

        @pytest.mark.streamslo(thresholds={{"itl_ms": ["p(50)<=20"], "requests": ["count==10"]}})
        def test_loose(streamslo_check, streamslo_slo):
            assert len(streamslo_slo) == 2
            assert all(r.passed for r in streamslo_check(RUN))

        def test_default(streamslo_check):
            streamslo_check(RUN)
    """)
    result = pytester.runpytest()
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*2 of 4 SLO thresholds failed (<default>)*"])


def test_marker_file_and_bad_kwargs(pytester: pytest.Pytester) -> None:
    pytester.makeini(INI)
    (pytester.path / "loose.toml").write_text('[thresholds]\nitl_ms = ["p(99)<1e6"]\n')
    pytester.makepyfile(
        test_ok="""
        import pytest

        @pytest.mark.streamslo(file="loose.toml", allow_invalid=True)
        def test_it(streamslo_slo):
            assert streamslo_slo.thresholds[0].name == "itl_ms p(99)<1e6"
    """
    )
    pytester.runpytest("test_ok.py").assert_outcomes(passed=1)
    pytester.makepyfile(
        test_bad="""
        import pytest

        @pytest.mark.streamslo(threshold={"itl_ms": ["p(99)<1"]})
        def test_it():
            pass
    """
    )
    result = pytester.runpytest("test_bad.py")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*test_bad.py::test_it: @pytest.mark.streamslo got unknown keyword(s) threshold; expected file, thresholds, allow_invalid*"
        ]
    )
