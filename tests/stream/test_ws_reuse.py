"""A WebSocket connection carries one request after another (docs/protocol.md); a server that closes
it normally after a [DONE] must not turn the next request into a truncation."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest
from websockets.asyncio.server import serve

from streamslo.stream.timing import StreamRecord
from streamslo.stream.tracker import StreamTracker
from streamslo.transport.sync import ClientLimits, Target, WSConnection
from streamslo.workload.requests import RequestOptions, build_body


def _chunk(i: int, last: bool) -> str:
    choice = {
        "index": 0,
        "delta": {"content": f" t{i}"},
        "finish_reason": "length" if last else None,
    }
    obj: dict = {"choices": [choice]}
    if last:
        obj["usage"] = {"completion_tokens": 3}
    return json.dumps(obj)


@pytest.fixture
def ws_server():
    """close_after_done=True: the server closes 1000 right after each [DONE]."""
    state = {"connections": 0, "close_after_done": True}
    ready = threading.Event()
    loop = asyncio.new_event_loop()

    async def handler(ws):
        state["connections"] += 1
        async for msg in ws:
            json.loads(msg)
            for i in range(3):
                await ws.send(_chunk(i, i == 2))
            await ws.send("[DONE]")
            if state["close_after_done"]:
                await ws.close(1000)
                return

    async def main():
        async with serve(handler, "127.0.0.1", 0) as server:
            state["port"] = server.sockets[0].getsockname()[1]
            ready.set()
            await state.setdefault("stop", asyncio.Event()).wait()

    def run():
        asyncio.set_event_loop(loop)
        state["stop"] = asyncio.Event()
        loop.run_until_complete(main())

    th = threading.Thread(target=run, daemon=True)
    th.start()
    assert ready.wait(10)
    yield state
    loop.call_soon_threadsafe(state["stop"].set)
    th.join(10)
    loop.close()


def _requests(state, n: int) -> list[StreamRecord]:
    opts = RequestOptions(max_tokens=3)
    conn = WSConnection(
        Target.from_url(f"http://127.0.0.1:{state['port']}"),
        "/v1/ws",
        ClientLimits(stall_timeout=2, request_timeout=5),
    )
    out = []
    try:
        for i in range(n):
            rec = StreamRecord(f"r{i}", "ws", "T", time.time(), time.perf_counter())
            conn.request(build_body(opts, "hi"), StreamTracker(rec, opts.expectations()))
            out.append(rec)
            time.sleep(0.05 if i % 2 else 0.0)  # sometimes the close has arrived, sometimes not
    finally:
        conn.close()
    return out


def test_server_closing_after_each_done_is_not_a_truncation(ws_server):
    recs = _requests(ws_server, 6)
    assert [r.outcome for r in recs] == ["ok"] * 6, [r.error for r in recs]
    assert ws_server["connections"] == 6


def test_kept_open_connection_is_reused(ws_server):
    ws_server["close_after_done"] = False
    recs = _requests(ws_server, 4)
    assert [r.outcome for r in recs] == ["ok"] * 4
    assert ws_server["connections"] == 1
    assert recs[0].connect_s is not None and all(r.connect_s is None for r in recs[1:])
