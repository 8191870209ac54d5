"""The plain clients the generator bench compares streamslo with, each the way its users write it.

- Locust ``HttpUser`` + ``requests``: ``post(..., stream=True)`` and ``iter_lines()``;
- Locust ``FastHttpUser``: ``post(..., stream=True)`` and the incremental recipe
  ``response.stream.readline(b"\\n")`` (``iter_content``/``iter_lines`` wait for 1 KB there);
- asyncio ``aiohttp``, ``httpx`` (one shared session/client, no connection cap), a raw
  ``asyncio`` line reader (no JSON: an idealised floor), and ``websockets`` (one connection per
  user, requests one after another, as the suite's WebSocket user does).

The Locust clients are written to a temp locustfile (``locustfile(kind)``); the asyncio ones
run in ``python bench/_clients.py --lib ... --url ... --users N --seconds S --out FILE``. Each
records, per stream, its start, whether ``[DONE]`` came, one ``time.time()`` per token and the
token's emit epoch (the emitter writes it into the chunk's ``id``), dumped as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

__all__ = ["LIBS", "LOCUST_KINDS", "locustfile", "main"]

#: The asyncio clients this module runs.
LIBS = ("raw", "aiohttp", "httpx", "websockets")
#: The Locust clients :func:`locustfile` writes.
LOCUST_KINDS = ("HttpUser", "FastHttpUser")

_LOCUST_COMMON = """
import json
import os
import time

from locust import constant, events, task
from {module} import {base}

_OUT = os.environ["BENCH_OUT"]
_BODY = {{
    "model": "bench",
    "messages": [{{"role": "user", "content": "hello"}}],
    "max_tokens": int(os.environ.get("BENCH_MAX_TOKENS", "100")),
    "stream": True,
}}
_RECS = []


def _dump(**_):
    recs = [
        {{"t0": t0, "done": d, "recv": r, "emit": [float(e) for e in em]}} for t0, d, r, em in _RECS
    ]
    with open(_OUT + ".tmp", "w") as f:
        json.dump(recs, f)
    os.replace(_OUT + ".tmp", _OUT)


events.test_stop.add_listener(_dump)
events.quitting.add_listener(_dump)


class PlainStreamUser({base}):
    wait_time = constant(0)

    @task
    def stream(self):
        t0 = time.time()
        recv, emit, done = [], [], False
        try:
            with self.client.post(
                "/v1/chat/completions", json=_BODY, stream=True, name="stream", catch_response=True
            ) as r:
{read}
                r.success()
        finally:
            _RECS.append((t0, done, recv, emit))
"""

# Per kind: the read loop (no JSON decode: each row's best case), one time.time() per token line.
_READ = {
    "HttpUser": """\
                for line in r.iter_lines():
                    if line.startswith(b"data: {"):
                        recv.append(time.time())
                        emit.append(line[13:30])
                    elif line == b"data: [DONE]":
                        done = True""",
    "FastHttpUser": """\
                readline = r.stream.readline
                while True:
                    line = readline(b"\\n")
                    if not line:
                        break
                    if line.startswith(b"data: {"):
                        recv.append(time.time())
                        emit.append(line[13:30])
                    elif line.startswith(b"data: [DONE]"):
                        done = True""",
}


def locustfile(kind: str) -> str:
    """The text of a bench-only locustfile for ``HttpUser`` or ``FastHttpUser``."""
    module = "locust.contrib.fasthttp" if kind == "FastHttpUser" else "locust"
    return _LOCUST_COMMON.format(base=kind, module=module, read=_READ[kind])


# --------------------------------------------------------------------------- asyncio
Record = tuple[float, bool, list[float], list[float]]


def _event_emit_epoch(data: str | bytes) -> float:
    """What a real client does per event: decode the chunk's JSON and read its fields (here the
    emitter's write epoch from ``id``, and the delta's content)."""
    obj = json.loads(data)
    obj["choices"][0]["delta"].get("content")
    return float(obj["id"])


def _data_line(line: str | bytes, recv: list[float], emit: list[float]) -> bool:
    """One SSE line: a data line is timestamped and its chunk decoded; True for ``[DONE]``."""
    if line[:5] not in (b"data:", "data:"):
        return False
    t = time.time()
    data = line[5:].strip()
    if data in (b"[DONE]", "[DONE]"):
        return True
    emit.append(_event_emit_epoch(data))
    recv.append(t)
    return False


LineSource = Callable[[], contextlib.AbstractAsyncContextManager[AsyncIterator[Any]]]


async def _line_worker(open_lines: LineSource, stop_at: float, recs: list[Record]) -> None:
    """One user of a line-reading client (aiohttp, httpx): streams back to back until
    ``stop_at``; ``open_lines()`` sends one request and yields its body's lines."""
    while time.time() < stop_at:
        t0 = time.time()
        recv: list[float] = []
        emit: list[float] = []
        done = False
        try:
            async with open_lines() as lines:
                async for line in lines:
                    done = _data_line(line, recv, emit) or done
        except Exception:  # a failed stream is recorded as not done
            done = False
        finally:
            recs.append((t0, done, recv, emit))


