"""Known ways a client could hurt the bundled server, each pinned by a test on a real socket:
an unbounded WebSocket read-ahead, a 413 a client still sending its body never read, client
disconnects logged as server errors, a failing prefill that took the whole batch down."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import httpx
import psutil
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.frames import Close, Frame, Opcode
from websockets.streams import StreamReader
from websockets.sync.client import connect

from tests.server.conftest import Server, start_server
from tests.server.streams import ws_refusal

if TYPE_CHECKING:
    from streamslo.server.engine import BatchEngine, StreamItem, TokenStream

LONG = {"prompt": "Explain quantum entanglement", "max_tokens": 500, "ignore_eos": True}
SERVER_ERRORS = ("Exception in ASGI application", "internal error", "Traceback")


@dataclass
class Flood:
    """What a client flooding a streaming WebSocket connection saw, and the server's RSS."""

    code: int | None
    """The close code the server sent."""
    received: list[str]
    elapsed_s: float
    """From the flood's start to the close."""
    growth_mb: float
    """The server process's RSS after the close, less before the flood."""


def flood_a_stream(server: Server, frames: int = 64, frame_kib: int = 256) -> Flood:
    """Start a long stream on a WebSocket, then send ``frames`` requests of ``frame_kib`` KiB
    each on it (16 MiB by default) while it runs, until the server closes."""
    proc = psutil.Process(server.proc.pid)
    frame = json.dumps({"prompt": "y" * (frame_kib << 10)})
    received: list[str] = []
    with connect(server.ws_url, max_size=None) as ws:
        ws.send(json.dumps(LONG))
        received.append(str(ws.recv(timeout=10)))  # the stream began
        rss0 = proc.memory_info().rss

        def flood() -> None:
            try:
                for _ in range(frames):
                    ws.send(frame)
            except (ConnectionClosed, OSError):
                pass  # refused part-way: the point of the test

        sender = threading.Thread(target=flood, daemon=True)
        sender.start()
        t0 = time.monotonic()
        try:
            while True:
                received.append(str(ws.recv(timeout=20)))
        except ConnectionClosed as exc:
            code = exc.rcvd.code if exc.rcvd else None
        elapsed = time.monotonic() - t0
        sender.join(timeout=20)
    return Flood(code, received, elapsed, (proc.memory_info().rss - rss0) / 2**20)


def test_ws_read_ahead_is_bounded(fixed_server: Server) -> None:
    """Frames sent while a stream runs wait in a small bounded queue; past it the connection is
    refused (error frame, close 1008) instead of the worker buffering whatever arrives. (The
    worker's memory under the flood, a figure of a quiet machine, is checked by
    tests/bench/test_server_memory.py: under load the protocol layer reads and drops more
    before the close, and its RSS grew 9.4 MiB where a quiet machine's grows under 8.)"""
    f = flood_a_stream(fixed_server)
    assert f.code == 1008
    assert "[DONE]" not in f.received  # refused at once, not after the 10 s stream
    err = json.loads(f.received[-1])["error"]
    assert err["code"] == 400 and "queued" in err["message"]
    assert f.elapsed_s < 8, f.elapsed_s


def test_413_reaches_a_client_still_sending_its_body(fixed_server: Server) -> None:
    """The server answers an oversized body before reading it; a client still writing the rest
    when that answer comes finishes writing and reads the 413, not a reset (the server lingers:
    half-close, then reads and drops the rest). Before, the server closed at once and the
    client's next write got a reset, so a client slower than the server (a loaded machine)
    never read the 413."""
    body, first = 4 << 20, 512 << 10  # four times the limit; more than the server reads ahead
    with socket.create_connection(("127.0.0.1", fixed_server.port), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/stream HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n" % body + b"x" * first
        )
        sock.recv(1, socket.MSG_PEEK)  # the answer has come: the client is slower than the server
        time.sleep(0.2)  # and slower still: the server has closed (or half-closed) by now
        sent = first
        while sent < body:  # a reset here is the bug: HTTP clients send the body, then read
            sent += sock.send(b"x" * min(65536, body - sent))
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, payload = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413 "), data[:300]
    assert b"connection: close" in head.lower() and json.loads(payload)["error"]["code"] == 413


def test_an_oversized_ws_message_is_1009(fixed_server: Server) -> None:
    """The WebSocket message limit is the protocol layer's (Uvicorn's ``ws_max_size``): a
    socket's test. At the default limit here; test_limits.py reads its error frame."""
    _, got = ws_refusal(fixed_server.ws_url, json.dumps({"prompt": "a" * (2 << 20)}))
    assert got == 1009


