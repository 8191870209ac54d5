"""Small real-socket clients for the tests: read an SSE or WebSocket stream to its end."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import httpx
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect


@dataclass
class StreamResult:
    status: int
    chunks: list[dict[str, Any]] = field(default_factory=list)
    done: bool = False
    error: str | None = None

    @property
    def text(self) -> str:
        out = []
        for c in self.chunks:
            for ch in c.get("choices", []):
                out.append(ch.get("delta", {}).get("content") or ch.get("text") or "")
        return "".join(out)

    @property
    def content_chunks(self) -> int:
        n = 0
        for c in self.chunks:
            for ch in c.get("choices", []):
                if ch.get("delta", {}).get("content") or ch.get("text"):
                    n += 1
        return n

    @property
    def finish_reason(self) -> str | None:
        for c in reversed(self.chunks):
            for ch in c.get("choices", []):
                if ch.get("finish_reason"):
                    return str(ch["finish_reason"])
        return None

    @property
    def usage(self) -> dict[str, int] | None:
        for c in reversed(self.chunks):
            if c.get("usage"):
                return dict(c["usage"])
        return None


def sse(url: str, path: str, body: dict[str, Any], timeout: float = 30) -> StreamResult:
    """POST and read the SSE body to its end; a transport error is recorded, not raised."""
    try:
        return _sse(url, path, body, timeout)
    except httpx.HTTPError as exc:
        return StreamResult(0, error=type(exc).__name__)


def _sse(url: str, path: str, body: dict[str, Any], timeout: float) -> StreamResult:
    with httpx.stream("POST", url + path, json=body, timeout=timeout) as r:
        res = StreamResult(r.status_code)
        if r.status_code != 200:
            r.read()
            res.error = r.text
            return res
        assert r.headers["content-type"].startswith("text/event-stream")
        try:
            for line in r.iter_lines():
                if not line.startswith("data: "):
                    assert line == "", line
                    continue
                data = line[len("data: "):]
                assert not res.done, "data after [DONE]"
                if data == "[DONE]":
                    res.done = True
                else:
                    res.chunks.append(json.loads(data))
        except httpx.HTTPError as exc:
            res.error = type(exc).__name__
    return res


def ws_requests(ws_url: str, bodies: list[dict[str, Any]], timeout: float = 30) -> list[StreamResult]:
    """Send each body in turn on one connection, reading each to its [DONE]."""
    results = []
    with connect(ws_url, open_timeout=timeout) as ws:
        for body in bodies:
            res = StreamResult(101)
            ws.send(json.dumps(body))
            try:
                while True:
                    msg = ws.recv(timeout=timeout)
                    if msg == "[DONE]":
                        res.done = True
                        break
                    res.chunks.append(json.loads(msg))
            except ConnectionClosed as exc:
                res.error = f"closed {exc.rcvd.code if exc.rcvd else None}"
            results.append(res)
            if not res.done:
                break
    return results
