"""``streamslo verify`` (its shell: :mod:`streamslo.commands.verify`; ``python -m streamslo.verify``):
the pytest SLO checks over one run, with k6's exit codes.

::

    streamslo verify DIR [--slo FILE] [--allow-invalid] [--allow-incomplete] [--junit-xml FILE]
    streamslo verify --slo FILE          # only check that the SLO file parses

Exit codes:

- 0: every threshold held, the run is finalized (or ``--allow-incomplete``), valid (or
  ``--allow-invalid``) and not empty;
- 99: a threshold failed, or the run is unfinalized, invalid (not allowed) or empty: an
  unfinalized run (``run.json`` ``complete: false``, a run that was killed) fails like an
  invalid one, as a failed check (``test_run_is_complete``); ``streamslo finalize DIR``
  finalizes it;
- 2: bad input: an SLO file that does not parse (the message names file and line), a results
  directory that is missing or unreadable (the message names the file), bad usage;
- 1: an internal error.

The checks run in-process with ``pytest.main`` over :mod:`streamslo.verify.checks` (``test_run`` and
``test_thresholds``) under an empty pytest configuration, so the caller's ``pytest.ini`` or
``pyproject.toml`` does not change them. They write ``DIR/slo.json``.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streamslo.options import declare
from streamslo.options.values import Switch, Text, flag_option

__all__ = ["EXIT_FOR_PYTEST", "VerifyOptions", "add_verify_arguments", "pytest_args", "verify"]

#: pytest's exit code -> streamslo's.
EXIT_FOR_PYTEST = {0: 0, 1: 99, 2: 130, 3: 1, 4: 2, 5: 1}


@dataclass(frozen=True)
class VerifyOptions:
    """``streamslo verify``'s options (docs/cli.md)."""

    run_dir: str | None = field(
        default=None,
        metadata=flag_option(Text(name="DIR"), "the results directory of a run", positional=True),
    )
    slo: str | None = field(
        default=None,
        metadata=flag_option(
            Text(name="FILE"), "SLO file (TOML, k6 thresholds); default: the incidents' SLO"
        ),
    )
    allow_invalid: bool = field(
        default=False,
        metadata=flag_option(
            Switch(), "check a run whose load generator was saturated (run.json valid: false)"
        ),
    )
    allow_incomplete: bool = field(
        default=False,
        metadata=flag_option(
            Switch(), "check a run that was not finalized (run.json complete: false)"
        ),
    )
    junit_xml: str | None = field(
        default=None,
        metadata=flag_option(Text(name="FILE"), "also write a JUnit XML report (for CI)"),
    )
    quiet: bool = field(
        default=False,
        metadata=flag_option(
            Switch(),
            "print only the failed verdicts and the last line (-v: pytest's own output too)",
            short="-q",
        ),
    )


def add_verify_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``verify``'s options (:class:`VerifyOptions`) to its parser."""
    declare.add_arguments(parser, VerifyOptions)


def pytest_args(
    run_dir: Path,
    slo: str | None,
    allow_invalid: bool,
    junit_xml: str | None,
    quiet: bool = False,
    allow_incomplete: bool = False,
) -> list[str]:
    """The ``pytest.main`` arguments of one verification.

    Args:
        run_dir: the results directory.
        slo: the SLO file, or None for the default SLO.
        allow_invalid: accept an invalid run.
        junit_xml: where to write JUnit XML, or None.
        quiet: less pytest output.
        allow_incomplete: accept a run that was not finalized.

    Returns:
        The argument list.
    """
    checks = Path(__file__).resolve().parent / "checks"
    args = [
        str(checks / "test_run.py"),
        str(checks / "test_thresholds.py"),
        "-c",
        os.devnull,
        "--rootdir",
        str(checks),
        "--confcutdir",
        str(checks),
        "-p",
        "no:cacheprovider",
        "--assert=plain",  # the checks use pytest.fail; nothing to rewrite
        "-o",
        "console_output_style=classic",
        "-q" if quiet else "-v",
        "-rfEs",
        "--no-header",
        "--tb=short",
        "--streamslo-run-dir",
        str(run_dir),
    ]
    if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        args += ["-p", "streamslo.verify.plugin"]
    if slo is not None:
        args += ["--streamslo-slo", slo]
    if allow_invalid:
        args.append("--streamslo-allow-invalid")
    if allow_incomplete:
        args.append("--streamslo-allow-incomplete")
    if junit_xml is not None:
        args += ["--junit-xml", junit_xml]
    return args


class _Collector:
    """Keeps the check results of the in-process session for the final verdict lines."""

    def __init__(self) -> None:
        self.results: list[Any] = []
        self.data: Any = None
        self.failed: list[str] = []
        """The failed checks of the run itself (valid, complete, not empty), with their message."""

        self.skipped: list[str] = []
        """The checks of the run itself that were skipped (``--allow-incomplete``), with why."""

    def pytest_runtest_logreport(self, report: Any) -> None:
        if "test_thresholds" in report.nodeid or not (report.failed or report.skipped):
            return
        name = report.nodeid.split("::")[-1]
        if report.skipped:
            reason = (
                report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            )
            self.skipped.append(f"{name}: {reason.removeprefix('Skipped: ')}")
            return
        crash = getattr(report.longrepr, "reprcrash", None)
        message = (
            crash.message
            if crash is not None
            else (report.longreprtext.strip().splitlines() or [""])[-1]
        )
        self.failed.append(f"{name}: {message.removeprefix('Failed: ')}")

    def pytest_sessionfinish(self, session: Any) -> None:
        from streamslo.verify.plugin import STATE_KEY

        state = session.config.stash.get(STATE_KEY, None)
        if state is not None:
            self.results = list(state.results)
            self.data = state.data