@pytest.fixture(scope="module")
def watched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A fixed-mode server whose log and counters the tests read for what they did themselves
    (from an offset, as a difference): one process for them all."""
    s = start_server(["--mode", "fixed"], tmp_path_factory.mktemp("watched"))
    yield s
    s.stop()


def _left_mid_stream(server: Server) -> float:
    """The server's count of SSE streams whose client left (status 499)."""
    text = httpx.get(server.url + "/metrics", timeout=10).text
    for line in text.splitlines():
        if line.startswith('streamslo_requests_total{endpoint="/v1/stream",status="499"}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_client_disconnects_are_not_server_errors(watched: Server) -> None:
    """A client that leaves mid-body, mid-stream (SSE and WebSocket) is routine: nothing is
    logged as an ASGI error and no 5xx is counted."""
    s = watched
    log_at, left_before = len(s.output()), _left_mid_stream(s)
    body = json.dumps(LONG).encode()
    head = (
        b"POST /v1/stream HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", s.port)) as sock:  # leaves mid-body
        sock.sendall(head % len(body) + body[:10])
        time.sleep(0.3)
    with socket.create_connection(("127.0.0.1", s.port)) as sock:  # leaves mid-stream
        sock.sendall(head % len(body) + body)
        assert b" 200 " in sock.recv(4096)
        time.sleep(0.2)
    for abrupt in (False, True):  # WebSocket: a close frame, or just a dropped socket
        with connect(s.ws_url) as ws:
            ws.send(json.dumps(LONG))
            ws.recv(timeout=10)
            if abrupt:
                ws.socket.close()
    deadline = time.monotonic() + 30  # until the server has seen the client leave (a hang)
    while _left_mid_stream(s) < left_before + 1:
        assert time.monotonic() < deadline, httpx.get(s.url + "/metrics", timeout=10).text
        time.sleep(0.1)
    time.sleep(0.5)  # the WebSocket closes are counted too, if they were errors
    assert httpx.get(s.url + "/healthz", timeout=10).status_code == 200
    metrics = httpx.get(s.url + "/metrics", timeout=10).text
    assert "streamslo_http_5xx_total{" not in metrics
    assert _left_mid_stream(s) == left_before + 1  # the one that left mid-stream
    log = s.output()[log_at:]
    assert not [e for e in SERVER_ERRORS if e in log], log


POISON = 7  # a token id; a prompt holding it makes the test model's prefill raise


async def _drain(stream: TokenStream) -> list[StreamItem]:
    items: list[StreamItem] = []
    try:
        async for item in stream:
            items.append(item)
            if item[0] == "token":
                stream.mark_consumed()
            else:
                break
    finally:
        stream.cancel()  # as the writer does: releases admission
    return items


def test_a_failing_prefill_fails_only_its_own_stream() -> None:
    # torch and the model, imported here rather than at collection (seconds in every worker)
    import torch

    from streamslo.server.config import ServerConfig
    from streamslo.server.engine import BatchEngine, GenRequest
    from streamslo.server.model import GPT, GPTConfig, KVCache
    from streamslo.server.tokenizer import Tokenizer

    class _PoisonedPrefillGPT(GPT):
        """The real model, except that prefill raises for a prompt holding :data:`POISON`. No
        real input makes prefill raise today; this injects the failure the engine must
        contain."""

        def prefill(self, cache: KVCache, slot: int, ids: list[int]) -> torch.Tensor:
            if POISON in ids:
                raise RuntimeError("injected prefill failure")
            return super().prefill(cache, slot, ids)

    cfg = ServerConfig.build(token_interval_ms=2, max_streams=8)
    tok = Tokenizer.from_seed(cfg.seed)
    model = _PoisonedPrefillGPT.from_seed(GPTConfig(vocab_size=tok.size), cfg.seed)
    engine = BatchEngine(cfg, model, tok, torch.device("cpu"))
    engine.start()

    def req(ids: list[int]) -> GenRequest:
        return GenRequest(ids, max_tokens=30, temperature=1.0, seed=1, ignore_eos=True)

    async def main() -> list[list[StreamItem]]:
        streams = [
            engine.submit(req([0, 40, 41])),
            engine.submit(req([0, POISON])),
            engine.submit(req([0, 42])),
        ]
        return await asyncio.wait_for(asyncio.gather(*map(_drain, streams)), timeout=20)

    try:
        good1, bad, good2 = asyncio.run(main())
    finally:
        engine.stop()
    for good in (good1, good2):
        assert [k for k, _ in good].count("token") == 30 and good[-1] == ("end", "length")
    assert len(bad) == 1 and bad[0][0] == "error" and "RuntimeError" in bad[0][1]
    assert engine.inflight == 0


def slow_prefill_engine(prefill_s: float, interval_ms: float) -> BatchEngine:
    """A fixed-mode engine (not started) on the CPU whose every prefill takes ``prefill_s``
    longer: a long prompt's prefill, without the prompt."""
    import torch

    from streamslo.server.config import ServerConfig
    from streamslo.server.engine import BatchEngine
    from streamslo.server.model import GPT, GPTConfig, KVCache
    from streamslo.server.tokenizer import Tokenizer

    class _SlowPrefillGPT(GPT):
        def prefill(self, cache: KVCache, slot: int, ids: list[int]) -> torch.Tensor:
            time.sleep(prefill_s)
            return super().prefill(cache, slot, ids)

    cfg = ServerConfig.build(token_interval_ms=interval_ms, max_streams=16)
    tok = Tokenizer.from_seed(cfg.seed)
    model = _SlowPrefillGPT.from_seed(GPTConfig(vocab_size=tok.size), cfg.seed)
    return BatchEngine(cfg, model, tok, torch.device("cpu"))


