"""What the proxy does: the faults (:class:`Faults`), its limits (:class:`ProxyLimits`), where
it listens and where it forwards (:class:`Endpoint`), and the parsers behind the command line
(sizes with units, millisecond durations, ``HOST:PORT``, upstream URLs).

Everything here is pure and validated on construction; a bad value raises
:class:`ProxyConfigError` naming the option it came from.
"""

from __future__ import annotations

import argparse
import ipaddress
import math
import re
from dataclasses import dataclass
from enum import Enum
from urllib.parse import urlsplit

from streamslo.errors import BadInputError
from streamslo.options.units import parse_duration

__all__ = [
    "DEFAULT_PORTS",
    "Direction",
    "Endpoint",
    "Faults",
    "ProxyConfigError",
    "ProxyLimits",
    "bytes_arg",
    "millis_arg",
    "parse_listen",
    "parse_millis",
    "parse_size",
    "parse_upstream",
    "rate_arg",
]


class ProxyConfigError(BadInputError, ValueError):
    """A proxy setting that makes no sense (exit code 2). The message names the option."""


class Direction(Enum):
    """Which way the faults act: ``down`` (server to client), ``up`` or ``both``."""

    DOWN = "down"
    UP = "up"
    BOTH = "both"

    def covers(self, downstream: bool) -> bool:
        """True when the faults act on the downstream (or, with False, the upstream) flow."""
        return self is Direction.BOTH or (self is Direction.DOWN) == downstream


#: Default port of each upstream scheme; the proxy forwards TCP, so TLS and WebSocket pass
#: through untouched.
DEFAULT_PORTS = {"http": 80, "ws": 80, "https": 443, "wss": 443, "tcp": None}

_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([kmg]i?b|b)?", re.IGNORECASE)
_SIZE_UNITS = {
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
}


def parse_size(text: str | int, what: str = "size") -> int:
    """Parse a byte count: ``4096``, ``64KiB``, ``1.5MB``, ``2GiB`` (``KB`` = 1000, ``KiB`` = 1024).

    Args:
        text: the value.
        what: the option it came from, for the error message.

    Raises:
        ProxyConfigError: not a size, or negative.
    """
    if isinstance(text, int):
        if text < 0:
            raise ProxyConfigError(f"{what} cannot be negative: {text}")
        return text
    m = _SIZE.fullmatch(text.strip())
    if m is None:
        raise ProxyConfigError(f"{what}: not a size: {text!r} (use bytes, or 64KiB, 1MB, 2GiB)")
    return int(float(m.group(1)) * _SIZE_UNITS[(m.group(2) or "b").lower()])


def parse_millis(text: str | float, what: str = "duration") -> float:
    """Parse a duration whose bare numbers are milliseconds (``50`` = 50 ms); ``50ms``,
    ``0.2s``, ``1m`` carry their unit. Returns seconds.

    Raises:
        ProxyConfigError: not a duration, or negative.
    """
    try:
        if isinstance(text, (int, float)):
            return parse_duration(float(text) / 1000.0)
        s = text.strip()
        try:
            return parse_duration(float(s) / 1000.0)
        except ValueError:
            return parse_duration(s)
    except ValueError as exc:
        raise ProxyConfigError(f"{what}: {exc}") from None


def millis_arg(text: str) -> float:
    """argparse ``type=``: milliseconds by default (:func:`parse_millis`), in seconds."""
    try:
        return parse_millis(text, "value")
    except ProxyConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("value: ")) from None


def bytes_arg(text: str) -> int:
    """argparse ``type=``: a byte count (:func:`parse_size`)."""
    try:
        return parse_size(text, "value")
    except ProxyConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("value: ")) from None


def rate_arg(text: str) -> int:
    """argparse ``type=``: bytes per second, ``1000``, ``64KiB`` or ``64KiB/s``; at least 1."""
    value = bytes_arg(text.strip().removesuffix("/s").removesuffix("/S"))
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 byte per second: {text!r}")
    return value


