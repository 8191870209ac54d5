"""The asyncio probes against a scripted local server over real loopback sockets."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from streamslo.verify.probes import (
    ProbeRequest,
    assert_stream_ok,
    health_check,
    probe_sse,
    probe_ws,
)


def _chunk(text: str | None = None, finish: str | None = None, usage: int | None = None) -> str:
    obj: dict[str, object] = {
        "id": "x",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [
            {"index": 0, "delta": {"content": text} if text else {}, "finish_reason": finish}
        ],
    }
    if usage is not None:
        obj["usage"] = {"completion_tokens": usage}
    return json.dumps(obj)


def _script(prompt: str, n: int) -> list[str]:
    """The messages the server sends for a prompt: ``ok``, ``stop`` (silent truncation), ``cut``."""
    if prompt == "stop":
        return [_chunk(f"t{i}") for i in range(2)] + [_chunk(None, "stop", 2), "[DONE]"]
    msgs = [_chunk(f"t{i}") for i in range(n)]
    if prompt == "cut":
        return msgs[:3]
    return [*msgs, _chunk(None, "length", n), "[DONE]"]


async def _http(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    length = next(
        (int(h.split(":")[1]) for h in lines if h.lower().startswith("content-length")), 0
    )
    body = json.loads(await reader.readexactly(length)) if length else {}
    if lines[0].startswith("GET /v1/models"):
        payload = b'{"data": [{"id": "probe-model"}]}'
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
            + str(len(payload)).encode()
            + b"\r\nConnection: close\r\n\r\n"
            + payload
        )
    elif body.get("messages", [{}])[0].get("content") == "busy":
        payload = b'{"error": {"message": "overloaded", "type": "server_error", "code": 503}}'
        writer.write(
            b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
            b"Content-Length: "
            + str(len(payload)).encode()
            + b"\r\nConnection: close\r\n\r\n"
            + payload
        )
    else:
        assert (
            body["model"] == "probe-model" and body["stream"] is True and body["ignore_eos"] is True
        )
        prompt = body["messages"][0]["content"]
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        )
        for msg in _script(prompt, body["max_tokens"]):
            data = f"data: {msg}\n\n".encode()
            writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            await writer.drain()
            await asyncio.sleep(0.002)
        if prompt != "cut":
            writer.write(b"0\r\n\r\n")
    await writer.drain()
    writer.close()


async def _ws(conn) -> None:  # type: ignore[no-untyped-def]
    body = json.loads(await conn.recv())
    prompt = body["messages"][0]["content"]
    if prompt == "busy":
        await conn.send(json.dumps({"error": {"message": "busy", "code": 503}}))
        await conn.close(1011)
        return
    for msg in _script(prompt, body["max_tokens"]):
        await conn.send(msg)
        await asyncio.sleep(0.002)
    await conn.close(1011 if prompt == "cut" else 1000)


@pytest_asyncio.fixture
async def server() -> AsyncIterator[str]:
    """One port for both: HTTP through asyncio, /v1/ws through websockets on another port."""
    from websockets.asyncio.server import serve

    http = await asyncio.start_server(_http, "127.0.0.1", 0)
    port = http.sockets[0].getsockname()[1]
    async with serve(_ws, "127.0.0.1", 0) as ws_server:
        ws_port = next(iter(ws_server.sockets)).getsockname()[1]
        yield f"http://127.0.0.1:{port}|http://127.0.0.1:{ws_port}"
    http.close()
    await http.wait_closed()


def _urls(server: str) -> tuple[str, str]:
    http, ws = server.split("|")
    return http, ws


@pytest.mark.asyncio
async def test_sse_ok_and_health_check(server: str) -> None:
    http, _ = _urls(server)
    rec = await probe_sse(http, ProbeRequest(prompt="ok", max_tokens=12))
    assert_stream_ok(rec)
    assert rec.tokens == 12 and len(rec.gap_s) == 11 and rec.ttft_s is not None
    assert rec.connect_s is not None and rec.connect_s <= rec.ttft_s
    assert_stream_ok(await health_check(http))


@pytest.mark.asyncio
async def test_sse_failures_get_their_outcome(server: str) -> None:
    http, _ = _urls(server)
    stop = await probe_sse(http, ProbeRequest(prompt="stop", max_tokens=8))
    assert stop.outcome == "silent_truncation"
    with pytest.raises(AssertionError, match=r"silent_truncation.*finish_reason 'stop'"):
        assert_stream_ok(stop)
    cut = await probe_sse(http, ProbeRequest(prompt="cut", max_tokens=8))
    assert cut.outcome == "truncated" and cut.open_gap
    busy = await probe_sse(http, ProbeRequest(prompt="busy"))
    assert busy.outcome == "http_5xx" and "overloaded" in busy.error
    refused = await probe_sse("http://127.0.0.1:9", ProbeRequest(model="m"))
    assert refused.outcome == "connect_error"


@pytest.mark.asyncio
async def test_ws_outcomes(server: str) -> None:
    _, ws = _urls(server)
    req = ProbeRequest(prompt="ok", max_tokens=6, model="probe-model")
    ok = await probe_ws(ws, req)
    assert_stream_ok(ok)
    assert ok.status == 101 and ok.tokens == 6
    cut = await probe_ws(ws, ProbeRequest(prompt="cut", max_tokens=6, model="m"))
    assert cut.outcome == "truncated" and "1011" in cut.error
    busy = await probe_ws(ws, ProbeRequest(prompt="busy", model="m"))
    assert busy.outcome == "http_5xx"
    assert_stream_ok(await health_check(ws, protocol="ws"))


def test_unknown_protocol_and_endpoint() -> None:
    with pytest.raises(ValueError, match="unknown protocol"):
        asyncio.run(health_check("http://x", protocol="grpc"))
    with pytest.raises(ValueError, match="unknown endpoint"):
        _ = ProbeRequest(endpoint="nope").path


# --------------------------------------------------------------- hostile servers, same caps
from tests.faulty.fixtures import faulty_server  # noqa: E402, F401

HOSTILE = [
    ("ok", "sse", "ok"),
    ("ok", "ws", "ok"),
    ("flood_after_done", "sse", "malformed"),  # 30 MiB after [DONE]: stops at the cap
    ("flood_after_done", "ws", "ok"),  # a WS stream ends at its [DONE]
    ("error_body_flood", "sse", "http_5xx"),  # a flood of an error body is not read whole
    ("deep_json", "sse", "malformed"),
    ("deep_json", "ws", "malformed"),
    ("code_infinity", "sse", "malformed"),
]


@pytest.mark.parametrize(("scenario", "protocol", "outcome"), HOSTILE)
def test_probes_end_hostile_streams_fast_and_classified(
    faulty_server,  # noqa: F811
    scenario,
    protocol,
    outcome,
) -> None:
    """The probes read under the load users' caps: a flood after [DONE] or in an error body
    ends the probe in bounded time with the same outcome a load run gives."""
    import time

    req = ProbeRequest(model=scenario, max_tokens=8, request_timeout_s=20.0, stall_timeout_s=5.0)
    probe = probe_sse if protocol == "sse" else probe_ws
    t0 = time.monotonic()
    rec = asyncio.run(probe(faulty_server.base_url, req))
    assert rec.outcome == outcome, rec.error
    assert time.monotonic() - t0 < 10.0
