"""The proxy's I/O: an asyncio TCP server that forwards each connection to the upstream through
a :class:`~streamslo.proxy.schedule.FaultSchedule` (all decisions live there).

Per connection, four tasks: for each flow a reader (source socket into the schedule, only
while the flow's queue has room, so TCP back-pressure reaches the sender) and a writer (the
schedule's answers onto the destination socket, awaiting ``drain`` so the destination's
back-pressure stops the writer, and with it, once the queue fills, the reader).

Usage::

    async with FaultProxy("http://127.0.0.1:8000", Faults(latency_s=0.05)) as proxy:
        ...  # point a client at proxy.url
        print(proxy.stats.as_dict())
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import itertools
import logging
import socket
import struct
import termios
from dataclasses import asdict, dataclass
from types import TracebackType

from streamslo.errors import HTTPProtocolError
from streamslo.proxy.config import Endpoint, Faults, ProxyLimits, parse_listen, parse_upstream
from streamslo.proxy.gateway import SilentStop, relay_request
from streamslo.proxy.schedule import (
    Close,
    Eof,
    FaultSchedule,
    Idle,
    Pipe,
    Reset,
    Selector,
    Wait,
    Write,
)

__all__ = ["FaultProxy", "ProxyStats"]

log = logging.getLogger(__name__)

_LINGER_RESET = struct.pack("ii", 1, 0)


@dataclass
class ProxyStats:
    """Counters over the proxy's life (printed as ``stats {...}`` when the command exits)."""

    connections: int = 0
    """Connections accepted."""
    active: int = 0
    """Connections open now."""
    faulted: int = 0
    """Connections the faults were applied to (``--every`` / ``--probability`` pick them)."""
    bytes_down: int = 0
    """Bytes written to clients."""
    bytes_up: int = 0
    """Bytes written to the upstream."""
    resets: int = 0
    """Connections reset by ``reset_after``."""
    blackholes: int = 0
    """Connections blackholed by ``blackhole_after``."""
    slow_closes: int = 0
    """Closes passed on late by ``slow_close``."""
    upstream_errors: int = 0
    """Connections whose upstream could not be reached (the client was reset)."""
    peak_buffered: int = 0
    """The most bytes one flow held queued at any time (bounded by the limits)."""
    silent_stops: int = 0
    """Streams ``--silent-stop`` cut short and ended as if whole."""

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with RST: ``SO_LINGER`` 0, then abort (what is unsent is dropped)."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
    writer.transport.abort()


def _unsent(writer: asyncio.StreamWriter) -> int:
    """Bytes still in asyncio's buffer plus the kernel's send queue (Linux ``SIOCOUTQ``)."""
    n = writer.transport.get_write_buffer_size()
    sock = writer.get_extra_info("socket")
    if sock is not None and not writer.transport.is_closing():
        with contextlib.suppress(OSError, ValueError):
            n += struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0"))[0]
    return n


class _Flow:
    """A flow's wake-ups: ``wake`` tells its writer that the queue changed, ``room`` tells its
    reader that the queue drained."""

    def __init__(self) -> None:
        self.wake = asyncio.Event()
        self.room = asyncio.Event()