@dataclass(frozen=True)
class Endpoint:
    """A TCP address: ``host`` (a name or an IP literal, no brackets) and ``port``."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def is_loopback(self) -> bool:
        """True for ``localhost`` and loopback IP literals; a wildcard or other name is not."""
        if self.host.lower() == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False


def _split_hostport(text: str, what: str) -> tuple[str, str]:
    s = text.strip()
    if s.startswith("["):
        host, sep, rest = s[1:].partition("]")
        if not sep or not rest.startswith(":"):
            raise ProxyConfigError(f"{what}: not HOST:PORT: {text!r}")
        return host, rest[1:]
    host, sep, port = s.rpartition(":")
    if not sep or ":" in host:
        raise ProxyConfigError(f"{what}: not HOST:PORT: {text!r} (write IPv6 as [::1]:PORT)")
    return host, port


def _port(text: str, what: str, allow_zero: bool) -> int:
    try:
        port = int(text)
    except ValueError:
        raise ProxyConfigError(f"{what}: not a port number: {text!r}") from None
    if not (0 if allow_zero else 1) <= port <= 65535:
        raise ProxyConfigError(f"{what}: port out of range: {port}")
    return port


def parse_listen(text: str) -> Endpoint:
    """``HOST:PORT``, ``[::1]:PORT`` or ``:PORT`` (loopback); port 0 picks a free one.

    Raises:
        ProxyConfigError: not an address.
    """
    host, port = _split_hostport(text, "--listen")
    return Endpoint(host or "127.0.0.1", _port(port, "--listen", allow_zero=True))


def parse_upstream(text: str) -> Endpoint:
    """Where to forward: ``http://host:port``, ``https://...``, ``ws://...``, ``wss://...``,
    ``tcp://host:port`` or plain ``host:port``. The path, if any, is the client's business:
    the proxy forwards bytes and never reads a request.

    Raises:
        ProxyConfigError: not a URL or address the proxy can connect to.
    """
    s = text.strip()
    if "://" not in s:
        host, port = _split_hostport(s, "--upstream")
        if not host:
            raise ProxyConfigError(f"--upstream: no host in {text!r}")
        return Endpoint(host, _port(port, "--upstream", allow_zero=False))
    parts = urlsplit(s)
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS:
        raise ProxyConfigError(
            f"--upstream: unsupported scheme {parts.scheme!r} in {text!r} (use http, https, ws, wss or tcp)"
        )
    try:
        url_port = parts.port or DEFAULT_PORTS[scheme]
    except ValueError as exc:
        raise ProxyConfigError(f"--upstream: {exc} in {text!r}") from None
    if not parts.hostname or url_port is None:
        raise ProxyConfigError(f"--upstream: needs a host and a port: {text!r}")
    return Endpoint(parts.hostname, url_port)


@dataclass(frozen=True)
class Faults:
    """The faults applied to each selected connection. The default injects nothing.

    Sizes are bytes, durations seconds. Faults act on the flows chosen by ``direction``; a
    byte count (``reset_after``, ``blackhole_after``) is counted per flow.
    """

    latency_s: float = 0.0
    """One-way delay added to every piece of data (a delay line: order kept, no throttling)."""
    jitter_s: float = 0.0
    """Random extra delay per piece, uniform in [0, jitter]; a piece never overtakes another."""
    bandwidth: int | None = None
    """Bytes per second (token bucket); None for no cap."""
    burst: int | None = None
    """Token bucket size in bytes; None: 20 ms worth of ``bandwidth`` (at least 1 byte)."""
    reset_after: int | None = None
    """Forward this many bytes, then reset both sides (RST, ``SO_LINGER`` 0)."""
    blackhole_after: int | None = None
    """Forward this many bytes, then nothing more either way: both sides stay open, read and
    discarded, until the client hangs up."""
    slow_close_s: float = 0.0
    """When a side closes, wait this long before passing the close on."""
    direction: Direction = Direction.DOWN
    every: int | None = None
    """Fault only every N-th connection (N, 2N, ...); None for all."""
    probability: float | None = None
    """Fault each connection with this probability (seeded); None for all."""
    seed: int = 0
    """Seeds the jitter and the ``probability`` draws: the same seed, the same schedule."""
    silent_stop: bool = False
    """HTTP-level: cut a selected request's chunk stream short and end it as if it were whole
    (``finish_reason: "stop"``, a usage that counts what was sent, ``[DONE]``):
    :mod:`streamslo.proxy.gateway`."""
    silent_stop_after: int | None = None
    """With ``silent_stop``: content chunks forwarded before the cut (None: drawn below the
    request's ``max_tokens``)."""

    def __post_init__(self) -> None:
        for name in ("latency_s", "jitter_s", "slow_close_s"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ProxyConfigError(
                    f"--{name[:-2].replace('_', '-')} must be a finite duration >= 0, not {value!r}"
                )
        for name in ("bandwidth", "burst"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ProxyConfigError(f"--{name} must be at least 1 byte, not {value!r}")
        for name in ("reset_after", "blackhole_after"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ProxyConfigError(f"--{name.replace('_', '-')} cannot be negative: {value!r}")
        if self.every is not None and self.every < 1:
            raise ProxyConfigError(f"--every must be at least 1, not {self.every!r}")
        if self.probability is not None and not 0.0 <= self.probability <= 1.0:
            raise ProxyConfigError(
                f"--probability must be between 0 and 1, not {self.probability!r}"
            )
        if self.every is not None and self.probability is not None:
            raise ProxyConfigError("--every and --probability exclude each other: choose one")
        if self.burst is not None and self.bandwidth is None:
            raise ProxyConfigError("--burst needs --bandwidth")
        if self.silent_stop_after is not None and not self.silent_stop:
            raise ProxyConfigError("--silent-stop-after needs --silent-stop")
        if self.silent_stop_after is not None and self.silent_stop_after < 1:
            raise ProxyConfigError(
                f"--silent-stop-after must be at least 1, not {self.silent_stop_after!r}"
            )
        if self.silent_stop and (
            self.latency_s
            or self.jitter_s
            or self.slow_close_s
            or self.bandwidth is not None
            or self.reset_after is not None
            or self.blackhole_after is not None
        ):
            raise ProxyConfigError(
                "--silent-stop reads the HTTP streams it cuts: run a second proxy for the "
                "byte-level faults (--latency, --reset-after...)"
            )

    @property
    def bucket_size(self) -> int | None:
        """The token bucket's size in bytes, or None without a bandwidth cap."""
        if self.bandwidth is None:
            return None
        return self.burst if self.burst is not None else max(1, self.bandwidth // 50)

    @property
    def active(self) -> bool:
        """True when any fault is set."""
        return bool(
            self.latency_s
            or self.jitter_s
            or self.slow_close_s
            or self.bandwidth is not None
            or self.reset_after is not None
            or self.blackhole_after is not None
            or self.silent_stop
        )

    def describe(self) -> str:
        """One line for logs: ``latency=50ms jitter=10ms ... (down)``, or ``none``."""
        parts = []
        if self.latency_s:
            parts.append(f"latency={self.latency_s * 1000:g}ms")
        if self.jitter_s:
            parts.append(f"jitter={self.jitter_s * 1000:g}ms")
        if self.bandwidth is not None:
            parts.append(f"bandwidth={self.bandwidth}B/s burst={self.bucket_size}B")
        if self.reset_after is not None:
            parts.append(f"reset-after={self.reset_after}B")
        if self.blackhole_after is not None:
            parts.append(f"blackhole-after={self.blackhole_after}B")
        if self.slow_close_s:
            parts.append(f"slow-close={self.slow_close_s:g}s")
        if self.silent_stop:
            after = self.silent_stop_after
            parts.append(f"silent-stop{'' if after is None else f' after {after} chunks'}")
        if not parts:
            return "none"
        share = ""
        if self.every is not None:
            share = f", every {self.every} connections"
        elif self.probability is not None:
            share = f", probability {self.probability:g}"
        return " ".join(parts) + f" ({self.direction.value}{share}, seed {self.seed})"


@dataclass(frozen=True)
class ProxyLimits:
    """How much the proxy holds and how long it waits, per connection."""

    max_buffer: int = 256 * 1024
    """Bytes held per flow (the delay line). When full, the proxy stops reading that flow's
    source, so TCP back-pressure reaches the sender. With latency L it caps a flow's
    throughput at max_buffer / L, as a TCP window does."""
    read_size: int = 64 * 1024
    """Bytes asked for per read."""
    connect_timeout_s: float = 10.0
    """Seconds to connect to the upstream; on failure the client is reset."""
    flush_timeout_s: float = 2.0
    """Before a reset, seconds to wait for the bytes already written to leave the kernel."""
    backlog: int = 2048
    """The listener's accept queue (the kernel caps it at ``net.core.somaxconn``). asyncio's
    default of 100 overflows when hundreds of clients connect at once: the kernel drops the
    handshakes past it, and a client that believed itself connected is never accepted."""

    def __post_init__(self) -> None:
        if self.backlog < 1:
            raise ProxyConfigError("the listen backlog must be at least 1")
        if self.max_buffer < 1 or self.read_size < 1:
            raise ProxyConfigError("--max-buffer and the read size must be at least 1 byte")
        if not self.connect_timeout_s > 0 or not self.flush_timeout_s >= 0:
            raise ProxyConfigError("--connect-timeout must be > 0")
