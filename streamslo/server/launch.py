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

import argparse
import ipaddress
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field as dc_field
from types import FrameType
from typing import Any

from streamslo.errors import BadInputError
from streamslo.oslimits import raise_open_files
from streamslo.server.config import CONFIG_ENV, FAULTS, ServerConfig
from streamslo.server.deps import require_server_extra

__all__ = [
    "SERVE_OPTIONS",
    "ServeOption",
    "add_serve_arguments",
    "config_from_args",
    "gunicorn_command",
    "is_loopback_host",
    "serve",
    "warn_if_exposed",
]

log = logging.getLogger(__name__)


_D = ServerConfig()


@dataclass(frozen=True)
class ServeOption:
    """One ``streamslo serve`` option: its flag, its help group, and where its value goes."""

    flag: str
    group: str
    """``server``, ``limits`` or ``engine`` (the ``--help`` sections)."""
    help: str | None
    field: str | None = None
    """The :class:`ServerConfig` field it sets (its default, unless ``argparse`` says
    otherwise); None: a launcher setting (Gunicorn's, the listening socket's)."""
    argparse: Mapping[str, Any] = dc_field(default_factory=dict)
    """``add_argument`` keywords: ``type``, ``choices``, ``action``, ``metavar``, ``default``."""

    @property
    def dest(self) -> str:
        return self.flag[2:].replace("-", "_")


#: Every ``streamslo serve`` option, declared once: :func:`add_arguments` adds them,
#: :func:`config_from_args` turns them into a :class:`ServerConfig`, :func:`gunicorn_command`
#: reads the launcher's.
SERVE_OPTIONS: tuple[ServeOption, ...] = (
    ServeOption(
        "--mode",
        "server",
        "naive = every incident fault on; fixed = the repaired server (default)",
        "mode",
        {"choices": ("naive", "fixed"), "default": "fixed"},
    ),
    ServeOption(
        "--fault",
        "server",
        f"add one fault on top of the mode (repeatable): {', '.join(FAULTS)}",
        "faults",
        {"action": "append", "default": [], "choices": FAULTS, "metavar": "NAME"},
    ),
    ServeOption("--server", "server", None, "server", {"choices": ("uvicorn", "gunicorn")}),
    ServeOption(
        "--workers", "server", "Gunicorn workers (default 1)", None, {"type": int, "default": 1}
    ),
    ServeOption(
        "--timeout",
        "server",
        "Gunicorn worker timeout, seconds (default 30, Gunicorn's own)",
        None,
        {"type": int, "default": 30},
    ),
    ServeOption(
        "--graceful-timeout",
        "server",
        "seconds in-flight streams get to finish after SIGTERM (default 30)",
        "graceful_timeout_s",
        {"type": int, "default": 30},
    ),
    ServeOption(
        "--keep-alive", "server", "idle keep-alive, seconds", None, {"type": int, "default": 5}
    ),
    ServeOption(
        "--host",
        "server",
        "address to bind (default 127.0.0.1; anything else logs a warning)",
        None,
        {"default": "127.0.0.1"},
    ),
    ServeOption("--port", "server", None, None, {"type": int, "default": 8000}),
    ServeOption(
        "--api-key-env",
        "limits",
        "require 'Authorization: Bearer <key>' on /v1/*, the key read from "
        "environment variable VAR (never from a command line)",
        "api_key_env",
        {"metavar": "VAR"},
    ),
    ServeOption(
        "--max-connections",
        "limits",
        f"open connections per process; past it 503 / WS close 1013 (default {_D.max_connections})",
        "max_connections",
        {"type": int},
    ),
    ServeOption(
        "--header-timeout",
        "limits",
        f"seconds a request head may take to arrive; 408 past it (default {_D.header_timeout_s:g})",
        "header_timeout_s",
        {"type": float},
    ),
    ServeOption(
        "--body-timeout",
        "limits",
        f"seconds a request body may take to arrive; 408 past it (default {_D.body_timeout_s:g})",
        "body_timeout_s",
        {"type": float},
    ),
    ServeOption(
        "--max-body-bytes",
        "limits",
        f"largest body (413) or WebSocket message (1009) (default {_D.max_body_bytes})",
        "max_body_bytes",
        {"type": int},
    ),
    ServeOption(
        "--max-tokens-limit",
        "limits",
        f"largest max_tokens accepted (default {_D.max_tokens_limit})",
        "max_tokens_limit",
        {"type": int},
    ),
    ServeOption(
        "--token-interval-ms",
        "engine",
        "simulated device time of one decode step (default 20 ms: ~50 tok/s)",
        "token_interval_ms",
        {"type": float},
    ),
    ServeOption(
        "--max-streams",
        "engine",
        "admission limit; more streams get 429 / WS close 1013",
        "max_streams",
        {"type": int},
    ),
    ServeOption(
        "--seed", "engine", "weights, vocabulary, unseeded requests", "seed", {"type": int}
    ),
    ServeOption("--device", "engine", None, "device", {"choices": ("cpu", "cuda", "auto")}),
    ServeOption(
        "--checkpoint", "engine", "state dict to load instead of seeded weights", "checkpoint"
    ),
    ServeOption("--torch-threads", "engine", None, "torch_threads", {"type": int}),
    ServeOption(
        "--stream-buffer-tokens",
        "engine",
        "unwritten tokens one stream may hold before it is paused",
        "stream_buffer_tokens",
        {"type": int},
    ),
    ServeOption(
        "--write-timeout",
        "engine",
        "abort a stream whose single write blocks this long (slow reader)",
        "write_timeout_s",
        {"type": float},
    ),
    ServeOption(
        "--sndbuf", "engine", "SO_SNDBUF for accepted sockets", "sndbuf_bytes", {"type": int}
    ),
    ServeOption(
        "--sync-ms",
        "engine",
        "per-token-sync: CPU stand-in for one device synchronisation",
        "sync_ms",
        {"type": float},
    ),
    ServeOption(
        "--cancel-after",
        "engine",
        "silent-cancel: seconds of generation before the contention cancel",
        "cancel_after_s",
        {"type": float},
    ),
    ServeOption("--default-max-tokens", "engine", None, "default_max_tokens", {"type": int}),
    ServeOption(
        "--reasoning-tokens",
        "engine",
        "play a reasoning model: the first N tokens of every answer are reasoning "
        "deltas, in each dialect's field (chat: reasoning_content; Responses: "
        "response.reasoning_text.delta; Messages: thinking_delta) (default 0)",
        "reasoning_tokens",
        {"type": int},
    ),
    ServeOption(
        "--tool-call-tokens",
        "engine",
        "play a tool-calling model: the last N tokens of every answer (of max_tokens) are "
        "tool-call argument deltas (chat: tool_calls; Responses: "
        "response.function_call_arguments.delta; Messages: input_json_delta) (default 0)",
        "tool_call_tokens",
        {"type": int},
    ),
    ServeOption(
        "--prefix-block-tokens",
        "engine",
        "prefix cache: token ids per cached block",
        "prefix_block_tokens",
        {"type": int},
    ),
    ServeOption(
        "--prefix-cache-blocks",
        "engine",
        "prefix cache: blocks kept (0: no cache)",
        "prefix_cache_blocks",
        {"type": int},
    ),
    ServeOption(
        "--prefill-us-per-token",
        "engine",
        "simulated prefill cost per uncached prompt token, in microseconds",
        "prefill_us_per_token",
        {"type": float},
    ),
)


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``serve``'s options (:data:`SERVE_OPTIONS`) to ``parser``."""
    groups = {name: parser.add_argument_group(name) for name in ("server", "limits", "engine")}
    for opt in SERVE_OPTIONS:
        kw = dict(opt.argparse)
        if opt.field is not None and "default" not in kw:
            kw["default"] = getattr(_D, opt.field)
        groups[opt.group].add_argument(opt.flag, help=opt.help, **kw)


