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
import resource
import signal
import socket
import subprocess
import sys
import tempfile
from types import FrameType

from streamslo.errors import BadInputError
from streamslo.server.config import CONFIG_ENV, FAULTS, ServerConfig
from streamslo.server.deps import require_server_extra

__all__ = ["add_arguments", "config_from_args", "is_loopback_host", "main", "warn_if_exposed"]

log = logging.getLogger("streamslo.server.launch")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``serve``'s options to ``parser``."""
    d = ServerConfig()
    g = parser.add_argument_group("server")
    g.add_argument(
        "--mode",
        choices=("naive", "fixed"),
        default="fixed",
        help="naive = every incident fault on; fixed = the repaired server (default)",
    )
    g.add_argument(
        "--fault",
        action="append",
        default=[],
        choices=FAULTS,
        metavar="NAME",
        help=f"add one fault on top of the mode (repeatable): {', '.join(FAULTS)}",
    )
    g.add_argument("--server", choices=("uvicorn", "gunicorn"), default="uvicorn")
    g.add_argument("--workers", type=int, default=1, help="Gunicorn workers (default 1)")
    g.add_argument(
        "--timeout",
        type=int,
        default=30,
        help="Gunicorn worker timeout, seconds (default 30, Gunicorn's own)",
    )
    g.add_argument(
        "--graceful-timeout",
        type=int,
        default=30,
        help="seconds in-flight streams get to finish after SIGTERM (default 30)",
    )
    g.add_argument("--keep-alive", type=int, default=5, help="idle keep-alive, seconds")
    g.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind (default 127.0.0.1; anything else logs a warning)",
    )
    g.add_argument("--port", type=int, default=8000)
    lim = parser.add_argument_group("limits")
    lim.add_argument(
        "--api-key-env",
        default=None,
        metavar="VAR",
        help="require 'Authorization: Bearer <key>' on /v1/*, the key read from "
        "environment variable VAR (never from a command line)",
    )
    lim.add_argument(
        "--max-connections",
        type=int,
        default=d.max_connections,
        help=f"open connections per process; past it 503 / WS close 1013 "
        f"(default {d.max_connections})",
    )
    lim.add_argument(
        "--header-timeout",
        type=float,
        default=d.header_timeout_s,
        help=f"seconds a request head may take to arrive; 408 past it "
        f"(default {d.header_timeout_s:g})",
    )
    lim.add_argument(
        "--body-timeout",
        type=float,
        default=d.body_timeout_s,
        help=f"seconds a request body may take to arrive; 408 past it "
        f"(default {d.body_timeout_s:g})",
    )
    lim.add_argument(
        "--max-body-bytes",
        type=int,
        default=d.max_body_bytes,
        help=f"largest body (413) or WebSocket message (1009) (default {d.max_body_bytes})",
    )
    lim.add_argument(
        "--max-tokens-limit",
        type=int,
        default=d.max_tokens_limit,
        help=f"largest max_tokens accepted (default {d.max_tokens_limit})",
    )
    m = parser.add_argument_group("engine")
    m.add_argument(
        "--token-interval-ms",
        type=float,
        default=d.token_interval_ms,
        help="simulated device time of one decode step (default 20 ms: ~50 tok/s)",
    )
    m.add_argument(
        "--max-streams",
        type=int,
        default=d.max_streams,
        help="admission limit; more streams get 429 / WS close 1013",
    )
    m.add_argument(
        "--seed", type=int, default=d.seed, help="weights, vocabulary, unseeded requests"
    )
    m.add_argument("--device", choices=("cpu", "cuda", "auto"), default=d.device)
    m.add_argument(
        "--checkpoint", default=None, help="state dict to load instead of seeded weights"
    )
    m.add_argument("--torch-threads", type=int, default=d.torch_threads)
    m.add_argument(
        "--stream-buffer-tokens",
        type=int,
        default=d.stream_buffer_tokens,
        help="unwritten tokens one stream may hold before it is paused",
    )
    m.add_argument(
        "--write-timeout",
        type=float,
        default=d.write_timeout_s,
        help="abort a stream whose single write blocks this long (slow reader)",
    )
    m.add_argument("--sndbuf", type=int, default=None, help="SO_SNDBUF for accepted sockets")
    m.add_argument(
        "--sync-ms",
        type=float,
        default=d.sync_ms,
        help="per-token-sync: CPU stand-in for one device synchronisation",
    )
    m.add_argument(
        "--cancel-after",
        type=float,
        default=d.cancel_after_s,
        help="silent-cancel: seconds of generation before the contention cancel",
    )
    m.add_argument("--default-max-tokens", type=int, default=d.default_max_tokens)
    m.add_argument(
        "--reasoning-tokens",
        type=int,
        default=d.reasoning_tokens,
        help="play a reasoning model: the first N tokens of every answer are reasoning "
        "deltas, in each dialect's field (chat: reasoning_content; Responses: "
        "response.reasoning_text.delta; Messages: thinking_delta) (default 0)",
    )
    m.add_argument(
        "--tool-call-tokens",
        type=int,
        default=d.tool_call_tokens,
        help="play a tool-calling model: the last N tokens of every answer (of max_tokens) are "
        "tool-call argument deltas (chat: tool_calls; Responses: "
        "response.function_call_arguments.delta; Messages: input_json_delta) (default 0)",
    )
    m.add_argument(
        "--prefix-block-tokens",
        type=int,
        default=d.prefix_block_tokens,
        help="prefix cache: token ids per cached block",
    )
    m.add_argument(
        "--prefix-cache-blocks",
        type=int,
        default=d.prefix_cache_blocks,
        help="prefix cache: blocks kept (0: no cache)",
    )
    m.add_argument(
        "--prefill-us-per-token",
        type=float,
        default=d.prefill_us_per_token,
        help="simulated prefill cost per uncached prompt token, in microseconds",
    )


