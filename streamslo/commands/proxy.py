"""``streamslo proxy``: the fault-injecting TCP proxy on the command line.

Prints ``listening HOST:PORT ...`` as its first stdout line once it accepts connections, runs
until SIGINT or SIGTERM, then closes every connection, prints ``stats {...}`` (JSON counters)
and exits 0. Bad arguments exit 2.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
from dataclasses import dataclass, field

from streamslo.errors import BadInputError
from streamslo.options import declare
from streamslo.options.values import (
    Choice,
    Duration,
    Fraction,
    Integer,
    Parsed,
    Switch,
    flag_option,
)
from streamslo.oslimits import raise_open_files
from streamslo.proxy.config import (
    Direction,
    Endpoint,
    Faults,
    ProxyConfigError,
    ProxyLimits,
    bytes_arg,
    millis_arg,
    parse_listen,
    parse_upstream,
    rate_arg,
)
from streamslo.proxy.engine import FaultProxy
from streamslo.proxy.process import READY_PREFIX, STATS_PREFIX

__all__ = ["ProxyOptions", "add_arguments", "main"]

log = logging.getLogger(__name__)

_OPEN_FILES = 65536


def _listen_arg(text: str) -> Endpoint:
    try:
        return parse_listen(text)
    except ProxyConfigError as exc:
        raise ValueError(str(exc).removeprefix("--listen: ")) from None


def _upstream_arg(text: str) -> Endpoint:
    try:
        return parse_upstream(text)
    except ProxyConfigError as exc:
        raise ValueError(str(exc).removeprefix("--upstream: ")) from None


def _millis(value: float) -> str:
    return f"{value * 1000:g}"


def _size(value: int) -> str:
    return f"{value // 1024}KiB" if value and value % 1024 == 0 else str(value)


_MILLIS = Parsed(millis_arg, "MS", "milliseconds (or 50ms, 1s)", _millis)
_BYTES = Parsed(bytes_arg, "BYTES", "bytes (or 64KiB, 1MB)", _size)
_FAULTS = "faults (applied per connection)"


@dataclass(frozen=True)
class ProxyOptions:
    """``streamslo proxy``'s options (docs/proxy.md)."""

    upstream: Endpoint = field(
        metadata=flag_option(
            Parsed(_upstream_arg, "URL", "URL or HOST:PORT"),
            "where to forward: http://host:port, https://, ws://, wss://, or host:port",
        )
    )
    listen: Endpoint = field(
        default=parse_listen("127.0.0.1:0"),
        metadata=flag_option(
            Parsed(_listen_arg, "HOST:PORT", "address"),
            "where to listen (port 0: a free port, printed on the first stdout line)",
        ),
    )
    latency: float = field(
        default=0.0,
        metadata=flag_option(
            _MILLIS,
            "one-way delay added to every piece of data, order kept (a delay line)",
            group=_FAULTS,
        ),
    )
    jitter: float = field(
        default=0.0,
        metadata=flag_option(
            _MILLIS,
            "random extra delay per piece, uniform in [0, MS]; never reorders bytes",
            group=_FAULTS,
        ),
    )
    bandwidth: int | None = field(
        default=None,
        metadata=flag_option(
            Parsed(rate_arg, "BYTES/S", "bytes per second (or 64KiB/s)"),
            "throughput cap (token bucket), e.g. 2000 or 64KiB/s",
            group=_FAULTS,
        ),
    )
    burst: int | None = field(
        default=None,
        metadata=flag_option(
            _BYTES, "token bucket size (default: 20 ms of --bandwidth)", group=_FAULTS
        ),
    )
    reset_after: int | None = field(
        default=None,
        metadata=flag_option(
            _BYTES,
            "forward BYTES, then reset both sides (RST); 0: reset before any response byte",
            group=_FAULTS,
        ),
    )
    blackhole_after: int | None = field(
        default=None,
        metadata=flag_option(
            _BYTES,
            "forward BYTES, then nothing either way; both sides stay open (the client stalls)",
            group=_FAULTS,
        ),
    )
    slow_close: float = field(
        default=0.0,
        metadata=flag_option(
            Duration(),
            "when the upstream closes, wait this long before closing the client side "
            "(bare numbers: seconds)",
            group=_FAULTS,
        ),
    )
    silent_stop: bool = field(
        default=False,
        metadata=flag_option(
            Switch(),
            "HTTP level: cut a selected request's chunk stream short and end it as if whole "
            "(finish_reason stop, a usage that counts what was sent, [DONE]): the third incident",
            group=_FAULTS,
        ),
    )
    silent_stop_after: int | None = field(
        default=None,
        metadata=flag_option(
            Integer(1),
            "with --silent-stop: content chunks forwarded before the cut (default: drawn "
            "below the request's max_tokens)",
            group=_FAULTS,
        ),
    )
    direction: str = field(
        default=Direction.DOWN.value,
        metadata=flag_option(
            Choice(tuple(d.value for d in Direction)),
            "which flow the faults act on: down (server to client), up, both",
            group=_FAULTS,
        ),
    )
    every: int | None = field(
        default=None,
        metadata=flag_option(
            Integer(1),
            "apply the faults to every N-th connection only",
            group=_FAULTS,
            exclusive="share",
        ),
    )
    probability: float | None = field(
        default=None,
        metadata=flag_option(
            Fraction(),
            "apply the faults to each connection with this probability (seeded)",
            group=_FAULTS,
            exclusive="share",
        ),
    )
    seed: int = field(
        default=0,
        metadata=flag_option(Integer(), "seed of the jitter and --probability", group=_FAULTS),
    )
    max_buffer: int = field(
        default=ProxyLimits.max_buffer,
        metadata=flag_option(
            _BYTES,
            "bytes held per connection and direction before reading pauses",
            group="limits",
        ),
    )
    connect_timeout: float = field(
        default=ProxyLimits.connect_timeout_s,
        metadata=flag_option(
            Duration(),
            "time to reach the upstream; the client is reset on failure (bare numbers: seconds)",
            group="limits",
        ),
    )

    def faults(self) -> Faults:
        """The faults the options ask for.

        Raises:
            ProxyConfigError: a combination that makes no sense.
        """
        return Faults(
            latency_s=self.latency,
            jitter_s=self.jitter,
            bandwidth=self.bandwidth,
            burst=self.burst,
            reset_after=self.reset_after,
            blackhole_after=self.blackhole_after,
            slow_close_s=self.slow_close,
            direction=Direction(self.direction),
            every=self.every,
            probability=self.probability,
            seed=self.seed,
            silent_stop=self.silent_stop,
            silent_stop_after=self.silent_stop_after,
        )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``proxy`` options (:class:`ProxyOptions`) to ``parser``."""
    parser.description = (
        "A fault-injecting TCP proxy to put between streamslo (or any client) and a server: "
        "latency, jitter, a bandwidth cap, a reset or a blackhole after N bytes, a slow close. "
        "Protocol-agnostic: HTTP, HTTPS (TLS passes through), WebSocket. Durations: bare "
        "numbers are milliseconds for --latency/--jitter and seconds for --slow-close; units "
        "such as 50ms, 1s are accepted. Sizes: bytes, or 64KiB, 1MB."
    )
    declare.add_arguments(parser, ProxyOptions)


async def _serve(proxy: FaultProxy) -> int:
    try:
        address = await proxy.start()
    except OSError as exc:
        raise BadInputError(f"cannot listen on {proxy.listen}: {exc.strerror or exc}") from None
    if not address.is_loopback:
        log.warning(
            "listening on %s, beyond loopback: anyone who reaches this address reaches %s through it",
            address,
            proxy.upstream,
        )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    # Handlers first: whoever read the first line may signal at once.
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        print(
            f"{READY_PREFIX}{address} -> {proxy.upstream} faults: {proxy.faults.describe()}",
            flush=True,
        )
        log.info("point clients at http://%s (or ws://, or https:// with --insecure)", address)
        await stop.wait()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        await proxy.close()
    print(STATS_PREFIX + json.dumps(proxy.stats.as_dict()), flush=True)
    return 0


def main(args: argparse.Namespace) -> int:
    """Run the proxy until SIGINT/SIGTERM; 0 on a clean stop, 2 on bad input."""
    # Two sockets per connection: the common soft limit of 1024 would cap it near 500, and a
    # connection past that limit is reset (the upstream socket cannot be opened).
    raise_open_files(_OPEN_FILES)
    o = declare.values(args, ProxyOptions)
    limits = ProxyLimits(max_buffer=o.max_buffer, connect_timeout_s=o.connect_timeout)
    proxy = FaultProxy(o.upstream, o.faults(), listen=o.listen, limits=limits)
    return asyncio.run(_serve(proxy))