class _Connection:
    def __init__(
        self,
        proxy: FaultProxy,
        index: int,
        client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    ) -> None:
        self.proxy = proxy
        self.index = index
        self.creader, self.cwriter = client
        self.uwriter: asyncio.StreamWriter | None = None
        self.loop = asyncio.get_running_loop()
        faulted, rng = proxy.selector.choose(index)
        if faulted:
            proxy.stats.faulted += 1
        self.schedule = FaultSchedule(proxy.faults if faulted else None, rng, self.loop.time())
        self.flows = {True: _Flow(), False: _Flow()}
        self.eof_sent = {True: False, False: False}
        self.done = asyncio.Event()
        self._counted: set[str] = set()

    async def run(self) -> None:
        limits = self.proxy.limits
        up = self.proxy.upstream
        try:
            async with asyncio.timeout(limits.connect_timeout_s):
                ureader, self.uwriter = await asyncio.open_connection(up.host, up.port)
        except (OSError, TimeoutError) as exc:
            self.proxy.stats.upstream_errors += 1
            log.warning(
                "connection %d: upstream %s unreachable (%s); resetting the client",
                self.index,
                up,
                exc,
            )
            _reset(self.cwriter)
            return
        tasks = [
            asyncio.create_task(self._read(self.creader, downstream=False)),
            asyncio.create_task(self._read(ureader, downstream=True)),
            asyncio.create_task(self._write(self.uwriter, downstream=False)),
            asyncio.create_task(self._write(self.cwriter, downstream=True)),
        ]
        try:
            await self.done.wait()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._abort()

    def _abort(self) -> None:
        for writer in (self.cwriter, self.uwriter):
            if writer is not None and not writer.transport.is_closing():
                writer.transport.abort()

    def _wake(self) -> None:
        """Wake both writers: a close or reset on one flow can end the other (a blackhole)."""
        for flow in self.flows.values():
            flow.wake.set()

    def _count(self, pipe: Pipe) -> None:
        fired = pipe.fired
        if fired is not None and fired not in self._counted:
            self._counted.add(fired)
            stats = self.proxy.stats
            if fired == "reset":
                stats.resets += 1
            else:
                stats.blackholes += 1
            log.debug("connection %d: %s after %d bytes", self.index, fired, pipe.passed)

    async def _read(self, reader: asyncio.StreamReader, downstream: bool) -> None:
        limits = self.proxy.limits
        pipe = self.schedule.pipe(downstream)
        flow = self.flows[downstream]
        while True:
            while not pipe.has_room(limits.max_buffer):
                flow.room.clear()
                await flow.room.wait()
            try:
                data = await reader.read(limits.read_size)
            except OSError as exc:
                log.debug(
                    "connection %d: %s side failed: %s",
                    self.index,
                    "upstream" if downstream else "client",
                    exc,
                )
                self.schedule.feed_reset(downstream, self.loop.time())
                self._wake()
                return
            if not data:
                self.schedule.feed_eof(downstream, self.loop.time())
                self._wake()
                return
            self.schedule.feed(downstream, self.loop.time(), data)
            self._count(pipe)
            stats = self.proxy.stats
            stats.peak_buffered = max(stats.peak_buffered, pipe.buffered)
            flow.wake.set()  # data only concerns this flow's writer

    async def _write(self, writer: asyncio.StreamWriter, downstream: bool) -> None:
        pipe = self.schedule.pipe(downstream)
        flow = self.flows[downstream]
        stats = self.proxy.stats
        try:
            while True:
                action = pipe.poll(self.loop.time())
                if isinstance(action, Write):
                    writer.write(action.data)
                    if downstream:
                        stats.bytes_down += len(action.data)
                    else:
                        stats.bytes_up += len(action.data)
                    flow.room.set()
                    await writer.drain()
                elif isinstance(action, Wait):
                    flow.wake.clear()
                    # A new piece is never due before the head, but end() can replace the
                    # queue with a close due now: wake on any change as well.
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(action.seconds):
                            await flow.wake.wait()
                elif action is Idle:
                    flow.wake.clear()
                    await flow.wake.wait()
                elif action is Eof:
                    await self._half_close(writer, downstream)
                    return
                elif action is Reset:
                    await self._finish(reset=True)
                    return
                elif action is Close:
                    await self._finish(reset=False)
                    return
        except OSError as exc:
            # The destination went away while we wrote: reset the other side too.
            log.debug(
                "connection %d: writing to the %s failed: %s",
                self.index,
                "client" if downstream else "upstream",
                exc,
            )
            self._reset_both()
            self.done.set()

    async def _half_close(self, writer: asyncio.StreamWriter, downstream: bool) -> None:
        faults = self.schedule.faults
        if faults is not None and faults.slow_close_s and faults.direction.covers(downstream):
            self.proxy.stats.slow_closes += 1
        if writer.can_write_eof() and not writer.transport.is_closing():
            writer.write_eof()
        self.eof_sent[downstream] = True
        if all(self.eof_sent.values()):
            await self._finish(reset=False)

    def _reset_both(self) -> None:
        for writer in (self.cwriter, self.uwriter):
            if writer is not None:
                _reset(writer)

    async def _finish(self, reset: bool) -> None:
        if reset:
            # Let the bytes already forwarded reach the peers first: an RST drops whatever
            # still sits in the send queue.
            deadline = self.loop.time() + self.proxy.limits.flush_timeout_s
            for writer in (self.cwriter, self.uwriter):
                while writer is not None and _unsent(writer) > 0 and self.loop.time() < deadline:
                    await asyncio.sleep(0.002)
            self._reset_both()
        else:
            for writer in (self.cwriter, self.uwriter):
                if writer is not None:
                    writer.close()
        self.done.set()