def test_a_burst_of_prefills_is_spread_over_steps() -> None:
    """Prefills that would take a step past its interval wait for the next steps: 8 arrivals
    whose prefills take 10 ms each, at 20 ms a step, get their first tokens over several steps
    (all 8 in one step made that step 80 ms long, every running stream's gap with it)."""
    from streamslo.server.engine import GenRequest

    engine = slow_prefill_engine(prefill_s=0.01, interval_ms=20)
    posts: list[int] = []  # per post of the engine: how many first tokens it carries
    post = engine._post

    def counting_post(out: list[tuple[TokenStream, StreamItem]]) -> None:
        posts.append(sum(1 for st, item in out if item[0] == "token" and st.produced == 1))
        post(out)

    engine._post = counting_post  # type: ignore[method-assign]
    engine.start()

    async def main() -> list[list[StreamItem]]:
        streams = [
            engine.submit(GenRequest([0, 40 + i], 4, 1.0, i, ignore_eos=True)) for i in range(8)
        ]
        return await asyncio.wait_for(asyncio.gather(*map(_drain, streams)), timeout=30)

    try:
        results = asyncio.run(main())
    finally:
        engine.stop()
    assert all([k for k, _ in r].count("token") == 4 for r in results)
    firsts = [n for n in posts if n]
    assert sum(firsts) == 8 and len(firsts) >= 3, posts


def _ws_handshake(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(
        b"GET /v1/ws HTTP/1.1\r\nhost: x\r\nupgrade: websocket\r\nconnection: Upgrade\r\n"
        b"sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\n\r\n"
    )
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(1)
    assert head.startswith(b"HTTP/1.1 101 ")
    return sock


def _frames(sock: socket.socket) -> list[Frame]:
    """Every frame the server sends until it closes the connection."""
    data = b""
    with contextlib.suppress(TimeoutError, ConnectionResetError):
        while chunk := sock.recv(65536):
            data += chunk
    reader = StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    frames: list[Frame] = []
    parser = Frame.parse(reader.read_exact, mask=False)
    with contextlib.suppress(EOFError):
        while True:
            try:
                next(parser)
            except StopIteration as done:
                frames.append(done.value)
                parser = Frame.parse(reader.read_exact, mask=False)
    return frames


@pytest.mark.parametrize("then_close", [False, True])
def test_a_text_frame_that_is_not_utf8_is_refused_with_1007(
    watched: Server, then_close: bool
) -> None:
    """Found by the WS fuzz: the refusal raised inside the protocol (and asyncio dropped the
    connection with a traceback) when the client's close frame came in the same read."""
    s = watched
    log_at = len(s.output())
    with _ws_handshake(s.port) as sock:
        data = Frame(Opcode.TEXT, b'{"prompt": "\xff\xfe"}').serialize(mask=True)
        if then_close:
            data += Frame(Opcode.CLOSE, Close(1000, "").serialize()).serialize(mask=True)
        sock.sendall(data)
        frames = _frames(sock)
    close = Close.parse(frames[-1].data)
    if then_close:
        assert close.code == 1000  # the client's close came first: nothing left to refuse
    else:
        assert json.loads(frames[0].data)["error"]["code"] == 400 and close.code == 1007
    time.sleep(0.3)
    log = s.output()[log_at:]
    assert not [e for e in (*SERVER_ERRORS, "Fatal error") if e in log], log


def test_a_broken_frame_gets_an_error_frame_and_1002(fixed_server: Server) -> None:
    with _ws_handshake(fixed_server.port) as sock:
        sock.sendall(Frame(Opcode.TEXT, b'{"prompt": "x"}').serialize(mask=False))  # clients mask
        frames = _frames(sock)
    err = json.loads(frames[0].data)["error"]
    assert err["code"] == 400 and "mask" in err["message"]
    assert Close.parse(frames[-1].data).code == 1002


def test_every_step_posts_at_the_same_point_of_its_interval() -> None:
    """The engine's output phase: a step posts at the peak work of the last steps (the longest
    step's, an admitting one's prefills included), so the step after a long one posts at the
    same point of its interval, not earlier; never before its own work ends; at most at the
    cap unless the work itself is longer; a peak that leaves the window is forgotten."""
    from streamslo.server.engine import _OutputPhase

    phase = _OutputPhase(cap=0.015, window=4)
    # Decode-only steps of 2 ms, then one that admitted streams (10 ms with their prefills).
    assert [phase.after(w) for w in (0.002, 0.002, 0.010)] == [0.002, 0.002, 0.010]
    # The next three steps post 10 ms in as well: the new streams' first gap is a whole interval.
    assert [phase.after(0.002) for _ in range(3)] == [0.010] * 3
    # Four steps on, the long step has left the window.
    assert phase.after(0.003) == 0.003
    # A step never posts before its work ends, and the cap bounds the wait, not the work.
    assert phase.after(0.004) == 0.004
    assert phase.after(0.030) == 0.030
    assert phase.after(0.002) == 0.015
    phase.clear()
    assert phase.after(0.002) == 0.002
