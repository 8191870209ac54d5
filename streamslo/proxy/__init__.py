"""``streamslo proxy``: a fault-injecting TCP proxy to put between the suite (or any client)
and a server, in the spirit of Toxiproxy and ``tc netem``.

Faults (per connection, on the flows chosen by ``direction``): latency and jitter (a delay
line that keeps order), a bandwidth cap (token bucket), a reset or a blackhole after N bytes,
and a slow close. See ``docs/proxy.md`` for what each does on the wire and which stream
outcome it produces.

Modules: :mod:`~streamslo.proxy.config` (typed settings and parsers),
:mod:`~streamslo.proxy.schedule` (the decisions, no I/O), :mod:`~streamslo.proxy.engine`
(asyncio), :mod:`~streamslo.proxy.process` (thread and child-process helpers),
:mod:`~streamslo.commands.proxy` (the sub-command's shell).

Errors::

    BadInputError (streamslo.errors)
    └── ProxyConfigError     a setting that makes no sense; names the option (also a ValueError)
"""

from streamslo.proxy.config import (
    Direction,
    Endpoint,
    Faults,
    ProxyConfigError,
    ProxyLimits,
    parse_size,
)
from streamslo.proxy.engine import FaultProxy, ProxyStats
from streamslo.proxy.process import ProxyProcess, background_proxy, spawn_proxy

__all__ = [
    "Direction",
    "Endpoint",
    "FaultProxy",
    "Faults",
    "ProxyConfigError",
    "ProxyLimits",
    "ProxyProcess",
    "ProxyStats",
    "background_proxy",
    "parse_size",
    "spawn_proxy",
]
