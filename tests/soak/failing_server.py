"""A small streaming server that starts failing mid-run: every stream is ``ok`` until
``--fail-after`` seconds after the server started (or, with ``--fail-after-requests N``, until
it has answered N requests), then a share ``--fail-share`` of the streams is cut after their
first token (``truncated``). Run it with
``python -m tests.soak.failing_server --port N --fail-after 6 --fail-share 0.5``; the first
stdout line is ``listening PORT EPOCH``, EPOCH the moment it started (failures begin at EPOCH +
``--fail-after``); with ``--fail-after-requests`` a line ``failing EPOCH`` follows when they
begin.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time

__all__ = ["main", "serve"]


def _chunk(payload: bytes) -> bytes:
    return f"{len(payload):x}\r\n".encode() + payload + b"\r\n"


def _event(obj: object) -> bytes:
    return _chunk(b"data: " + json.dumps(obj).encode() + b"\n\n")


def _choice(delta: dict[str, str], finish: str | None) -> dict[str, object]:
    return {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


class _Clock:
    """When the failures begin: ``--fail-after`` seconds after the start, or at the request
    after the ``--fail-after-requests``-th (said on stdout when it comes)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.started = time.monotonic()
        self.args = args
        self.requests = 0
        self.failing = False

    def failing_now(self) -> bool:
        self.requests += 1
        if not self.failing:
            if self.args.fail_after_requests is not None:
                self.failing = self.requests > self.args.fail_after_requests
                if self.failing:
                    print(f"failing {time.time()!r}", flush=True)
            else:
                self.failing = time.monotonic() - self.started >= self.args.fail_after
        return self.failing


async def _handle(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    args: argparse.Namespace,
    clock: _Clock,
    rng: random.Random,
) -> None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.decode("latin-1").split("\r\n")[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value.strip())
        body = json.loads(await reader.readexactly(length)) if length else {}
        n = int(body.get("max_tokens") or 8)
        fail = clock.failing_now() and rng.random() < args.fail_share
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
            b"Connection: close\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        for i in range(n):
            await asyncio.sleep(args.itl)
            writer.write(_event(_choice({"content": f"t{i} "}, None)))
            await writer.drain()
            if fail:
                writer.transport.abort()  # cut mid-body: the client sees a truncated stream
                return
        end = _choice({}, "length")
        end["usage"] = {"prompt_tokens": 1, "completion_tokens": n, "total_tokens": n + 1}
        writer.write(_event(end) + _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, ValueError):
        pass
    finally:
        writer.close()


async def serve(args: argparse.Namespace) -> None:
    clock, epoch = _Clock(args), time.time()
    rng = random.Random(args.seed)
    server = await asyncio.start_server(
        lambda r, w: _handle(r, w, args, clock, rng), "127.0.0.1", args.port
    )
    print(f"listening {server.sockets[0].getsockname()[1]} {epoch!r}", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--fail-after", type=float, default=1e9)
    p.add_argument("--fail-after-requests", type=int, default=None)
    p.add_argument("--fail-share", type=float, default=0.0)
    p.add_argument("--itl", type=float, default=0.02)
    p.add_argument("--seed", type=int, default=0)
    asyncio.run(serve(p.parse_args()))


if __name__ == "__main__":
    main()
