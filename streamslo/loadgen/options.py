"""The stream users' options as one Locust process sees them: registered on Locust's own parser
from the run-options table (:mod:`streamslo.options.run_options`), so ``locust -f locustfiles/...``
accepts them, its web UI shows those that are safe to show, and workers receive them from the
master; and read back once into the typed :class:`LoadOptions`.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from streamslo.options.redact import Headers, Redactor, resolve_headers, take_inherited_headers
from streamslo.options.run_options import RunOptions, from_locust, register_locust_arguments
from streamslo.stream.dialects import ANTHROPIC_VERSION, Dialect
from streamslo.stream.envelope import WSEnvelope
from streamslo.transport.sync import ClientLimits
from streamslo.workload.requests import RequestOptions

if TYPE_CHECKING:
    from locust.argument_parser import LocustArgumentParser

__all__ = ["LoadOptions", "register_arguments"]


def register_arguments(parser: LocustArgumentParser) -> None:
    """Add the streamslo options to Locust's argument parser (``init_command_line_parser``)."""
    register_locust_arguments(parser)


class _PlainParser(argparse.ArgumentParser):
    """argparse with the keywords Locust's parser adds (its web UI's) taken and dropped."""

    def add_argument(self, *args: object, **kwargs: object) -> argparse.Action:
        kwargs.pop("include_in_web_ui", None)
        kwargs.pop("is_secret", None)
        return super().add_argument(*args, **kwargs)  # type: ignore[arg-type]


@dataclass(frozen=True, kw_only=True)
class LoadOptions(RunOptions):
    """Everything a stream user needs, parsed once per process.

    The run options (fields of :class:`~streamslo.options.run_options.RunOptions`) hold what Locust's
    parser gave; those Locust does not receive (``users``, ``duration``, ``drain`` are Locust's
    own ``-u``, ``--run-time``, ``--stop-timeout``; ``scenario``, ``quiet``... belong to
    ``streamslo run``) keep their defaults here. The fields below are built from them.
    """

    request: RequestOptions
    limits: ClientLimits
    slow_limits: ClientLimits
    envelope: WSEnvelope = field(default_factory=WSEnvelope)
    """The WebSocket message envelope (``--ws-request-template`` ...); plain by default."""
    headers: Headers = field(default_factory=Headers, repr=False)
    """Extra request headers: those ``streamslo run`` passed by environment, then
    ``--header-file``, ``--header`` and ``--api-key-env``."""

    @property
    def results_dir(self) -> Path | None:
        """Where to write the results directory (``--results-dir``), or None."""
        return self.out

    @property
    def generators(self) -> int:
        """Open loop: how many processes share ``request_rate`` (one arrival generator each)."""
        return max(1, self.processes)

    def redactor(self) -> Redactor:
        """Hides the secret header values and the API key."""
        return self.headers.redactor()

    @classmethod
    def from_args(cls, argv: list[str]) -> LoadOptions:
        """Build from stream-user flags as a Locust command line gives them (``--max-tokens 8
        --turns 2``), without Locust: for code that runs streams outside a Locust process.

        Raises:
            BadInputError: an option has a bad value (the message names it).
        """
        parser = _PlainParser(add_help=False)
        register_locust_arguments(parser)  # type: ignore[arg-type]
        return cls.from_parsed(parser.parse_args(argv))

    @classmethod
    def from_parsed(cls, options: argparse.Namespace) -> LoadOptions:
        """Build from Locust's parsed options.

        Raises:
            BadInputError: an option has a bad value (the message names it).
        """
        values = from_locust(options)
        anthropic = values["api"] == Dialect.MESSAGES
        headers = take_inherited_headers().merged(
            resolve_headers(
                values["header"],
                values["header_file"],
                values["api_key_env"],
                os.environ,
                anthropic=anthropic,
            )
        )
        if anthropic:  # a default: a header of the user's (later) replaces it
            headers = Headers((("anthropic-version", ANTHROPIC_VERSION),)).merged(headers)
        request = RequestOptions.of(RunOptions(**values))
        envelope = WSEnvelope.from_options(
            values["ws_request_template"], values["ws_chunk_path"], values["ws_done_message"]
        )
        limits = ClientLimits(
            stall_timeout=values["stall_timeout"],
            request_timeout=values["request_timeout"],
            first_token_timeout=values["first_token_timeout"] or None,
        )
        slow = ClientLimits(
            stall_timeout=limits.stall_timeout,
            request_timeout=limits.request_timeout,
            first_token_timeout=limits.first_token_timeout,
            recv_size=512,
            read_pause=values["slow_read_pause"],
            rcvbuf=4096,
        )
        return cls(
            **values,
            request=request,
            limits=limits,
            slow_limits=slow,
            envelope=envelope,
            headers=headers,
        )