def config_from_args(args: argparse.Namespace, state_file: str | None = None) -> ServerConfig:
    """The :class:`ServerConfig` the options describe.

    Raises:
        BadInputError: an option out of range.
    """
    if args.workers < 1:
        raise BadInputError("--workers must be >= 1")
    try:
        return ServerConfig.build(
            mode=args.mode,
            faults=tuple(args.fault),
            token_interval_ms=args.token_interval_ms,
            max_streams=args.max_streams,
            seed=args.seed,
            device=args.device,
            checkpoint=args.checkpoint,
            torch_threads=args.torch_threads,
            stream_buffer_tokens=args.stream_buffer_tokens,
            write_timeout_s=args.write_timeout,
            sndbuf_bytes=args.sndbuf,
            sync_ms=args.sync_ms,
            cancel_after_s=args.cancel_after,
            default_max_tokens=args.default_max_tokens,
            max_tokens_limit=args.max_tokens_limit,
            graceful_timeout_s=args.graceful_timeout,
            state_file=state_file,
            server=args.server,
            max_body_bytes=args.max_body_bytes,
            header_timeout_s=args.header_timeout,
            body_timeout_s=args.body_timeout,
            max_connections=args.max_connections,
            reasoning_tokens=args.reasoning_tokens,
            tool_call_tokens=args.tool_call_tokens,
            api_key_env=args.api_key_env,
            prefix_block_tokens=args.prefix_block_tokens,
            prefix_cache_blocks=args.prefix_cache_blocks,
            prefill_us_per_token=args.prefill_us_per_token,
        )
    except ValueError as exc:
        raise BadInputError(str(exc)) from None


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
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= want:
        return
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    if target < want:
        log.warning(
            "open-files limit %d is below --max-connections %d: connections past it fail at accept",
            target,
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


def _ignore(sig: int, frame: FrameType | None) -> None:
    """Stands in for the default handlers Uvicorn re-raises after a graceful stop."""


def _serve_uvicorn(cfg: ServerConfig, args: argparse.Namespace) -> int:
    import asyncio

    import uvicorn

    from streamslo.server.app import create_app
    from streamslo.server.server import DrainingServer, uvicorn_kwargs

    _check(cfg, args)
    sock = socket.socket(socket.AF_INET6 if ":" in args.host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
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
    # Uvicorn re-raises the stop signal after shutting down; make that a no-op: exit code 0.
    signal.signal(signal.SIGTERM, _ignore)
    signal.signal(signal.SIGINT, _ignore)
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
        cmd = [
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


def main(args: argparse.Namespace) -> int:
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