def config_from_args(args: argparse.Namespace, state_file: str | None = None) -> ServerConfig:
    """The :class:`ServerConfig` the options describe.

    Raises:
        BadInputError: an option out of range.
    """
    if args.workers < 1:
        raise BadInputError("--workers must be >= 1")
    settings = {o.field: getattr(args, o.dest) for o in SERVE_OPTIONS if o.field is not None}
    settings["faults"] = tuple(settings["faults"])
    try:
        return ServerConfig.build(**settings, state_file=state_file)
    except ValueError as exc:
        raise BadInputError(str(exc)) from None


def gunicorn_command(args: argparse.Namespace) -> list[str]:
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
        str(args.workers),
        "--bind",
        f"{args.host}:{args.port}",
        "--timeout",
        str(round(args.timeout)),
        "--graceful-timeout",
        str(round(args.graceful_timeout)),
        "--keep-alive",
        str(round(args.keep_alive)),
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


def _check(cfg: ServerConfig, args: argparse.Namespace) -> None:
    """What every launch path checks before starting: the key is there, the fd limit fits."""
    try:
        keyed = cfg.api_key() is not None
    except ValueError as exc:
        raise BadInputError(str(exc)) from None
    warn_if_exposed(args.host, args.port, keyed)
    _raise_fd_limit(cfg)
    host = f"[{args.host}]" if ":" in args.host else args.host
    faults = f", faults: {', '.join(cfg.faults)}" if cfg.faults else ", no faults"
    log.info(
        "serving http://%s:%d (mode %s%s; %s%s); streamslo run --host http://%s:%d ...",
        host,
        args.port,
        cfg.mode,
        faults,
        args.server,
        f", {args.workers} workers" if args.server == "gunicorn" else "",
        host,
        args.port,
    )


def _serve_uvicorn(cfg: ServerConfig, args: argparse.Namespace) -> int:
    import asyncio

    import uvicorn

    from streamslo.server.app import create_app
    from streamslo.server.server import DrainingServer, no_delay, uvicorn_kwargs

    _check(cfg, args)
    family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    no_delay(sock)
    if cfg.sndbuf_bytes:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, cfg.sndbuf_bytes)
    try:
        sock.bind((args.host, args.port))
    except OSError as exc:
        raise BadInputError(f"--host/--port: cannot bind {args.host}:{args.port}: {exc}") from None
    sock.listen(2048)
    config = uvicorn.Config(
        create_app(cfg),
        timeout_keep_alive=int(args.keep_alive),
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


def _serve_gunicorn(args: argparse.Namespace) -> int:
    fd, state_file = tempfile.mkstemp(prefix="streamslo-workers-", suffix=".json")
    os.close(fd)
    try:
        cfg = config_from_args(args, state_file)
        _check(cfg, args)
        env = dict(os.environ, **{CONFIG_ENV: cfg.to_json(), "STREAMSLO_STATE_FILE": state_file})
        if cfg.sndbuf_bytes:
            env["STREAMSLO_SNDBUF"] = str(cfg.sndbuf_bytes)
        cmd = gunicorn_command(args)
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


def serve(args: argparse.Namespace) -> int:
    """Run the server until SIGTERM/SIGINT; returns the exit code (0 after a clean drain).

    Raises:
        ServerExtraMissing: the ``server`` extra is not installed.
        BadInputError: an option out of range, an unset ``--api-key-env`` variable, a port
            that cannot be bound.
    """
    require_server_extra("streamslo serve")
    if args.server == "gunicorn":
        return _serve_gunicorn(args)
    return _serve_uvicorn(config_from_args(args), args)
