"""The streamslo pytest plugin (entry point ``pytest11: streamslo``): SLO gates for CI.

It loads in every pytest session and stays inert unless one of its settings is given. Options,
in one ``streamslo`` group, each with an environment variable and an ini key, resolved
command line > environment > ini > default (see :mod:`streamslo.verify.slo`):

=================================  ==========================  ==========================
``--streamslo-run-dir DIR``        ``STREAMSLO_RUN_DIR``        ``streamslo_run_dir``
``--streamslo-slo FILE``           ``STREAMSLO_SLO``            ``streamslo_slo``
``--streamslo-allow-invalid``      ``STREAMSLO_ALLOW_INVALID``  ``streamslo_allow_invalid``
``--streamslo-allow-incomplete``   ``STREAMSLO_ALLOW_INCOMPLETE`` ``streamslo_allow_incomplete``
``--streamslo-probe-url URL``      ``STREAMSLO_PROBE_URL``      ``streamslo_probe_url``
=================================  ==========================  ==========================

The SLO file is parsed when pytest configures (a bad file is a usage error naming file:line),
and the results directory is loaded then too (a missing or damaged one is a usage error).
``@pytest.mark.streamslo(file=..., thresholds=..., allow_invalid=..., allow_incomplete=...)``
overrides them per test. A run that was not finalized (``run.json`` ``complete: false``: killed
before its end; ``streamslo finalize DIR`` finalizes it) fails unless incomplete runs are allowed.

Fixtures: ``streamslo_settings``, ``streamslo_slo`` (the SLO for this test),
``streamslo_results`` (the run of ``--streamslo-run-dir``), ``streamslo_check`` (assert a run meets the
SLO), and those of :mod:`streamslo.verify.fixtures` (the bundled server, a short load run, probes).

The checks themselves are :mod:`streamslo.verify.checks` (``pytest --pyargs streamslo.verify.checks --streamslo-run-dir
DIR``, or ``streamslo verify DIR``); they write ``DIR/slo.json`` at the end of the session.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from streamslo.verify.slo import OPTIONS, MarkerOverride, Settings, parse_marker, resolve_settings
from streamslo.verify.state import MARKER_KEY, STATE_KEY, SessionState, get_state

if TYPE_CHECKING:
    from streamslo.results.layout import RunData
    from streamslo.slo.thresholds import SLO, CheckResult

__all__ = [
    "MARKER_KEY",
    "STATE_KEY",
    "SessionState",
    "get_state",
    "pytest_addoption",
    "pytest_collection_modifyitems",
    "pytest_configure",
    "pytest_report_header",
    "pytest_sessionfinish",
    "streamslo_check",
    "streamslo_results",
    "streamslo_settings",
    "streamslo_slo",
]


_MARKER_HELP = (
    "streamslo(file=None, thresholds=None, allow_invalid=None, allow_incomplete=None): check "
    "this test's run against another SLO (a TOML file relative to the test module, or a dict "
    "like the [thresholds] table) and/or accept an invalid or unfinalized run"
)


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register the ``streamslo`` option group and its ini twins."""
    group = parser.getgroup("streamslo", "streaming SLO checks (streamslo)")
    for opt in OPTIONS:
        text = f"{opt.help} [env {opt.env}, ini {opt.ini}]"
        if opt.is_bool:
            group.addoption(
                opt.flag, action="store_true", default=None, dest=f"streamslo_{opt.name}", help=text
            )
            parser.addini(opt.ini, f"{opt.help} (true/false)", type="string", default="")
        else:
            metavar = (
                "URL" if opt.name == "probe_url" else ("DIR" if opt.name == "run_dir" else "FILE")
            )
            group.addoption(
                opt.flag,
                action="store",
                default=None,
                dest=f"streamslo_{opt.name}",
                metavar=metavar,
                help=text,
            )
            parser.addini(opt.ini, opt.help, type="string", default="")


