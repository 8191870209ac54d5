"""``streamslo serve``: the bundled PyTorch streaming target server (docs/server.md). The shell:
the options (:class:`ServeOptions`, declared as every command's are) and the entry point;
:mod:`streamslo.server.launch` starts Uvicorn or Gunicorn."""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, field

from streamslo.errors import BadInputError
from streamslo.options import declare
from streamslo.options.values import (
    Choice,
    Duration,
    Integer,
    Number,
    Text,
    TextList,
    flag_option,
)
from streamslo.server.config import FAULTS, ServerConfig
from streamslo.server.launch import Launch, serve

__all__ = ["ServeOptions", "add_arguments", "main"]

_D = ServerConfig()
_L = Launch()


@dataclass(frozen=True)
class ServeOptions:
    """``streamslo serve``'s options: the server's settings (the fields of
    :class:`~streamslo.server.config.ServerConfig` of the same name) and how it is started
    (:class:`~streamslo.server.launch.Launch`)."""

    # ---------------------------------------------------------------- server
    mode: str = field(
        default=_D.mode,
        metadata=flag_option(
            Choice(("naive", "fixed")),
            "naive = every incident fault on; fixed = the repaired server",
            group="server",
        ),
    )
    faults: tuple[str, ...] = field(
        default=(),
        metadata=flag_option(
            TextList(name="NAME", choices=FAULTS),
            "add one fault on top of the mode (repeatable)",
            flag="--fault",
            group="server",
        ),
    )
    server: str = field(
        default=_D.server,
        metadata=flag_option(
            Choice(("uvicorn", "gunicorn")), "the HTTP server that runs the app", group="server"
        ),
    )
    workers: int = field(
        default=_L.workers,
        metadata=flag_option(Integer(1), "Gunicorn workers", group="server"),
    )
    timeout: int = field(
        default=_L.timeout,
        metadata=flag_option(
            Integer(1), "Gunicorn worker timeout, seconds (30 is Gunicorn's own)", group="server"
        ),
    )
    graceful_timeout_s: float = field(
        default=_D.graceful_timeout_s,
        metadata=flag_option(
            Duration(),
            "how long in-flight streams get to finish after SIGTERM",
            flag="--graceful-timeout",
            group="server",
        ),
    )
    keep_alive: int = field(
        default=_L.keep_alive,
        metadata=flag_option(Integer(0), "idle keep-alive, seconds", group="server"),
    )
    host: str = field(
        default=_L.host,
        metadata=flag_option(
            Text(optional=False, name="HOST"),
            "address to bind (anything but loopback logs a warning)",
            group="server",
        ),
    )
    port: int = field(
        default=_L.port, metadata=flag_option(Integer(0), "port to bind", group="server")
    )
    # ---------------------------------------------------------------- limits
    api_key_env: str | None = field(
        default=_D.api_key_env,
        metadata=flag_option(
            Text(name="VAR"),
            "require 'Authorization: Bearer <key>' on /v1/*, the key read from "
            "environment variable VAR (never from a command line)",
            group="limits",
        ),
    )
    max_connections: int = field(
        default=_D.max_connections,
        metadata=flag_option(
            Integer(1),
            "open connections per process; past it 503 / WS close 1013",
            group="limits",
        ),
    )
    header_timeout_s: float = field(
        default=_D.header_timeout_s,
        metadata=flag_option(
            Duration(),
            "how long a request head may take to arrive; 408 past it",
            flag="--header-timeout",
            group="limits",
        ),
    )
    body_timeout_s: float = field(
        default=_D.body_timeout_s,
        metadata=flag_option(
            Duration(),
            "how long a request body may take to arrive; 408 past it",
            flag="--body-timeout",
            group="limits",
        ),
    )
    max_body_bytes: int = field(
        default=_D.max_body_bytes,
        metadata=flag_option(
            Integer(1024), "largest body (413) or WebSocket message (1009)", group="limits"
        ),
    )
    max_tokens_limit: int = field(
        default=_D.max_tokens_limit,
        metadata=flag_option(Integer(1), "largest max_tokens accepted", group="limits"),
    )
    # ---------------------------------------------------------------- engine
    token_interval_ms: float = field(
        default=_D.token_interval_ms,
        metadata=flag_option(
            Number(0),
            "simulated device time of one decode step, ms (20: ~50 tok/s)",
            group="engine",
        ),
    )
    max_streams: int = field(
        default=_D.max_streams,
        metadata=flag_option(
            Integer(1), "admission limit; more streams get 429 / WS close 1013", group="engine"
        ),
    )
    seed: int = field(
        default=_D.seed,
        metadata=flag_option(
            Integer(), "seed of the weights, the vocabulary and unseeded requests", group="engine"
        ),
    )
    device: str = field(
        default=_D.device,
        metadata=flag_option(
            Choice(("cpu", "cuda", "auto")), "where the model runs", group="engine"
        ),
    )
    checkpoint: str | None = field(
        default=_D.checkpoint,
        metadata=flag_option(
            Text(name="FILE"), "state dict to load instead of seeded weights", group="engine"
        ),
    )
    torch_threads: int = field(
        default=_D.torch_threads,
        metadata=flag_option(Integer(1), "torch's intra-op threads", group="engine"),
    )
    stream_buffer_tokens: int = field(
        default=_D.stream_buffer_tokens,
        metadata=flag_option(
            Integer(1), "unwritten tokens one stream may hold before it is paused", group="engine"
        ),
    )
    write_timeout_s: float = field(
        default=_D.write_timeout_s,
        metadata=flag_option(
            Duration(),
            "abort a stream whose single write blocks this long (slow reader)",
            flag="--write-timeout",
            group="engine",
        ),
    )
    sndbuf_bytes: int | None = field(
        default=_D.sndbuf_bytes,
        metadata=flag_option(
            Integer(1),
            "SO_SNDBUF for accepted sockets, bytes (default: the kernel's)",
            flag="--sndbuf",
            group="engine",
        ),
    )
    sync_ms: float = field(
        default=_D.sync_ms,
        metadata=flag_option(
            Number(0),
            "per-token-sync: CPU stand-in for one device synchronisation, ms",
            group="engine",
        ),
    )
    cancel_after_s: float = field(
        default=_D.cancel_after_s,
        metadata=flag_option(
            Duration(),
            "silent-cancel: generation time before the contention cancel",
            flag="--cancel-after",
            group="engine",
        ),
    )
    default_max_tokens: int = field(
        default=_D.default_max_tokens,
        metadata=flag_option(
            Integer(1), "max_tokens of a request that leaves it out", group="engine"
        ),
    )
    reasoning_tokens: int = field(
        default=_D.reasoning_tokens,
        metadata=flag_option(
            Integer(0),
            "play a reasoning model: the first N tokens of every answer are reasoning "
            "deltas, in each dialect's field (chat: reasoning_content; Responses: "
            "response.reasoning_text.delta; Messages: thinking_delta)",
            group="engine",
        ),
    )
    tool_call_tokens: int = field(
        default=_D.tool_call_tokens,
        metadata=flag_option(
            Integer(0),
            "play a tool-calling model: the last N tokens of every answer (of max_tokens) are "
            "tool-call argument deltas (chat: tool_calls; Responses: "
            "response.function_call_arguments.delta; Messages: input_json_delta)",
            group="engine",
        ),
    )
    prefix_block_tokens: int = field(
        default=_D.prefix_block_tokens,
        metadata=flag_option(
            Integer(1), "prefix cache: token ids per cached block", group="engine"
        ),
    )
    prefix_cache_blocks: int = field(
        default=_D.prefix_cache_blocks,
        metadata=flag_option(Integer(0), "prefix cache: blocks kept (0: no cache)", group="engine"),
    )
    prefill_us_per_token: float = field(
        default=_D.prefill_us_per_token,
        metadata=flag_option(
            Number(0),
            "simulated prefill cost per uncached prompt token, in microseconds",
            group="engine",
        ),
    )

    def config(self, state_file: str | None = None) -> ServerConfig:
        """The server's settings.

        Raises:
            BadInputError: a combination out of range (the message names the flag).
        """
        names = {f.name for f in dataclasses.fields(ServerConfig)}
        settings = {
            f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name in names
        }
        try:
            return ServerConfig.build(**settings, state_file=state_file)
        except ValueError as exc:
            raise BadInputError(str(exc)) from None

    def launch(self) -> Launch:
        """How the server is started."""
        return Launch(
            host=self.host,
            port=self.port,
            workers=self.workers,
            timeout=self.timeout,
            keep_alive=self.keep_alive,
        )


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``serve``'s options (:class:`ServeOptions`), grouped as ``streamslo serve --help``
    shows them."""
    declare.add_arguments(p, ServeOptions)


def main(args: argparse.Namespace) -> int:
    """``streamslo serve``: until SIGTERM/SIGINT (0 after a clean drain)."""
    o = declare.values(args, ServeOptions)
    return serve(o.config(), o.launch())
