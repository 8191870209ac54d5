"""Fixtures that gate a merge on streaming SLOs in a few lines.

::

    # conftest.py (optional: the defaults are a short run on the fixed bundled server)
    import pytest
    from streamslo.verify.fixtures import LoadConfig

    @pytest.fixture(scope="session")
    def streamslo_load_config():
        return LoadConfig(mode="fixed", users=20, duration_s=10)

    # test_slo.py
    def test_streams_meet_the_slo(streamslo_run, streamslo_check):
        streamslo_check(streamslo_run)

``streamslo_server`` starts the bundled server (``python -m streamslo serve``) on a free port
and waits for ``GET /healthz``; ``streamslo_run`` runs a short headless load against it
(``python -m streamslo run``, a subprocess: Locust never enters the pytest process) and
yields the loaded run. ``streamslo_probe_url`` is ``--streamslo-probe-url`` for the probes of
:mod:`streamslo.verify.probes`.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from streamslo.server.bundled import BundledServer, ServerStartError
from streamslo.server.bundled import log_tail as _tail

if TYPE_CHECKING:
    from streamslo.results.layout import RunData

__all__ = [
    "BundledServer",
    "LoadConfig",
    "start_server",
    "streamslo_load_config",
    "streamslo_probe_url",
    "streamslo_run",
    "streamslo_server",
]


@dataclass(frozen=True, slots=True)
class LoadConfig:
    """The bundled server and the short load run the fixtures start."""

    mode: str = "fixed"
    """``naive`` or ``fixed`` (``streamslo serve --mode``)."""
    users: int = 10
    duration_s: float = 5.0
    protocol: str = "mixed"
    """``sse``, ``ws`` or ``mixed``."""
    max_tokens: int = 32
    server_args: tuple[str, ...] = ()
    """More ``streamslo serve`` arguments (e.g. ``("--fault", "slow-setup")``)."""
    run_args: tuple[str, ...] = ()
    """More ``streamslo run`` arguments (e.g. ``("--slow-readers", "0.1")``)."""
    startup_timeout_s: float = 60.0
    """How long the server may take to answer ``/healthz``."""
    run_timeout_s: float = 300.0
    """How long the load run may take beyond its duration."""

    def __post_init__(self) -> None:
        if self.mode not in ("naive", "fixed"):
            raise ValueError(f"LoadConfig.mode must be 'naive' or 'fixed', got {self.mode!r}")
        if self.protocol not in ("sse", "ws", "mixed"):
            raise ValueError(f"LoadConfig.protocol must be sse, ws or mixed, got {self.protocol!r}")
        if self.users < 1 or self.duration_s <= 0 or self.max_tokens < 1:
            raise ValueError("LoadConfig: users, duration_s and max_tokens must be positive")


def start_server(config: LoadConfig, log_dir: Path) -> BundledServer:
    """Start ``python -m streamslo serve`` on a free port and wait until ``/healthz`` answers.

    Args:
        config: the server's mode and extra arguments.
        log_dir: where the server's log goes.

    Returns:
        The running :class:`~streamslo.server.bundled.BundledServer`; stop it with ``stop()``.

    Raises:
        ServerStartError: the server exited or did not answer in time (the message holds its log).
    """
    server = BundledServer(
        ["--mode", config.mode, *config.server_args], log_dir / f"server-{config.mode}.log"
    )
    return server.wait_ready(config.startup_timeout_s)


@pytest.fixture(scope="session")
def streamslo_load_config() -> LoadConfig:
    """The :class:`LoadConfig` of ``streamslo_server`` and ``streamslo_run``; override it."""
    return LoadConfig()


@pytest.fixture(scope="session")
def streamslo_server(
    streamslo_load_config: LoadConfig, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BundledServer]:
    """The bundled server, started for the session on a free port."""
    try:
        server = start_server(streamslo_load_config, tmp_path_factory.mktemp("streamslo-server"))
    except ServerStartError as exc:
        pytest.fail(f"streamslo: cannot start the bundled server: {exc}", pytrace=False)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def streamslo_run(
    streamslo_server: BundledServer,
    streamslo_load_config: LoadConfig,
    tmp_path_factory: pytest.TempPathFactory,
) -> RunData:
    """A short headless load run against ``streamslo_server``: its :class:`RunData`."""
    from streamslo.errors import EXIT_OK, EXIT_THRESHOLD, ResultsError
    from streamslo.results.layout import load_run

    cfg = streamslo_load_config
    out = tmp_path_factory.mktemp("streamslo-run")
    log = out.parent / f"{out.name}.log"
    cmd = [
        sys.executable,
        "-m",
        "streamslo",
        "run",
        "--host",
        streamslo_server.url,
        "--users",
        str(cfg.users),
        "--duration",
        f"{cfg.duration_s:g}",
        "--protocol",
        cfg.protocol,
        "--max-tokens",
        str(cfg.max_tokens),
        "--out",
        str(out),
        *cfg.run_args,
    ]
    with log.open("wb") as fh:
        try:
            proc = subprocess.run(
                cmd,
                stdout=fh,
                stderr=subprocess.STDOUT,
                timeout=cfg.duration_s + cfg.run_timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired:
            pytest.fail(f"streamslo: the load run did not finish:\n{_tail(log)}", pytrace=False)
    # 99: the run's own thresholds failed; the results are still there to check.
    if proc.returncode not in (EXIT_OK, EXIT_THRESHOLD):
        pytest.fail(
            f"streamslo: {' '.join(cmd)} exited with {proc.returncode}:\n{_tail(log)}",
            pytrace=False,
        )
    try:
        return load_run(out)
    except ResultsError as exc:
        pytest.fail(f"streamslo: the load run left no results: {exc}\n{_tail(log)}", pytrace=False)


@pytest.fixture(scope="session")
def streamslo_probe_url(pytestconfig: pytest.Config) -> str:
    """``--streamslo-probe-url`` (or ``STREAMSLO_PROBE_URL``); the probe checks skip without it."""
    from streamslo.verify.state import get_state

    url = get_state(pytestconfig).settings.probe_url
    if not url:
        pytest.skip(
            "no endpoint to probe: pass --streamslo-probe-url URL (or set STREAMSLO_PROBE_URL)"
        )
    return url