class FaultProxy:
    """A fault-injecting TCP proxy in the running event loop.

    Args:
        upstream: where to forward: ``http://host:port``, ``ws://...``, ``host:port``...
        faults: what to do to the connections (default: nothing).
        listen: ``HOST:PORT`` to listen on; port 0 (the default) picks a free port.
        limits: buffer sizes and timeouts.

    Raises:
        ProxyConfigError: a bad ``upstream`` or ``listen``.
    """

    def __init__(
        self,
        upstream: str | Endpoint,
        faults: Faults | None = None,
        *,
        listen: str | Endpoint = "127.0.0.1:0",
        limits: ProxyLimits | None = None,
    ) -> None:
        self.upstream = upstream if isinstance(upstream, Endpoint) else parse_upstream(upstream)
        self.listen = listen if isinstance(listen, Endpoint) else parse_listen(listen)
        self.faults = faults or Faults()
        self.limits = limits or ProxyLimits()
        self.selector = Selector(self.faults)
        self.stats = ProxyStats()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._counter = itertools.count(1)
        self._address: Endpoint | None = None

    @property
    def address(self) -> Endpoint:
        """Where the proxy listens (the real port once started)."""
        if self._address is None:
            raise RuntimeError("the proxy is not started")
        return self._address

    @property
    def url(self) -> str:
        """``http://host:port`` of the proxy, to give a client as its base URL."""
        return f"http://{self.address}"

    async def start(self) -> Endpoint:
        """Bind and start accepting; returns the bound address.

        Raises:
            OSError: the address cannot be bound.
        """
        self._server = await asyncio.start_server(
            self._accept, self.listen.host, self.listen.port, backlog=self.limits.backlog
        )
        host, port = self._server.sockets[0].getsockname()[:2]
        self._address = Endpoint(str(host), int(port))
        log.debug(
            "listening on %s, forwarding to %s, faults: %s",
            self._address,
            self.upstream,
            self.faults.describe(),
        )
        return self._address

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        index = next(self._counter)
        self.stats.connections += 1
        self.stats.active += 1
        conn = None
        try:
            if self.faults.silent_stop:
                await self._gateway(index, reader, writer)
                return
            conn = _Connection(self, index, (reader, writer))
            await conn.run()
        except asyncio.CancelledError:
            pass  # shutdown: the finally below closes the sockets
        except Exception:
            log.exception("connection %d: internal error", index)
        finally:
            if conn is not None:
                conn._abort()
            elif not writer.transport.is_closing():
                writer.transport.abort()
            self.stats.active -= 1
            self._tasks.discard(task)

    async def _gateway(
        self, index: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """``--silent-stop``: one request, at the HTTP level (:mod:`streamslo.proxy.gateway`)."""
        faulted, rng = self.selector.choose(index)
        if faulted:
            self.stats.faulted += 1
        cut = SilentStop(self.faults.silent_stop_after) if faulted else None
        try:
            if await relay_request((reader, writer), self.upstream, self.limits, cut, rng):
                self.stats.silent_stops += 1
            await writer.drain()
        except (OSError, TimeoutError):
            self.stats.upstream_errors += 1
        except HTTPProtocolError as exc:
            log.warning("connection %d: %s", index, exc)
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    async def close(self) -> None:
        """Stop listening, end every connection, and wait for them."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if server is not None:
            await server.wait_closed()

    async def __aenter__(self) -> FaultProxy:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