async def _raw_worker(host: str, port: int, req: bytes, stop_at: float, recs: list[Record]) -> None:
    """The idealised floor: a new connection per stream, ``readline()``, no JSON."""
    while time.time() < stop_at:
        t0 = time.time()
        recv: list[float] = []
        emit: list[float] = []
        done = False
        writer = None
        try:
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(req)
            await reader.readuntil(b"\r\n\r\n")
            while True:
                line = await reader.readline()
                if not line:
                    break
                if line.startswith(b"data: {"):
                    recv.append(time.time())
                    emit.append(float(line[13:30]))
                elif line.startswith(b"data: [DONE]"):
                    done = True
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            recs.append((t0, done, recv, emit))
            if writer is not None:
                writer.close()


async def _ws_worker(url: str, body: str, stop_at: float, recs: list[Record]) -> None:
    """A ``websockets`` asyncio user: one connection, one request after another, each
    message's JSON decoded (its emit epoch kept)."""
    from websockets.asyncio.client import connect

    try:
        async with connect(url, ping_interval=None, max_size=2**24, compression=None) as ws:
            while time.time() < stop_at:
                t0 = time.time()
                recv: list[float] = []
                emit: list[float] = []
                done = False
                try:
                    await ws.send(body)
                    while True:
                        msg = await ws.recv()
                        t = time.time()
                        if msg == "[DONE]":
                            done = True
                            break
                        emit.append(_event_emit_epoch(msg))
                        recv.append(t)
                finally:
                    recs.append((t0, done, recv, emit))
    except Exception:  # a broken connection ends this user; its streams are recorded
        return


async def _run_workers(coros: list[Any], seconds: float) -> None:
    tasks = [asyncio.create_task(c) for c in coros]
    _, pending = await asyncio.wait(tasks, timeout=seconds + 5)
    for t in pending:
        t.cancel()
    await asyncio.gather(*pending, return_exceptions=True)


async def run_clients(
    lib: str, url: str, users: int, seconds: float, max_tokens: int
) -> list[Record]:
    """Run ``users`` users of ``lib`` against ``url`` for ``seconds``; their records."""
    host, _, port = url.removeprefix("http://").partition(":")
    body_obj = {
        "model": "bench",
        "messages": [{"role": "user", "content": "hello"}],
        "max_tokens": max_tokens,
        "stream": True,
    }
    recs: list[Record] = []
    stop_at = time.time() + seconds
    accept = {"Accept": "text/event-stream"}
    if lib == "aiohttp":
        import aiohttp

        # One shared session; no connection cap (aiohttp's default is 100).
        connector = aiohttp.TCPConnector(limit=0)
        timeout = aiohttp.ClientTimeout(total=None, sock_read=30)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            chat = f"{url}/v1/chat/completions"

            @contextlib.asynccontextmanager
            async def aiohttp_lines() -> AsyncIterator[Any]:
                async with session.post(chat, json=body_obj, headers=accept) as resp:
                    yield resp.content

            await _run_workers(
                [_line_worker(aiohttp_lines, stop_at, recs) for _ in range(users)], seconds
            )
    elif lib == "httpx":
        import httpx

        # One shared client; no pool cap (httpx's default is 100 connections).
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
        async with httpx.AsyncClient(
            base_url=url, limits=limits, timeout=httpx.Timeout(30.0)
        ) as client:

            @contextlib.asynccontextmanager
            async def httpx_lines() -> AsyncIterator[Any]:
                async with client.stream(
                    "POST", "/v1/chat/completions", json=body_obj, headers=accept
                ) as resp:
                    yield resp.aiter_lines()

            await _run_workers(
                [_line_worker(httpx_lines, stop_at, recs) for _ in range(users)], seconds
            )
    elif lib == "websockets":
        ws_url = "ws://" + url.removeprefix("http://") + "/v1/ws"
        body = json.dumps(body_obj)
        await _run_workers([_ws_worker(ws_url, body, stop_at, recs) for _ in range(users)], seconds)
    else:
        body_b = json.dumps(body_obj).encode()
        req = (
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"Accept: text/event-stream\r\nContent-Length: {len(body_b)}\r\nConnection: close\r\n\r\n"
        ).encode() + body_b
        await _run_workers(
            [_raw_worker(host, int(port), req, stop_at, recs) for _ in range(users)], seconds
        )
    return recs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="run one asyncio bench client")
    p.add_argument("--lib", choices=LIBS, default="raw")
    p.add_argument("--url", required=True)
    p.add_argument("--users", type=int, required=True)
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--max-tokens", type=int, default=100)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    recs = asyncio.run(run_clients(args.lib, args.url, args.users, args.seconds, args.max_tokens))
    out = [{"t0": t0, "done": d, "recv": r, "emit": em} for t0, d, r, em in recs]
    Path(args.out).write_text(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