def _data_notes(data: Any) -> list[str]:
    """What the reader of the verdicts must know about the directory itself."""
    notes = []
    if not data.valid:  # first: no figure below measures the server
        reason = data.run.get("invalid_reason") or "no reason recorded"
        notes.append(
            f"INVALID RUN: {reason}: its latencies measure the load generator, not the server"
        )
    if not data.complete:
        notes.append(
            f"{data.path} is NOT finalized (run.json complete: false); "
            f"`streamslo finalize {data.path}` finalizes it"
        )
    if data.killed:
        notes.append(f"{data.path}: the run was killed; its figures end at its last record")
    if data.skipped_rows:
        at = ", ".join(map(str, data.skipped_at))
        notes.append(
            f"{data.path}/streams.csv: {data.skipped_rows} damaged rows skipped (records {at})"
        )
    if data.duplicate_rows:
        notes.append(f"{data.path}/streams.csv: {data.duplicate_rows} repeated rows counted once")
    return notes


def _run_pytest(argv: list[str], collector: _Collector, show: bool) -> tuple[int, str]:
    """``pytest.main`` over the checks, its output kept (and shown only when ``show``).

    Third-party pytest plugins are not loaded (their warnings and hooks have nothing to do
    with the checks); the checks' own plugin is named instead.
    """
    import contextlib
    import io

    import pytest

    argv = list(argv)
    if "streamslo.verify.plugin" not in argv:
        argv += ["-p", "streamslo.verify.plugin"]
    saved = os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD")
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    buf = io.StringIO()
    try:
        if show:
            code = int(pytest.main(argv, plugins=[collector]))
        else:
            with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
                code = int(pytest.main(argv, plugins=[collector]))
    finally:
        if saved is None:
            os.environ.pop("PYTEST_DISABLE_PLUGIN_AUTOLOAD", None)
        else:
            os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = saved
    return code, buf.getvalue()


def _check_slo_only(path: str) -> int:
    from streamslo.slo.thresholds import load_slo

    slo = load_slo(path)  # SLOFileError -> exit 2 with file:line (streamslo.cli)
    print(f"{path}: OK, {len(slo)} threshold{'s' if len(slo) != 1 else ''}")
    for th in slo.thresholds:
        flags = (
            " (abortOnFail"
            + (f", delayAbortEval {th.delay_abort_eval_s:g}s" if th.delay_abort_eval_s else "")
            + ")"
            if th.abort_on_fail
            else ""
        )
        print(f"  {th.where}: {th.name}{flags}")
    return 0


def verify(args: argparse.Namespace) -> int:
    """Run ``streamslo verify``.

    Args:
        args: the parsed arguments (see :func:`add_arguments`).

    Returns:
        0, 99, 2 or 1 (see the module docstring).

    Raises:
        BadInputError: no DIR and no --slo, a bad SLO file, a missing results directory
            (``streamslo.cli`` prints it and exits 2).
    """

    from streamslo.errors import EXIT_BAD_INPUT, BadInputError, ResultsError
    from streamslo.results.layout import Layout
    from streamslo.slo.thresholds import load_slo

    if args.run_dir is None:
        if args.slo is None:
            raise BadInputError("give a results directory DIR, or --slo FILE to check an SLO file")
        return _check_slo_only(args.slo)
    if args.slo is not None:
        load_slo(args.slo)  # fail early, with file:line
    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        raise ResultsError(f"{run_dir}: not a results directory (no such folder)")
    layout = Layout(run_dir)
    if not layout.streams_csv.is_file():
        raise ResultsError(
            f"{layout.streams_csv}: no such file (is {run_dir} a streamslo results directory?)"
        )
    collector = _Collector()
    verbose = bool(getattr(args, "verbose", False))
    code, output = _run_pytest(
        pytest_args(
            run_dir,
            args.slo,
            args.allow_invalid,
            args.junit_xml,
            args.quiet and not verbose,
            allow_incomplete=args.allow_incomplete,
        ),
        collector,
        show=verbose,
    )
    verdict = EXIT_FOR_PYTEST.get(code, 1)
    if verdict not in (0, 99) and not verbose:
        print(output, end="", file=sys.stderr)  # pytest's own error is the cause: show it
    if collector.data is not None:
        for line in _data_notes(collector.data):
            print(f"streamslo verify: {line}")
    if collector.results:
        shown = [r for r in collector.results if not (args.quiet and r.passed)]
        if shown:
            if verbose:
                print()
            print(f"streamslo verify {run_dir}: SLO {collector.results[0].threshold.source}")
        for r in shown:
            print(f"  {'PASS' if r.passed else 'FAIL'}  {r.message}")
    if not verbose:
        for line in collector.failed:  # the checks of the run itself (valid, complete, ...)
            print(f"  FAIL  {line}")
        if not args.quiet:
            for line in collector.skipped:
                print(f"  SKIP  {line}")
    if verdict == EXIT_BAD_INPUT:
        print("streamslo verify: error: bad input (see the pytest error above)", file=sys.stderr)
    elif verdict == 0:
        print(f"streamslo verify: all SLO checks passed ({layout.slo_json})")
    elif verdict == 99:
        thresholds_failed = any(not r.passed for r in collector.results)
        if thresholds_failed or not collector.failed:
            print(f"streamslo verify: SLO checks failed ({layout.slo_json})")
        else:  # every threshold held: what failed is the run itself (invalid, incomplete...)
            print(
                "streamslo verify: every threshold held, but the run itself failed a check "
                "(above); --allow-invalid / --allow-incomplete to judge it anyway"
            )
    return verdict
