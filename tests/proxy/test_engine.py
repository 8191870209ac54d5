"""The asyncio engine over real loopback sockets: what a client and an upstream see on the
wire for each fault, back-pressure, hundreds of connections, and shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import select
import socket
import struct
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from streamslo.proxy import FaultProxy, Faults, ProxyLimits
from streamslo.proxy.config import Direction
from tests.faulty.process import unused_port

pytestmark = pytest.mark.asyncio

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@contextlib.asynccontextmanager
async def upstream(handler: Handler) -> AsyncIterator[str]:
    """A throwaway upstream on 127.0.0.1; yields its ``host:port``."""
    tasks: set[asyncio.Task[None]] = set()

    async def wrapped(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        tasks.add(task)
        try:
            await handler(r, w)
            if w.transport.is_closing():
                # The handler closed: close() sends what is still buffered (a drain() returns
                # below the high-water mark, not at zero); an abort now would drop that tail.
                async with asyncio.timeout(60):
                    await w.wait_closed()
        except (OSError, asyncio.CancelledError, TimeoutError):
            pass
        finally:
            w.transport.abort()

    # The proxy opens one connection here per client at once (hundreds): asyncio's default
    # backlog of 100 would drop the handshakes past it.
    server = await asyncio.start_server(wrapped, "127.0.0.1", 0, backlog=2048)
    try:
        yield f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()
        for t in list(tasks):
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await server.wait_closed()


def sends(payload: bytes) -> Handler:
    """An upstream handler that sends ``payload`` at once, then closes (FIN)."""

    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        w.write(payload)
        await w.drain()
        w.close()

    return handler


async def connect(proxy: FaultProxy) -> socket.socket:
    sock = socket.socket()
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (proxy.address.host, proxy.address.port))
    return sock


async def recv_all(
    sock: socket.socket, timeout: float = 10.0
) -> tuple[bytes, BaseException | None, float]:
    """Read until EOF or an error: (bytes, the error or None, when the end came)."""
    loop = asyncio.get_running_loop()
    buf = bytearray()
    try:
        async with asyncio.timeout(timeout):
            while True:
                try:
                    data = await loop.sock_recv(sock, 65536)
                except OSError as exc:
                    return bytes(buf), exc, time.perf_counter()
                if not data:
                    return bytes(buf), None, time.perf_counter()
                buf += data
    except TimeoutError:
        return bytes(buf), TimeoutError(), time.perf_counter()


def blob(n: int) -> bytes:
    return (hashlib.sha256(b"seed").digest() * (n // 32 + 1))[:n]


async def test_reset_after_n_bytes_delivers_exactly_n_then_rst():
    upstream_saw: list[BaseException | bytes] = []

    async def handler(r, w):
        w.write(blob(10_000))
        await w.drain()
        try:
            upstream_saw.append(await r.read(100))
        except OSError as exc:
            upstream_saw.append(exc)

    async with upstream(handler) as up, FaultProxy(up, Faults(reset_after=4000)) as proxy:
        sock = await connect(proxy)
        data, err, _ = await recv_all(sock)
        sock.close()
        for _ in range(100):
            if upstream_saw:
                break
            await asyncio.sleep(0.01)
    assert data == blob(10_000)[:4000]
    assert isinstance(err, ConnectionResetError)
    assert isinstance(upstream_saw[0], ConnectionResetError)  # both sides get the RST
    assert proxy.stats.resets == 1


async def test_reset_waits_for_a_slow_reader_to_get_its_n_bytes():
    """An RST drops whatever still sits in the send queue: the proxy lets the N bytes leave
    first, even when the client is slow to read them."""
    n = 3 * 1024 * 1024

    async def handler(r, w):
        w.write(blob(2 * n))
        await w.drain()
        await asyncio.sleep(5)

    async with upstream(handler) as up, FaultProxy(up, Faults(reset_after=n)) as proxy:
        sock = await connect(proxy)
        await asyncio.sleep(0.5)  # not reading: the queue towards the client fills
        data, err, _ = await recv_all(sock)
        sock.close()
    assert len(data) == n and data == blob(2 * n)[:n]
    assert isinstance(err, ConnectionResetError)


async def test_upstream_reset_is_passed_to_the_client_without_a_traceback(caplog):
    async def handler(r, w):
        w.write(b"partial")
        await w.drain()
        await asyncio.sleep(0.05)
        w.get_extra_info("socket").setsockopt(
            socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
        )
        w.transport.abort()

    caplog.set_level(logging.DEBUG, logger="streamslo.proxy")
    async with upstream(handler) as up, FaultProxy(up) as proxy:
        sock = await connect(proxy)
        data, err, _ = await recv_all(sock)
        sock.close()
    assert data == b"partial"
    assert isinstance(err, ConnectionResetError)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert not any(r.exc_info for r in caplog.records)


async def test_blackhole_keeps_both_sides_open_and_silent():
    got_from_client = bytearray()
    upstream_closed = asyncio.Event()

    async def handler(r, w):
        w.write(b"a" * 300)
        await w.drain()
        while data := await r.read(1000):
            got_from_client.extend(data)
        upstream_closed.set()

    loop = asyncio.get_running_loop()
    async with upstream(handler) as up, FaultProxy(up, Faults(blackhole_after=100)) as proxy:
        sock = await connect(proxy)
        data, err, _ = await recv_all(sock, timeout=0.5)
        assert data == b"a" * 100 and isinstance(err, TimeoutError)  # silence, not a close
        await loop.sock_sendall(sock, b"hello?")  # read and discarded
        await asyncio.sleep(0.1)
        assert bytes(got_from_client) == b""
        assert proxy.stats.active == 1
        sock.close()  # the client gives up: the proxy ends both sides
        async with asyncio.timeout(5):
            await upstream_closed.wait()
    assert proxy.stats.blackholes == 1


async def test_blackhole_swallows_the_upstream_close():
    async with (
        upstream(sends(b"b" * 50)) as up,
        FaultProxy(up, Faults(blackhole_after=10)) as proxy,
    ):
        sock = await connect(proxy)
        data, err, _ = await recv_all(sock, timeout=0.5)
        sock.close()
    assert data == b"b" * 10
    assert isinstance(err, TimeoutError)


async def test_slow_close_delays_only_the_close():
    async def timing(faults: Faults) -> tuple[float, float, bytes]:
        async with upstream(sends(b"data: [DONE]\n\n")) as up, FaultProxy(up, faults) as proxy:
            loop = asyncio.get_running_loop()
            sock = await connect(proxy)
            t0 = time.perf_counter()
            first = await loop.sock_recv(sock, 100)
            t_data = time.perf_counter()
            rest, err, t_eof = await recv_all(sock)
            sock.close()
            assert err is None
            return t_data - t0, t_eof - t0, first + rest

    data_s, eof_s, body = await timing(Faults(slow_close_s=0.6))
    base_data_s, base_eof_s, base_body = await timing(Faults())
    assert body == base_body == b"data: [DONE]\n\n"
    assert eof_s >= 0.6 - 0.01
    # The delay is the close's alone: data came as early as without the fault, and the close
    # waited ~0.6 s longer after it (relative: a loaded suite once delayed the data 0.8 s).
    assert (eof_s - data_s) - (base_eof_s - base_data_s) >= 0.6 - 0.1
    assert data_s < eof_s - 0.5


async def test_latency_shifts_every_piece_by_the_latency():
    async def handler(r, w):
        for i in range(5):
            w.write(f"{i}".encode())
            await w.drain()
            await asyncio.sleep(0.05)
        w.close()

    async def arrivals(faults: Faults) -> list[float]:
        async with upstream(handler) as up, FaultProxy(up, faults) as proxy:
            loop = asyncio.get_running_loop()
            sock = await connect(proxy)
            t0 = time.perf_counter()
            out = []
            while data := await loop.sock_recv(sock, 100):
                out.extend(time.perf_counter() - t0 for _ in data)
            sock.close()
            return out

    base = await arrivals(Faults())
    late = await arrivals(Faults(latency_s=0.3))
    assert len(base) == len(late) == 5
    for b, lt in zip(base, late, strict=True):
        assert lt - b == pytest.approx(0.3, abs=0.06)
    # gaps are kept: latency is a delay line, not a throttle
    assert late[-1] - late[0] == pytest.approx(base[-1] - base[0], abs=0.06)


async def test_jitter_keeps_every_byte_in_order():
    pieces = [f"<{i:04d}>".encode() for i in range(400)]

    async def handler(r, w):
        for i, p in enumerate(pieces):
            w.write(p)
            await w.drain()
            if i % 20 == 0:
                await asyncio.sleep(0.002)
        w.close()

    async with (
        upstream(handler) as up,
        FaultProxy(up, Faults(latency_s=0.01, jitter_s=0.03, seed=3)) as proxy,
    ):
        sock = await connect(proxy)
        data, err, _ = await recv_all(sock)
        sock.close()
    assert err is None
    assert data == b"".join(pieces)


async def test_bandwidth_caps_throughput():
    async with (
        upstream(sends(b"z" * 6000)) as up,
        FaultProxy(up, Faults(bandwidth=10_000, burst=500)) as proxy,
    ):
        sock = await connect(proxy)
        t0 = time.perf_counter()
        data, err, t_end = await recv_all(sock)
        sock.close()
    assert data == b"z" * 6000 and err is None
    assert t_end - t0 >= (6000 - 500) / 10_000 - 0.01
    assert t_end - t0 < 1.5


async def test_direction_up_delays_the_request_not_the_answer():
    async def handler(r, w):
        data = await r.read(100)
        w.write(b"echo:" + data)
        await w.drain()
        w.close()

    loop = asyncio.get_running_loop()
    async with (
        upstream(handler) as up,
        FaultProxy(up, Faults(latency_s=0.3, direction=Direction.UP)) as proxy,
    ):
        sock = await connect(proxy)
        t0 = time.perf_counter()
        await loop.sock_sendall(sock, b"ping")
        data, err, t_end = await recv_all(sock)
        sock.close()
    assert data == b"echo:ping" and err is None
    assert t_end - t0 == pytest.approx(0.3, abs=0.1)


async def test_half_close_is_forwarded():
    async def handler(r, w):
        request = await r.read()  # until the client's FIN
        w.write(b"got " + request)
        await w.drain()
        w.close()

    loop = asyncio.get_running_loop()
    async with upstream(handler) as up, FaultProxy(up) as proxy:
        sock = await connect(proxy)
        await loop.sock_sendall(sock, b"all of it")
        sock.shutdown(socket.SHUT_WR)
        data, err, _ = await recv_all(sock)
        sock.close()
    assert data == b"got all of it" and err is None


async def test_back_pressure_bounds_memory():
    """A client that does not read: the proxy stops reading the upstream once its queue and
    the socket buffers are full, so the upstream's writes block (no unbounded buffering)."""
    total = 32 * 1024 * 1024
    sent = 0
    all_sent = asyncio.Event()

    async def handler(r, w):
        nonlocal sent
        block = b"q" * 65536
        for _ in range(total // len(block)):
            w.write(block)
            await w.drain()
            sent += len(block)
        all_sent.set()
        w.close()

    limits = ProxyLimits(max_buffer=128 * 1024)
    async with (
        upstream(handler) as up,
        FaultProxy(up, Faults(latency_s=0.001), limits=limits) as proxy,
    ):
        sock = await connect(proxy)
        await asyncio.sleep(1.0)
        stalled_at = sent
        assert not all_sent.is_set()
        data, err, _ = await recv_all(sock, timeout=60)
        sock.close()
    # what the upstream got rid of while nobody read: the proxy's queue plus kernel socket
    # buffers on both sides, a few MiB at most, never the 32 MiB
    assert stalled_at < 12 * 1024 * 1024, stalled_at
    assert proxy.stats.peak_buffered <= limits.max_buffer + limits.read_size
    assert err is None and len(data) == total


async def test_hundreds_of_concurrent_connections():
    async def echo(r, w):
        while data := await r.read(65536):
            w.write(data)
            await w.drain()
        w.close()

    n = 300
    loop = asyncio.get_running_loop()

    async def one(proxy: FaultProxy, i: int) -> bool:
        payload = os.urandom(8192) + str(i).encode()
        sock = await connect(proxy)
        try:
            await loop.sock_sendall(sock, payload)
            sock.shutdown(socket.SHUT_WR)
            data, err, _ = await recv_all(sock, timeout=30)
        finally:
            sock.close()
        return err is None and data == payload

    async with upstream(echo) as up, FaultProxy(up, Faults(latency_s=0.02, jitter_s=0.01)) as proxy:
        results = await asyncio.gather(*(one(proxy, i) for i in range(n)))
        for _ in range(200):
            if proxy.stats.active == 0:
                break
            await asyncio.sleep(0.01)
    assert all(results), f"{results.count(False)} of {n} connections lost bytes: {proxy.stats}"
    assert proxy.stats.connections == n
    assert proxy.stats.active == 0
    assert (
        proxy.stats.bytes_up == proxy.stats.bytes_down == sum(8192 + len(str(i)) for i in range(n))
    )


async def test_hundreds_of_handshakes_while_the_proxy_is_busy_all_complete():
    """The kernel completes handshakes into the listener's accept queue while the proxy's loop
    is busy; past the queue's length it drops them. asyncio's default backlog (100) lost
    connections that way when 300 clients arrived at once: each client believed itself
    connected, and the proxy never accepted it."""
    n = 300
    async with upstream(sends(b"hello")) as up, FaultProxy(up) as proxy:
        socks = []
        try:
            for _ in range(n):
                sock = socket.socket()
                sock.setblocking(False)
                sock.connect_ex((proxy.address.host, proxy.address.port))
                socks.append(sock)
            # Block the loop (no accept runs) while the handshakes complete in the kernel.
            pending, done = list(socks), 0
            # (A SYN past a full queue is dropped, and its retries too while nothing accepts.)
            deadline = time.monotonic() + 2.0
            while pending and time.monotonic() < deadline:
                _, writable, _ = select.select([], pending, [], 0.2)
                for sock in writable:
                    assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
                    pending.remove(sock)
                    done += 1
            assert done == n, f"{n - done} of {n} handshakes did not complete"
            results = await asyncio.gather(*(recv_all(sock) for sock in socks))
        finally:
            for sock in socks:
                sock.close()
    assert all(data == b"hello" and err is None for data, err, _ in results)
    assert proxy.stats.connections == n


async def test_every_nth_connection_is_faulted():
    async with (
        upstream(sends(b"x" * 100)) as up,
        FaultProxy(up, Faults(reset_after=10, every=2)) as proxy,
    ):
        results = []
        for _ in range(4):
            sock = await connect(proxy)
            data, err, _ = await recv_all(sock)
            sock.close()
            results.append((len(data), type(err).__name__ if err else None))
    assert results == [(100, None), (10, "ConnectionResetError")] * 2
    assert proxy.stats.faulted == 2 and proxy.stats.resets == 2


async def test_unreachable_upstream_resets_the_client(caplog):
    async with FaultProxy(f"127.0.0.1:{unused_port()}") as proxy:
        sock = await connect(proxy)
        data, err, _ = await recv_all(sock)
        sock.close()
    assert data == b""
    assert isinstance(err, ConnectionResetError)
    assert proxy.stats.upstream_errors == 1
    assert "unreachable" in caplog.text


async def test_close_ends_open_connections():
    async def silent(r, w):
        await asyncio.sleep(30)

    async with upstream(silent) as up:
        proxy = FaultProxy(up)
        await proxy.start()
        sock = await connect(proxy)
        await asyncio.sleep(0.05)
        assert proxy.stats.active == 1
        t0 = time.perf_counter()
        await proxy.close()
        _, err, t_end = await recv_all(sock, timeout=5)
        sock.close()
    assert not isinstance(err, TimeoutError)  # closed by the proxy, not left hanging
    assert t_end - t0 < 1.0
    assert proxy.stats.active == 0
    with pytest.raises(OSError):
        socket.create_connection((proxy.address.host, proxy.address.port), timeout=1).close()