def pytest_configure(config: pytest.Config) -> None:
    """Resolve the settings, parse the SLO file and load the run (only when given)."""
    config.addinivalue_line("markers", _MARKER_HELP)
    from streamslo.verify import fixtures

    if not config.pluginmanager.is_registered(fixtures):
        config.pluginmanager.register(fixtures, "streamslo-fixtures")
    cli = {opt.name: config.getoption(f"streamslo_{opt.name}") for opt in OPTIONS}
    ini = {opt.ini: config.getini(opt.ini) for opt in OPTIONS}
    ini_dir = config.inipath.parent if config.inipath is not None else None
    try:
        settings = resolve_settings(cli, os.environ, ini, ini_dir=ini_dir)
    except ValueError as exc:
        raise pytest.UsageError(f"streamslo: {exc}") from None
    state = SessionState(settings=settings)
    config.stash[STATE_KEY] = state
    if settings.slo is not None:
        from streamslo.errors import SLOFileError
        from streamslo.slo.thresholds import load_slo

        try:
            state.slo = load_slo(settings.slo)
        except SLOFileError as exc:
            raise pytest.UsageError(
                f"streamslo: bad SLO file ({settings.source_of('slo')}): {exc}"
            ) from None
    if settings.run_dir is not None:
        from streamslo.errors import ResultsError
        from streamslo.results.layout import load_run

        try:
            state.data = load_run(settings.run_dir)
        except ResultsError as exc:
            raise pytest.UsageError(
                f"streamslo: bad results directory ({settings.source_of('run_dir')}): {exc}"
            ) from None


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    """One header line saying what is checked, when the plugin is active."""
    state = config.stash.get(STATE_KEY, None)
    if state is None or not state.settings.active:
        return None
    s = state.settings
    slo = state.session_slo()
    parts = [f"run {s.run_dir}" if s.run_dir else "no run directory"]
    parts.append(f"SLO {slo.source} ({len(slo)} thresholds)")
    if s.allow_invalid:
        parts.append("invalid runs allowed")
    if s.allow_incomplete:
        parts.append("unfinalized runs allowed")
    data = state.data
    if data is not None and not data.valid:
        reason = data.run.get("invalid_reason") or "no reason recorded"
        parts.append(f"the run is INVALID (run.json valid: false): {reason}")
    if data is not None and not data.complete:
        parts.append("the run is NOT finalized (run.json complete: false)")
    if data is not None and data.skipped_rows:
        parts.append(f"{data.skipped_rows} damaged rows of streams.csv skipped")
    return ["streamslo: " + ", ".join(parts)]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Parse every ``@pytest.mark.streamslo`` now, so a bad one stops the session before any test."""
    from streamslo.errors import SLOFileError

    for item in items:
        marker = item.get_closest_marker("streamslo")
        if marker is None:
            continue
        base = Path(str(item.path)).parent
        try:
            item.stash[MARKER_KEY] = parse_marker(marker.args, marker.kwargs, item.nodeid, base)
        except (ValueError, SLOFileError) as exc:
            raise pytest.UsageError(f"streamslo: {exc}") from None


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Write ``slo.json`` into the run directory when the generated checks ran."""
    state = session.config.stash.get(STATE_KEY, None)
    if state is None or state.data is None or not state.results:
        return
    from streamslo.slo.thresholds import write_slo_json

    data = state.data
    write_slo_json(
        data.path,
        state.results,
        source=state.session_slo().source,
        extra={
            "valid": data.valid,
            "complete": data.complete,
            "streams": len(data.streams),
            "skipped_rows": data.skipped_rows,
        },
    )


# --------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="session")
def streamslo_settings(pytestconfig: pytest.Config) -> Settings:
    """The resolved :class:`streamslo.verify.slo.Settings`."""
    return get_state(pytestconfig).settings


@pytest.fixture
def streamslo_slo(request: pytest.FixtureRequest) -> SLO:
    """The :class:`streamslo.slo.thresholds.SLO` for this test: its marker's, else the session's."""
    override: MarkerOverride | None = request.node.stash.get(MARKER_KEY, None)
    if override is not None and override.slo is not None:
        return override.slo
    return get_state(request.config).session_slo()


@pytest.fixture(scope="session")
def streamslo_results(pytestconfig: pytest.Config) -> RunData:
    """The run of ``--streamslo-run-dir`` (:class:`streamslo.results.layout.RunData`); fails without one."""
    state = get_state(pytestconfig)
    if state.data is None:
        pytest.fail(
            "streamslo: no results directory to check: pass --streamslo-run-dir DIR "
            "(or set STREAMSLO_RUN_DIR, or ini streamslo_run_dir)",
            pytrace=False,
        )
    return state.data


@pytest.fixture
def streamslo_check(
    request: pytest.FixtureRequest, streamslo_slo: SLO
) -> Callable[[RunData], list[CheckResult]]:
    """A function that asserts a run meets this test's SLO.

    Call it with a :class:`streamslo.results.layout.RunData` (e.g. ``streamslo_run``); it fails the
    test, with every failed threshold explained, when the run is empty, invalid or unfinalized
    (unless allowed) or breaks a threshold. It returns the :class:`CheckResult` list.
    """
    override: MarkerOverride | None = request.node.stash.get(MARKER_KEY, None)
    settings = get_state(request.config).settings
    allow = settings.allow_invalid
    if override is not None and override.allow_invalid is not None:
        allow = override.allow_invalid
    allow_incomplete = settings.allow_incomplete
    if override is not None and override.allow_incomplete is not None:
        allow_incomplete = override.allow_incomplete

    def check(data: RunData) -> list[CheckResult]:
        from streamslo.slo.thresholds import evaluate, unmet_requirements
        from streamslo.verify.explain import (
            explain_empty,
            explain_incomplete,
            explain_invalid,
            explain_result,
        )

        problems: list[str] = []
        if len(data.streams) == 0:
            pytest.fail(explain_empty(data), pytrace=False)
        if not data.complete and not allow_incomplete:
            problems.append(explain_incomplete(data))
        if not data.valid and not allow:
            problems.append(explain_invalid(data))
        problems.extend(unmet_requirements(streamslo_slo, data.run))
        results = evaluate(streamslo_slo, data)
        problems.extend(explain_result(r, data) for r in results if not r.passed)
        if problems:
            failed = sum(not r.passed for r in results)
            head = (
                f"{failed} of {len(results)} SLO thresholds failed ({streamslo_slo.source})"
                if failed
                else f"every SLO threshold held ({streamslo_slo.source}), but the run cannot be trusted as it is:"
            )
            pytest.fail(head + "\n" + "\n".join(problems), pytrace=False)
        return results

    return check
