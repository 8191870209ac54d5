"""``streamslo serve``: run the bundled target server under Uvicorn or real Gunicorn.

- ``--server uvicorn`` (default): one process, :class:`~streamslo.server.server.DrainingServer`.
- ``--server gunicorn``: spawns ``python -m gunicorn -k streamslo.server.server.DrainingUvicornWorker
  -c python:streamslo.server.gunicorn_conf 'streamslo.server.app:create_app()'`` (the worker class is
  ``uvicorn_worker.UvicornWorker`` with a draining server); settings reach the workers as JSON in
  ``STREAMSLO_SERVER_CONFIG``. SIGTERM/SIGINT are forwarded as SIGTERM (graceful drain).

The incidents, side by side (2 cores)::

    streamslo serve --mode naive --server gunicorn --workers 1 --timeout 3
    streamslo serve --mode fixed --server gunicorn --workers 1

Heavy imports (torch, uvicorn, gunicorn) happen inside :func:`main`, after a check that the
``server`` extra is installed, so building the CLI's parser stays fast and a missing extra is
one clear sentence. Binding beyond loopback logs a warning (more so without ``--api-key-env``).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from types import FrameType

from streamslo.errors import BadInputError
from streamslo.oslimits import raise_open_files
from streamslo.server.config import CONFIG_ENV, ServerConfig
from streamslo.server.deps import require_server_extra

__all__ = [
    "Launch",
    "gunicorn_command",
    "is_loopback_host",
    "serve",
    "warn_if_exposed",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Launch:
    """How ``streamslo serve`` starts the server: the listening socket and Gunicorn's own
    settings (the app's are a :class:`ServerConfig`)."""

    host: str = "127.0.0.1"
    """The address to bind; anything but loopback logs a warning."""
    port: int = 8000
    workers: int = 1
    """Gunicorn workers."""
    timeout: int = 30
    """Gunicorn's worker timeout, seconds (its own default)."""
    keep_alive: int = 5
    """Idle keep-alive, seconds."""


def gunicorn_command(cfg: ServerConfig, launch: Launch) -> list[str]:
    """Gunicorn's command line for ``serve --server gunicorn`` (the settings travel in the
    environment, :data:`~streamslo.server.config.CONFIG_ENV`)."""
    return [
        sys.executable,
        "-m",
        "gunicorn",
        "-k",
        "streamslo.server.server.DrainingUvicornWorker",
        "-c",
        "python:streamslo.server.gunicorn_conf",
        "--workers",
        str(launch.workers),
        "--bind",
        f"{launch.host}:{launch.port}",
        "--timeout",
        str(launch.timeout),
        "--graceful-timeout",
        str(round(cfg.graceful_timeout_s)),
        "--keep-alive",
        str(launch.keep_alive),
        "--backlog",
        "2048",
        "streamslo.server.app:create_app()",
    ]


def is_loopback_host(host: str) -> bool:
    """Whether binding ``host`` keeps the server on this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name: it may resolve anywhere


def warn_if_exposed(host: str, port: int, keyed: bool) -> None:
    """Log a warning when ``host`` is reachable from other machines."""
    if is_loopback_host(host):
        return
    if keyed:
        log.warning(
            "binding %s:%d: reachable from other machines; /v1/* needs the API key, "
            "/debug/* the key or loopback",
            host,
            port,
        )
    else:
        log.warning(
            "binding %s:%d: reachable from other machines, and without --api-key-env "
            "anyone who reaches it can use it",
            host,
            port,
        )


def _raise_fd_limit(cfg: ServerConfig) -> None:
    """Let the connection cap, not the open-files limit, be what refuses connections."""
    want = cfg.max_connections + 256  # files, the listener, the trainer's pipes
    got = raise_open_files(want)
    if got < want:
        log.warning(
            "open-files limit %d is below --max-connections %d: connections past it fail at accept",
            got,
            cfg.max_connections,
        )


def _check(cfg: ServerConfig, launch: Launch) -> None:
    """What every launch path checks before starting: the key is there, the fd limit fits."""
    try:
        keyed = cfg.api_key() is not None
    except ValueError as exc:
        raise BadInputError(str(exc)) from None
    warn_if_exposed(launch.host, launch.port, keyed)
    _raise_fd_limit(cfg)
    host = f"[{launch.host}]" if ":" in launch.host else launch.host
    faults = f", faults: {', '.join(cfg.faults)}" if cfg.faults else ", no faults"
    log.info(
        "serving http://%s:%d (mode %s%s; %s%s); streamslo run --host http://%s:%d ...",
        host,
        launch.port,
        cfg.mode,
        faults,
        cfg.server,
        f", {launch.workers} workers" if cfg.server == "gunicorn" else "",
        host,
        launch.port,
    )


def _serve_uvicorn(cfg: ServerConfig, launch: Launch) -> int:
    import asyncio

    import uvicorn

    from streamslo.server.app import create_app
    from streamslo.server.server import DrainingServer, no_delay, uvicorn_kwargs

    _check(cfg, launch)
    family = socket.AF_INET6 if ":" in launch.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    no_delay(sock)
    if cfg.sndbuf_bytes:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, cfg.sndbuf_bytes)
    try:
        sock.bind((launch.host, launch.port))
    except OSError as exc:
        raise BadInputError(
            f"--host/--port: cannot bind {launch.host}:{launch.port}: {exc}"
        ) from None
    sock.listen(2048)
    config = uvicorn.Config(
        create_app(cfg),
        timeout_keep_alive=launch.keep_alive,
        access_log=False,
        log_level="info",
        backlog=2048,
        **uvicorn_kwargs(cfg),
    )
    server = DrainingServer(config, cfg.graceful_timeout_s)

    def stop(sig: int, frame: FrameType | None) -> None:
        # Before Uvicorn's own handlers are in (the event loop starting): stop as soon as it
        # has started, rather than lose the signal. After its graceful stop Uvicorn re-raises
        # the signal to this handler, where it changes nothing: exit code 0.
        server.should_exit = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    asyncio.run(server.serve(sockets=[sock]))
    return 0 if server.started else 1


def _serve_gunicorn(cfg: ServerConfig, launch: Launch) -> int:
    fd, state_file = tempfile.mkstemp(prefix="streamslo-workers-", suffix=".json")
    os.close(fd)
    try:
        cfg = dataclasses.replace(cfg, state_file=state_file)
        _check(cfg, launch)
        env = dict(os.environ, **{CONFIG_ENV: cfg.to_json(), "STREAMSLO_STATE_FILE": state_file})
        if cfg.sndbuf_bytes:
            env["STREAMSLO_SNDBUF"] = str(cfg.sndbuf_bytes)
        cmd = gunicorn_command(cfg, launch)
        log.info("exec: %s", " ".join(cmd))
        proc = subprocess.Popen(cmd, env=env)

        def forward(sig: int, frame: FrameType | None) -> None:
            # Gunicorn's SIGINT is a quick stop; every stop we forward is the graceful one.
            proc.send_signal(signal.SIGTERM)

        signal.signal(signal.SIGTERM, forward)
        signal.signal(signal.SIGINT, forward)
        rc = proc.wait()
        return 0 if rc in (0, -signal.SIGTERM) else rc
    finally:
        os.unlink(state_file)


def serve(cfg: ServerConfig, launch: Launch) -> int:
    """Run the server until SIGTERM/SIGINT; returns the exit code (0 after a clean drain).

    Raises:
        ServerExtraMissing: the ``server`` extra is not installed.
        BadInputError: an unset ``--api-key-env`` variable, a port that cannot be bound.
    """
    require_server_extra("streamslo serve")
    if cfg.server == "gunicorn":
        return _serve_gunicorn(cfg, launch)
    return _serve_uvicorn(cfg, launch)
