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

from streamslo.errors import BadInputError
from streamslo.options.units import duration_arg, fraction_arg, positive_int_arg
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

__all__ = ["add_arguments", "main"]

log = logging.getLogger(__name__)

_OPEN_FILES = 65536


def _listen_arg(text: str) -> Endpoint:
    try:
        return parse_listen(text)
    except ProxyConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--listen: ")) from None


def _upstream_arg(text: str) -> Endpoint:
    try:
        return parse_upstream(text)
    except ProxyConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--upstream: ")) from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``proxy`` options to ``parser``."""
    parser.description = (
        "A fault-injecting TCP proxy to put between streamslo (or any client) and a server: "
        "latency, jitter, a bandwidth cap, a reset or a blackhole after N bytes, a slow close. "
        "Protocol-agnostic: HTTP, HTTPS (TLS passes through), WebSocket. Durations: bare "
        "numbers are milliseconds for --latency/--jitter and seconds for --slow-close; units "
        "such as 50ms, 1s are accepted. Sizes: bytes, or 64KiB, 1MB."
    )
    parser.add_argument(
        "--listen",
        type=_listen_arg,
        default=parse_listen("127.0.0.1:0"),
        metavar="HOST:PORT",
        help="where to listen (default 127.0.0.1:0: a free port, printed on the first stdout line)",
    )
    parser.add_argument(
        "--upstream",
        type=_upstream_arg,
        required=True,
        metavar="URL",
        help="where to forward: http://host:port, https://, ws://, wss://, or host:port",
    )
    f = parser.add_argument_group("faults (applied per connection)")
    f.add_argument(
        "--latency",
        type=millis_arg,
        default=0.0,
        metavar="MS",
        help="one-way delay added to every piece of data, order kept (a delay line)",
    )
    f.add_argument(
        "--jitter",
        type=millis_arg,
        default=0.0,
        metavar="MS",
        help="random extra delay per piece, uniform in [0, MS]; never reorders bytes",
    )
    f.add_argument(
        "--bandwidth",
        type=rate_arg,
        default=None,
        metavar="BYTES/S",
        help="throughput cap (token bucket), e.g. 2000 or 64KiB/s",
    )
    f.add_argument(
        "--burst",
        type=bytes_arg,
        default=None,
        metavar="BYTES",
        help="token bucket size (default: 20 ms of --bandwidth)",
    )
    f.add_argument(
        "--reset-after",
        type=bytes_arg,
        default=None,
        metavar="BYTES",
        help="forward BYTES, then reset both sides (RST); 0: reset before any response byte",
    )
    f.add_argument(
        "--blackhole-after",
        type=bytes_arg,
        default=None,
        metavar="BYTES",
        help="forward BYTES, then nothing either way; both sides stay open (the client stalls)",
    )
    f.add_argument(
        "--slow-close",
        type=duration_arg,
        default=0.0,
        metavar="S",
        help="when the upstream closes, wait S before closing the client side",
    )
    f.add_argument(
        "--silent-stop",
        action="store_true",
        help="HTTP level: cut a selected request's chunk stream short and end it as if whole "
        "(finish_reason stop, a usage that counts what was sent, [DONE]): the third incident",
    )
    f.add_argument(
        "--silent-stop-after",
        type=positive_int_arg,
        default=None,
        metavar="N",
        help="with --silent-stop: content chunks forwarded before the cut (default: drawn "
        "below the request's max_tokens)",
    )
    f.add_argument(
        "--direction",
        choices=[d.value for d in Direction],
        default="down",
        help="which flow the faults act on: down (server to client, default), up, both",
    )
    share = f.add_mutually_exclusive_group()
    share.add_argument(
        "--every",
        type=positive_int_arg,
        default=None,
        metavar="N",
        help="apply the faults to every N-th connection only",
    )
    share.add_argument(
        "--probability",
        type=fraction_arg,
        default=None,
        metavar="P",
        help="apply the faults to each connection with probability P (seeded)",
    )
    f.add_argument(
        "--seed", type=int, default=0, help="seed of the jitter and --probability (default 0)"
    )
    lim = parser.add_argument_group("limits")
    lim.add_argument(
        "--max-buffer",
        type=bytes_arg,
        default=ProxyLimits.max_buffer,
        metavar="BYTES",
        help="bytes held per connection and direction before reading pauses (default 256KiB)",
    )
    lim.add_argument(
        "--connect-timeout",
        type=duration_arg,
        default=ProxyLimits.connect_timeout_s,
        metavar="S",
        help="seconds to reach the upstream; the client is reset on failure (default 10)",
    )


def _faults(args: argparse.Namespace) -> Faults:
    return Faults(
        latency_s=args.latency,
        jitter_s=args.jitter,
        bandwidth=args.bandwidth,
        burst=args.burst,
        reset_after=args.reset_after,
        blackhole_after=args.blackhole_after,
        slow_close_s=args.slow_close,
        direction=Direction(args.direction),
        every=args.every,
        probability=args.probability,
        seed=args.seed,
        silent_stop=args.silent_stop,
        silent_stop_after=args.silent_stop_after,
    )


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
    limits = ProxyLimits(max_buffer=args.max_buffer, connect_timeout_s=args.connect_timeout)
    proxy = FaultProxy(args.upstream, _faults(args), listen=args.listen, limits=limits)
    return asyncio.run(_serve(proxy))
