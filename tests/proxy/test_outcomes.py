"""Each fault's stream outcome on SSE and WebSocket, end to end: the real client transports
and tracker, through the proxy (in a background thread), against the faulty test server."""

from __future__ import annotations

import socket
import time

import pytest

from streamslo.proxy import Faults, background_proxy
from streamslo.stream.caps import AFTER_DONE_WAIT_S
from streamslo.stream.timing import StreamRecord
from tests.faulty.server import STALL_TIMEOUT_S, TIMED_TTFT_S
from tests.stream.test_faulty_matrix import LIMITS, MAX_TOKENS, run_case

PROTOCOLS = ("sse", "ws")


def through(
    faulty_server, faults: Faults, scenario: str, protocol: str
) -> tuple[StreamRecord, dict[str, int]]:
    with background_proxy(faulty_server.base_url, faults) as proxy:
        rec = run_case(proxy.url, scenario, protocol)
    return rec, proxy.stats.as_dict()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_no_fault_is_transparent(faulty_server, protocol):
    rec, stats = through(faulty_server, Faults(), "ok", protocol)
    assert rec.outcome == "ok", rec.error
    assert rec.tokens == MAX_TOKENS
    assert stats["faulted"] == 0 and stats["bytes_down"] > rec.bytes


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_reset_after_is_truncated(faulty_server, protocol):
    # 400 bytes: past the response head (SSE) or the handshake (WS), inside the stream
    rec, stats = through(faulty_server, Faults(reset_after=400), "timed", protocol)
    assert rec.outcome == "truncated", rec.error
    assert "reset" in rec.error.lower()
    assert 0 < rec.tokens < MAX_TOKENS
    assert stats["resets"] == 1 and stats["bytes_down"] == 400


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_reset_before_any_response_byte_is_connect_error(faulty_server, protocol):
    rec, stats = through(faulty_server, Faults(reset_after=0), "ok", protocol)
    assert rec.outcome == "connect_error", rec.error
    assert stats["resets"] == 1 and stats["bytes_down"] == 0


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_blackhole_after_is_stalled(faulty_server, protocol):
    t0 = time.perf_counter()
    rec, stats = through(faulty_server, Faults(blackhole_after=400), "timed", protocol)
    assert rec.outcome == "stalled", rec.error
    assert 0 < rec.tokens < MAX_TOKENS
    assert rec.open_gap and rec.gap_s[-1] >= STALL_TIMEOUT_S * 0.9
    assert stats["blackholes"] == 1
    assert time.perf_counter() - t0 < LIMITS.request_timeout  # the stall timeout ended it


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_blackhole_before_the_headers_is_stalled(faulty_server, protocol):
    rec, _ = through(faulty_server, Faults(blackhole_after=0), "ok", protocol)
    assert rec.outcome == "stalled", rec.error
    assert rec.status is None


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_latency_shifts_ttft_not_itl(faulty_server, protocol):
    latency = 0.25
    base, _ = through(faulty_server, Faults(), "timed", protocol)
    rec, _ = through(faulty_server, Faults(latency_s=latency), "timed", protocol)
    assert base.outcome == rec.outcome == "ok", rec.error
    # SSE pays the one-way delay once (the answer). WebSocket pays it twice: the client
    # waits for the delayed handshake answer before it sends its request.
    # What holds however loaded the machine: the delay is at least the latency per trip, and
    # the stream's tokens are not each delayed (a throttle would put the latency between every
    # two). The figures within 0.1 s and 0.04 s: tests/bench/test_proxy_timing.py.
    trips = 2 if protocol == "ws" else 1
    assert base.ttft_s >= TIMED_TTFT_S - 0.01
    assert rec.ttft_s >= TIMED_TTFT_S + trips * latency - 0.01
    assert len(rec.gap_s) == MAX_TOKENS - 1
    assert sum(rec.gap_s) < (MAX_TOKENS - 1) * latency  # a delay line: gaps kept


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_jitter_keeps_the_stream_intact(faulty_server, protocol):
    faults = Faults(latency_s=0.01, jitter_s=0.04, seed=11)
    rec, stats = through(faulty_server, faults, "ok_dribble", protocol)
    assert rec.outcome == "ok", rec.error
    assert rec.tokens == MAX_TOKENS and rec.usage_completion_tokens == MAX_TOKENS
    assert stats["faulted"] == 1


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_bandwidth_is_ok_but_slow(faulty_server, protocol):
    faults = Faults(bandwidth=2000, burst=100)
    base, _ = through(faulty_server, Faults(), "ok", protocol)
    rec, stats = through(faulty_server, faults, "ok", protocol)
    assert rec.outcome == "ok", rec.error
    assert stats["faulted"] == 1
    # the bytes before [DONE] cannot arrive faster than the cap allows
    assert rec.e2e_s >= (rec.bytes - 100) / 2000
    assert base.outcome == "ok"  # its speed against the capped one: tests/bench


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_slow_close_is_ok(faulty_server, protocol):
    rec, _ = through(faulty_server, Faults(slow_close_s=1.0), "ok", protocol)
    assert rec.outcome == "ok", rec.error
    assert rec.e2e_s < 1.0  # [DONE] came before the close; the close is not part of the stream


def test_slow_close_on_a_body_framed_by_close(faulty_server):
    """A body that ends with the connection: the stream is ok at [DONE]; the client reads on for
    the close, but no longer than its after-[DONE] wait, so a late close cannot hold it."""
    with background_proxy(faulty_server.base_url, Faults(slow_close_s=2.0)) as proxy:
        t0 = time.perf_counter()
        rec = run_case(proxy.url, "ok_close_delimited", "sse")
        call_s = time.perf_counter() - t0
        deadline = time.monotonic() + 5
        while proxy.stats.slow_closes < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
    assert rec.outcome == "ok", rec.error
    assert rec.e2e_s < 2.0  # the stream ended before the close
    assert AFTER_DONE_WAIT_S <= call_s < 2.0  # the client did not wait for the close
    assert proxy.stats.slow_closes == 1


def test_slow_close_closes_late_on_the_wire(faulty_server):
    """Raw HTTP through the proxy: ``[DONE]`` arrives at once, the close S later."""
    body = b'{"model": "ok", "max_tokens": 4, "stream": true}'
    request = (
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Connection: close\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )
    with (
        background_proxy(faulty_server.base_url, Faults(slow_close_s=0.8)) as proxy,
        socket.create_connection((proxy.address.host, proxy.address.port), timeout=5) as sock,
    ):
        t0 = time.perf_counter()
        sock.sendall(request)
        buf, t_done = b"", None
        while chunk := sock.recv(65536):
            buf += chunk
            if t_done is None and b"[DONE]" in buf:
                t_done = time.perf_counter() - t0
        t_close = time.perf_counter() - t0
    assert t_done is not None and t_done < 0.8  # [DONE] before the close
    assert t_close >= 0.8
    assert buf.endswith(b"0\r\n\r\n")  # the whole chunked body, then the late close
