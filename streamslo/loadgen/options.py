"""The stream users' command-line options (shown in Locust's web UI too) and the typed object
they become.

Every option is registered on Locust's own parser, so ``locust -f locustfiles/...`` accepts
them, the web UI shows them, and workers receive them from the master.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streamslo.errors import BadInputError
from streamslo.transport.sync import ClientLimits
from streamslo.units import parse_duration
from streamslo.workload import RequestOptions

__all__ = ["LoadOptions", "register_arguments"]


def register_arguments(parser: Any) -> None:
    """Add the streamslo options to Locust's argument parser (``init_command_line_parser``)."""
    g = parser
    g.add_argument("--max-tokens", type=int, default=64, help="max_tokens per request")
    g.add_argument("--endpoint", default="chat", choices=["chat", "completions", "stream"], help="which streaming endpoint")
    g.add_argument("--model", default="", help="model name (default: the first of /v1/models)")
    g.add_argument("--protocol", default="sse", choices=["sse", "ws", "mixed"], help="transport mix")
    g.add_argument("--slow-readers", type=float, default=0.0, help="fraction of users that read slowly (0-1)")
    g.add_argument("--slow-read-pause", default="50ms", help="slow readers: pause between reads")
    g.add_argument("--stall-timeout", default="10s", help="no byte for this long: stalled")
    g.add_argument("--request-timeout", default="300s", help="whole request deadline: timeout")
    g.add_argument("--results-dir", default="", help="write the SPEC §5 results directory here")
    g.add_argument("--prompt-file", default="", help="prompts, one per line or JSON Lines")
    g.add_argument("--prompt-tokens", type=int, default=16, help="words per synthetic prompt")
    g.add_argument("--api-key-env", default="", help="env var holding a bearer API key")
    g.add_argument("--header", action="append", default=[], help="extra header K:V (repeatable)", include_in_web_ui=False)
    g.add_argument("--insecure", action="store_true", default=False, help="skip TLS verification")
    g.add_argument("--seed", type=int, default=0, help="seed for prompts and arrivals")
    g.add_argument("--temperature", type=float, default=0.0, help="sampling temperature")
    g.add_argument("--warmup", default="0", help="streams started within this long of the start are left out")
    g.add_argument("--request-rate", type=float, default=0.0, help="open loop: requests/s over all processes (0: closed loop)")
    g.add_argument("--burstiness", type=float, default=1.0, help="open loop: gamma shape (1 = Poisson)")
    g.add_argument("--max-concurrency", type=int, default=0, help="open loop: cap on streams in flight per run (0: none)")
    g.add_argument("--think-time", default="0", help="closed loop: pause between a user's streams")
    g.add_argument("--coalesced-chunks", action="store_true", default=False, help="server packs several tokens per chunk")
    g.add_argument("--no-ignore-eos", action="store_true", default=False, help="do not send ignore_eos")
    g.add_argument("--no-usage", action="store_true", default=False, help="do not ask for stream_options.include_usage")
    g.add_argument("--no-done-marker", action="store_true", default=False, help="the server ends streams with the body, no [DONE]")
    g.add_argument("--itl-events", default="per-stream", choices=["per-stream", "per-gap", "off"], help="ITL in Locust's stats: per-stream mean and max gap, or every gap")
    g.add_argument("--stages", default="", help='k6-style stages: "30s:50,1m:50,10s:0" (duration:target users)')
    g.add_argument("--shape", default="", choices=["", "ramp", "steps", "spike"], help="a built-in load shape")
    g.add_argument("--processes-hint", type=int, default=1, help=argparse.SUPPRESS, include_in_web_ui=False)


def _dur(options: Any, name: str) -> float:
    value = getattr(options, name.replace("-", "_"))
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise BadInputError(f"--{name}: {exc}") from None


@dataclass(frozen=True)
class LoadOptions:
    """Everything a stream user needs, parsed once per process."""

    request: RequestOptions
    limits: ClientLimits
    slow_limits: ClientLimits
    protocol: str
    slow_readers: float
    results_dir: Path | None
    prompt_file: str
    prompt_tokens: int
    headers: dict[str, str]
    insecure: bool
    seed: int
    warmup: float
    request_rate: float
    burstiness: float
    max_concurrency: int
    think_time: float
    itl_events: str
    stages: str
    shape: str
    generators: int = 1
    """Open loop: how many processes share ``request_rate`` (one arrival generator each)."""

    @classmethod
    def from_parsed(cls, options: Any) -> LoadOptions:
        """Build from Locust's parsed options.

        Raises:
            BadInputError: an option has a bad value (the message names it).
        """
        if not 0.0 <= options.slow_readers <= 1.0:
            raise BadInputError(f"--slow-readers must be between 0 and 1, not {options.slow_readers}")
        headers: dict[str, str] = {}
        for item in options.header or []:
            key, sep, value = item.partition(":")
            if not sep or not key.strip():
                raise BadInputError(f"--header must be K:V, not {item!r}")
            headers[key.strip()] = value.strip()
        if options.api_key_env:
            key = os.environ.get(options.api_key_env)
            if not key:
                raise BadInputError(f"--api-key-env: environment variable {options.api_key_env} is not set")
            headers["Authorization"] = f"Bearer {key}"
        request = RequestOptions(
            endpoint=options.endpoint,
            model=options.model or None,
            max_tokens=options.max_tokens,
            temperature=options.temperature,
            seed=options.seed,
            ignore_eos=not options.no_ignore_eos,
            include_usage=not options.no_usage,
            done_marker=not options.no_done_marker,
            coalesced_chunks=options.coalesced_chunks,
        )
        limits = ClientLimits(
            stall_timeout=_dur(options, "stall-timeout"),
            request_timeout=_dur(options, "request-timeout"),
        )
        pause = _dur(options, "slow-read-pause")
        slow = ClientLimits(
            stall_timeout=limits.stall_timeout,
            request_timeout=limits.request_timeout,
            recv_size=512,
            read_pause=pause,
            rcvbuf=4096,
        )
        if options.request_rate < 0:
            raise BadInputError("--request-rate cannot be negative")
        if options.burstiness <= 0:
            raise BadInputError("--burstiness must be above 0")
        return cls(
            request=request,
            limits=limits,
            slow_limits=slow,
            protocol=options.protocol,
            slow_readers=options.slow_readers,
            results_dir=Path(options.results_dir) if options.results_dir else None,
            prompt_file=options.prompt_file,
            prompt_tokens=options.prompt_tokens,
            headers=headers,
            insecure=options.insecure,
            seed=options.seed,
            warmup=_dur(options, "warmup"),
            request_rate=options.request_rate,
            burstiness=options.burstiness,
            max_concurrency=options.max_concurrency,
            think_time=_dur(options, "think-time"),
            itl_events=options.itl_events,
            stages=options.stages,
            shape=options.shape,
            generators=max(1, int(options.processes_hint)),
        )
