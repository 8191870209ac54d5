"""Self-tests of the faulty server: it emits the bytes each scenario promises.

Two kinds of check: byte-level ones on raw sockets (chunked bodies left unfinished, line
endings, close codes), and a small reference client that implements docs/outcomes.md and must reach
:data:`EXPECTED` for every (scenario, protocol) pair, with the assumed client settings.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import re
import socket
import statistics
import struct
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosed, InvalidMessage, InvalidStatus
from websockets.sync.client import connect as ws_connect

from tests.faulty import fixtures as _fixtures
from tests.faulty.constants import TIMER_BOUNDED
from tests.faulty.process import FaultyServer
from tests.faulty.scenarios import HOSTILE, MIXES, TIMED, client_timeouts
from tests.faulty.server import (
    ENDLESS_S,
    EXPECTED,
    OUTCOMES,
    REQUEST_TIMEOUT_S,
    SCENARIOS,
    SHORT_PAUSE_S,
    STALL_S,
    STALL_TIMEOUT_S,
    TIMED_ITL_S,
    TIMED_TTFT_S,
    UNSETTLED,
    WS_HANDSHAKE_SCENARIOS,
    token_text,
)

__all__: list[str] = []

faulty_server = _fixtures.faulty_server

N = 6  # max_tokens used by these tests
MAX_LINE = 1 << 20  # the reference client's cap on one SSE line / WS message


def _body(scenario: str | None, n: int = N, *, chat: bool = True) -> dict[str, Any]:
    body: dict[str, Any] = {
        "stream": True,
        "max_tokens": n,
        "ignore_eos": True,
        "stream_options": {"include_usage": True},
    }
    if scenario is not None:
        body["model"] = scenario
    if chat:
        body["messages"] = [{"role": "user", "content": "say something"}]
    else:
        body["prompt"] = "say something"
    return body


# --- raw HTTP -----------------------------------------------------------------------------


@dataclass
class Raw:
    """A raw HTTP exchange read to EOF (or an error / the timeout)."""

    data: bytes = b""
    error: str | None = None  # "reset" | "timeout" | None (EOF)
    times: list[tuple[float, int]] = field(default_factory=list)  # (t, bytes so far)
    ended: float = 0.0  # when EOF / the error / the timeout came

    @property
    def head(self) -> bytes:
        return self.data.split(b"\r\n\r\n", 1)[0]

    @property
    def body(self) -> bytes:
        return self.data.split(b"\r\n\r\n", 1)[1]

    @property
    def status(self) -> int:
        return int(self.head.split(b" ")[1])

    def header(self, name: str) -> str | None:
        for line in self.head.split(b"\r\n")[1:]:
            key, _, value = line.decode("latin-1").partition(":")
            if key.strip().lower() == name:
                return value.strip()
        return None


def raw_post(
    port: int,
    path: str,
    body: dict[str, Any],
    *,
    timeout: float = 5.0,
    max_bytes: int = 1 << 24,
) -> Raw:
    payload = json.dumps(body).encode()
    request = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
    ).encode() + payload
    out = Raw()
    t0 = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(request)
        pieces: list[bytes] = []
        size = 0
        while size < max_bytes:
            try:
                piece = sock.recv(65536)
            except ConnectionResetError:
                out.error = "reset"
                break
            except TimeoutError:
                out.error = "timeout"
                break
            if not piece:
                break
            pieces.append(piece)
            size += len(piece)
            out.times.append((time.monotonic() - t0, size))
        out.ended = time.monotonic() - t0
        out.data = b"".join(pieces)
    return out


def dechunk(body: bytes) -> tuple[bytes, list[bytes], bool, bool]:
    """(payload, chunks, complete: 0-chunk seen, partial: a chunk cut short)."""
    chunks: list[bytes] = []
    pos = 0
    while True:
        eol = body.find(b"\r\n", pos)
        if eol == -1:
            return b"".join(chunks), chunks, False, pos < len(body)
        size = int(body[pos:eol], 16)
        if size == 0:
            return b"".join(chunks), chunks, True, False
        start = eol + 2
        if len(body) < start + size + 2:
            chunks.append(body[start:])
            return b"".join(chunks), chunks, False, True
        chunks.append(body[start : start + size])
        pos = start + size + 2


# --- a reference SSE parser and docs/outcomes.md judge ------------------------------------------------


class SseParser:
    """The HTML Living Standard's event-stream parsing, incremental."""

    def __init__(self) -> None:
        self.buffer = b""
        self.data: list[str] = []
        self.name = ""
        self.events: list[str] = []
        self.names: list[str] = []

    def feed(self, data: bytes, *, eof: bool = False) -> None:
        self.buffer += data
        while True:
            match = re.search(rb"\r\n|\r|\n", self.buffer)
            lone_cr_at_end = (
                match is not None and match.group() == b"\r" and match.end() == len(self.buffer)
            )
            if match is None or (lone_cr_at_end and not eof):
                if len(self.buffer) > MAX_LINE:
                    raise ValueError("line too long")
                return
            line = self.buffer[: match.start()].decode("utf-8", "replace")
            self.buffer = self.buffer[match.end() :]
            self._line(line)

    def _line(self, line: str) -> None:
        if not line:
            if self.data:
                self.events.append("\n".join(self.data))
                self.names.append(self.name or "message")
            self.data = []
            self.name = ""
            return
        if line.startswith(":"):
            return
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            self.data.append(value)
        elif name == "event":
            self.name = value


class Judge:
    """Applies docs/outcomes.md to one stream's chunks (ignore_eos and usage asked for)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.content = 0
        self.finish: str | None = None
        self.usage: int | None = None
        self.done = False
        self.empty_finish = False  # an empty text on the finish chunk: a token if usage says so

    def chunk(self, text: str, name: str = "message") -> str | None:
        """Feed one event/frame; an outcome if it decides one."""
        if self.done:
            return "malformed"
        if text == "[DONE]":
            self.done = True
            return None
        if name == "error":
            return "error_event" if self.content or not getattr(self, "ws", False) else "http_5xx"
        if not text.strip():
            return None  # an empty event / message: a keep-alive
        try:
            obj = json.loads(text)
        except ValueError:
            return "malformed"
        if not isinstance(obj, dict):
            return "malformed"
        if "error" in obj or obj.get("object") == "error":
            err = obj["error"] if isinstance(obj.get("error"), dict) else obj
            code = int(err.get("code") or 500)
            if self.content == 0 and getattr(self, "ws", False):
                return "http_4xx" if code < 500 else "http_5xx"
            return "error_event"
        for choice in obj.get("choices") or ():
            finish = choice.get("finish_reason")
            # A token position: any text field, an empty one too (a held-back token), but not
            # the role announcement nor a delta with no text field.
            role = False
            if isinstance(choice.get("text"), str):
                fields = [choice["text"]]
            else:
                delta = choice.get("delta") or {}
                role = "role" in delta
                fields = [
                    delta[k]
                    for k in ("content", "reasoning_content")
                    if isinstance(delta.get(k), str)
                ]
            if any(fields):
                self.content += 1
            elif role:
                pass  # the role announcement
            elif finish:
                self.empty_finish = True  # the finish chunk with no text
            elif fields:
                self.content += 1
            if finish:
                self.finish = finish
        if obj.get("usage"):
            self.usage = obj["usage"]["completion_tokens"]
        return None

    def verdict(self) -> str:
        if not self.done:
            return "truncated"
        server_count = (
            self.usage if self.usage is not None else (self.n if self.finish == "length" else None)
        )
        if self.empty_finish and server_count is not None and self.content < server_count:
            self.content += 1
        if self.finish is None:
            return "malformed"
        if self.content > self.n or (self.usage is not None and self.content > self.usage):
            return "malformed"
        if self.finish != "length" or (self.usage is not None and self.usage < self.n):
            return "silent_truncation"
        if (self.usage is not None and self.content < self.usage) or (
            self.usage is None and self.content < self.n
        ):
            return "silent_truncation"
        return "ok"


def _timeouts(scenario: str) -> tuple[float, float]:
    """(stall timeout, the request's deadline on the monotonic clock) for ``scenario``."""
    stall, request = client_timeouts(scenario)
    return stall, time.monotonic() + request


def judge_sse(port: int, scenario: str, n: int = N) -> str:
    """One SSE request with stall/request timeouts, judged by docs/outcomes.md."""
    payload = json.dumps(_body(scenario, n)).encode()
    request = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
    ).encode() + payload
    stall_timeout, deadline = _timeouts(scenario)
    judge = Judge(n)
    parser = SseParser()
    raw = b""
    head: bytes | None = None
    chunked = True
    progress = time.monotonic()  # the stall clock: the request, the head, then each token
    with socket.create_connection(("127.0.0.1", port), timeout=stall_timeout) as sock:
        sock.sendall(request)
        eof = False
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return "timeout"
            stall_left = progress + stall_timeout - time.monotonic()
            if stall_left <= 0:
                return "stalled"
            sock.settimeout(min(stall_left, left))
            try:
                piece = sock.recv(65536)
            except TimeoutError:
                return "timeout" if time.monotonic() >= deadline else "stalled"
            except ConnectionResetError:
                if head is None and not raw:
                    return "connect_error"
                return "truncated" if not judge.done else judge.verdict()
            if not piece:
                if head is None and not raw:
                    return "connect_error"
                eof = True
            raw += piece
            if head is None:
                if b"\r\n\r\n" not in raw:
                    if eof:
                        return "connect_error"
                    continue
                head, raw = raw.split(b"\r\n\r\n", 1)
                progress = time.monotonic()
                fake = Raw(head + b"\r\n\r\n")
                if fake.status >= 400:
                    return "http_4xx" if fake.status < 500 else "http_5xx"
                if "text/event-stream" not in (fake.header("content-type") or ""):
                    return "malformed"
                chunked = fake.header("transfer-encoding") == "chunked"
            if chunked:
                body, _, complete, _ = dechunk(raw)
            else:
                body, complete = raw, eof
            # Simple, not fast: parse and judge the whole body so far, afresh each read.
            tokens_before = judge.content
            parser, judge = SseParser(), Judge(n)
            try:
                parser.feed(body, eof=complete or eof)
            except ValueError:
                return "malformed"
            for event, name in zip(parser.events, parser.names, strict=True):
                outcome = judge.chunk(event, name)
                if outcome is not None:
                    return outcome
            if judge.content > tokens_before:
                progress = time.monotonic()
            if complete or eof:
                return judge.verdict() if complete else "truncated"


def judge_ws(server: FaultyServer, scenario: str, n: int = N) -> str:
    """One WebSocket request with stall/request timeouts, judged by docs/outcomes.md."""
    stall_timeout, deadline = _timeouts(scenario)
    by_path = scenario in WS_HANDSHAKE_SCENARIOS
    url = server.ws_url_for(scenario) if by_path else server.ws_url
    judge = Judge(n)
    judge.ws = True  # type: ignore[attr-defined]
    try:
        ws = ws_connect(url, open_timeout=stall_timeout, close_timeout=1, max_size=MAX_LINE)
    except InvalidStatus as exc:
        return "http_4xx" if exc.response.status_code < 500 else "http_5xx"
    except TimeoutError:
        return "stalled"
    except (InvalidMessage, OSError):
        return "connect_error"
    with ws:
        ws.send(json.dumps(_body(None if by_path else scenario, n)))
        progress = time.monotonic()  # the stall clock: the request frame, then each token
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return "timeout"
            stall_left = progress + stall_timeout - time.monotonic()
            if stall_left <= 0:
                return "stalled"
            try:
                message = ws.recv(timeout=min(stall_left, left))
            except TimeoutError:
                return "timeout" if time.monotonic() >= deadline else "stalled"
            except ConnectionClosed as exc:
                if exc.sent is not None and exc.sent.code == 1009 and not exc.rcvd_then_sent:
                    return "malformed"  # we refused a message over MAX_LINE
                code = exc.rcvd.code if exc.rcvd is not None else 1006
                if judge.content == 0 and code in (1008, 1009, 1013):
                    return "http_4xx"
                if judge.content == 0 and code == 1011:
                    return "http_5xx"
                return "truncated"
            if isinstance(message, bytes):
                return "malformed"
            tokens_before = judge.content
            outcome = judge.chunk(message)
            if outcome is not None:
                return outcome
            if judge.content > tokens_before:
                progress = time.monotonic()
            if judge.done:
                return judge.verdict()


# --- the catalogue ------------------------------------------------------------------------


def test_catalogue_is_complete_and_consistent() -> None:
    assert next(iter(SCENARIOS)) == "ok"
    for (name, proto), outcome in EXPECTED.items():
        assert name in SCENARIOS and proto in ("sse", "ws")
        assert outcome in OUTCOMES and outcome != "cancelled"
    for name, sc in SCENARIOS.items():
        assert (name, "sse") in EXPECTED
        assert sc.summary and sc.sse and sc.ws
        assert (name, "ws") in EXPECTED or any(k[0] == name for k in UNSETTLED)
    for proto in ("sse", "ws"):
        covered = {o for (_, p), o in EXPECTED.items() if p == proto}
        assert covered == set(OUTCOMES) - {"cancelled"}, proto
    # Every delay sits comfortably on one side of the assumed client settings.
    assert STALL_S >= 2 * STALL_TIMEOUT_S
    assert ENDLESS_S >= 2 * REQUEST_TIMEOUT_S
    assert SHORT_PAUSE_S <= STALL_TIMEOUT_S / 2
    assert TIMED_TTFT_S + 32 * TIMED_ITL_S < REQUEST_TIMEOUT_S / 2
    # Every scenario a timer decides runs with the timeouts above; the others' clients get
    # ample ones (no timer decides them: their outcome is read from what the server sends).
    assert set(SCENARIOS) >= TIMER_BOUNDED and TIMED >= TIMER_BOUNDED
    for (name, _), outcome in EXPECTED.items():
        if outcome in ("stalled", "timeout"):
            assert name in TIMED and client_timeouts(name) == (STALL_TIMEOUT_S, REQUEST_TIMEOUT_S)


def test_fixture_and_models(faulty_server: FaultyServer) -> None:
    assert faulty_server.process.poll() is None
    with httpx.Client(base_url=faulty_server.base_url) as client:
        models = client.get("/v1/models").json()
        assert [m["id"] for m in models["data"]] == list(SCENARIOS)
        assert client.get("/health").json() == {"status": "ok"}
        unknown = client.post("/v1/chat/completions", json=_body("no-such-model"))
        assert unknown.status_code == 404
        assert unknown.json()["error"]["code"] == 404


# --- every expected outcome, by a reference client ---------------------------------------------

# The reference client re-parses the whole body on every read (simple, not fast): the hostile
# cases (30 MiB floods, 64 KiB heads) are for the real client (tests/stream/test_faulty_matrix.py);
# their bytes are checked raw below.
_CASES = sorted(k for k in EXPECTED if k[0] not in HOSTILE)


@pytest.mark.parametrize(("scenario", "proto"), _CASES, ids=[f"{s}-{p}" for s, p in _CASES])
def test_reference_client_sees_expected_outcome(
    faulty_server: FaultyServer, scenario: str, proto: str
) -> None:
    # endless needs n >= 8: its n - 1 tokens, each under the stall timeout, outlast the deadline.
    n = 8 if scenario == "endless" else N
    if proto == "sse":
        outcome = judge_sse(faulty_server.port, scenario, n)
    else:
        outcome = judge_ws(faulty_server, scenario, n)
    assert outcome == EXPECTED[(scenario, proto)]


# --- SSE bytes --------------------------------------------------------------------------------


def _events(body: bytes) -> list[str]:
    parser = SseParser()
    parser.feed(body, eof=True)
    return parser.events


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions", "/v1/stream"])
def test_ok_exact_chunks_on_every_endpoint(faulty_server: FaultyServer, path: str) -> None:
    chat = path.endswith("chat/completions")
    raw = raw_post(
        faulty_server.port, path, _body(None if path == "/v1/stream" else "ok", chat=chat)
    )
    assert raw.status == 200 and raw.error is None
    assert raw.header("transfer-encoding") == "chunked"
    payload, chunks, complete, _ = dechunk(raw.body)
    assert complete
    events = _events(payload)
    assert events[-1] == "[DONE]"
    objs = [json.loads(e) for e in events[:-1]]
    assert len(objs) == N
    for i, obj in enumerate(objs):
        choice = obj["choices"][0]
        if chat:
            assert obj["object"] == "chat.completion.chunk"
            assert choice["delta"]["content"] == token_text(i)
        else:
            assert obj["object"] == "text_completion"
            assert choice["text"] == token_text(i)
        assert choice["finish_reason"] == ("length" if i == N - 1 else None)
    assert objs[-1]["usage"]["completion_tokens"] == N
    assert all(c.startswith(b"data: ") and c.endswith(b"\n\n") for c in chunks)


def test_keep_alive_carries_several_requests(faulty_server: FaultyServer) -> None:
    with httpx.Client(base_url=faulty_server.base_url) as client:
        for name in ("ok", "http_429", "ok_crlf", "json_body", "ok"):
            with client.stream("POST", "/v1/chat/completions", json=_body(name)) as resp:
                resp.read()
        assert resp.status_code == 200
        assert resp.text.endswith("data: [DONE]\n\n")


def test_path_prefix_wins_over_model(faulty_server: FaultyServer) -> None:
    raw = raw_post(faulty_server.port, "/s/http_503/v1/chat/completions", _body("ok"))
    assert raw.status == 503 and raw.header("retry-after") == "1"
    assert json.loads(raw.body)["error"]["code"] == 503
    assert raw_post(faulty_server.port, "/s/nope/v1/completions", _body(None)).status == 404


def test_crlf_and_cr_line_endings(faulty_server: FaultyServer) -> None:
    crlf, _, ok1, _ = dechunk(
        raw_post(faulty_server.port, "/v1/completions", _body("ok_crlf")).body
    )
    cr, _, ok2, _ = dechunk(raw_post(faulty_server.port, "/v1/completions", _body("ok_cr")).body)
    assert ok1 and ok2
    assert b"\r\n" in crlf and b"\r" not in crlf.replace(b"\r\n", b"")
    assert b"\n" not in crlf.replace(b"\r\n", b"")
    assert b"\r" in cr and b"\n" not in cr
    texts = [json.loads(e)["choices"][0]["text"] for e in _events(crlf)[:-1]]
    assert texts == [json.loads(e)["choices"][0]["text"] for e in _events(cr)[:-1]]
    assert texts == [token_text(i) for i in range(N)]


def test_sse_fields_and_multiline(faulty_server: FaultyServer) -> None:
    fields, _, _, _ = dechunk(
        raw_post(faulty_server.port, "/v1/completions", _body("ok_sse_fields")).body
    )
    for needle in (b"\n: ", b"\nevent: message\n", b"\nid: 1\n", b"retry: 3000\n", b"\ndata:{"):
        assert needle in fields
    multi, _, _, _ = dechunk(
        raw_post(faulty_server.port, "/v1/completions", _body("ok_multiline_data")).body
    )
    blocks = [b for b in multi.split(b"\n\n") if b]
    assert all(b.count(b"data: ") == 2 for b in blocks[:-1]) and blocks[-1] == b"data: [DONE]"
    assert [json.loads(e)["choices"][0]["text"] for e in _events(multi)[:-1]] == [
        token_text(i) for i in range(N)
    ]


def test_dribble_splits_lines_and_crlf(faulty_server: FaultyServer) -> None:
    raw = raw_post(faulty_server.port, "/v1/chat/completions", _body("ok_dribble", n=2))
    payload, chunks, complete, _ = dechunk(raw.body)
    assert complete and all(1 <= len(c) <= 3 for c in chunks)
    assert any(a.endswith(b"\r") and b.startswith(b"\n") for a, b in itertools.pairwise(chunks))
    assert _events(payload)[-1] == "[DONE]"


def test_close_delimited_body(faulty_server: FaultyServer) -> None:
    raw = raw_post(faulty_server.port, "/v1/chat/completions", _body("ok_close_delimited"))
    assert raw.error is None and raw.header("connection") == "close"
    assert raw.header("transfer-encoding") is None and raw.header("content-length") is None
    assert raw.body.endswith(b"data: [DONE]\n\n")


def test_truncations_leave_the_chunked_body_unfinished(faulty_server: FaultyServer) -> None:
    port = faulty_server.port
    closed = raw_post(port, "/v1/chat/completions", _body("truncated_close"))
    payload, _, complete, partial = dechunk(closed.body)
    assert closed.error is None and not complete and not partial
    assert len(_events(payload)) == N // 2 and b"[DONE]" not in payload

    cut = raw_post(port, "/v1/chat/completions", _body("truncated_mid_chunk"))
    _, _, complete, partial = dechunk(cut.body)
    assert cut.error is None and not complete and partial

    reset = raw_post(port, "/v1/chat/completions", _body("truncated_reset"))
    assert reset.error == "reset"

    clean = raw_post(port, "/v1/chat/completions", _body("close_1000_midway"))
    payload, _, complete, _ = dechunk(clean.body)
    assert complete and b"[DONE]" not in payload and len(_events(payload)) == N // 2


def test_nothing_at_all(faulty_server: FaultyServer) -> None:
    port = faulty_server.port
    fin = raw_post(port, "/v1/chat/completions", _body("close_immediately"))
    assert fin.data == b"" and fin.error is None
    rst = raw_post(port, "/v1/chat/completions", _body("reset_immediately"))
    assert rst.data == b"" and rst.error == "reset"
    silent = raw_post(port, "/v1/chat/completions", _body("no_headers"), timeout=1.2)
    assert silent.data == b"" and silent.error == "timeout"


def test_bodies_that_are_not_streams(faulty_server: FaultyServer) -> None:
    port = faulty_server.port
    js = raw_post(port, "/v1/chat/completions", _body("json_body"))
    assert js.status == 200 and js.header("content-type") == "application/json"
    assert json.loads(js.body)["object"] == "chat.completion"
    err = raw_post(port, "/v1/chat/completions", _body("http_429"))
    assert err.status == 429 and err.header("retry-after") == "1"
    assert json.loads(err.body) == {
        "error": {"message": "faulty: too many requests", "type": "rate_limit_error", "code": 429}
    }
    after, _, _, _ = dechunk(raw_post(port, "/v1/chat/completions", _body("data_after_done")).body)
    events = _events(after)
    assert events[-2] == "[DONE]" and json.loads(events[-1])["choices"]


def test_endless_line_has_no_newline(faulty_server: FaultyServer) -> None:
    raw = raw_post(
        faulty_server.port, "/v1/chat/completions", _body("endless_line"), max_bytes=2 << 20
    )
    payload, _, complete, _ = dechunk(raw.body)
    assert not complete and len(payload) > 1 << 20
    assert payload.startswith(b'data: {"id":"xxx') and b"\n" not in payload and b"\r" not in payload


def test_timed_schedule(faulty_server: FaultyServer) -> None:
    raw = raw_post(faulty_server.port, "/v1/chat/completions", _body("timed", n=8))
    # Arrival time of each content chunk: the first read that holds its bytes.
    payload, _, _, _ = dechunk(raw.body)
    head = len(raw.head) + 4
    stamps = []
    for i in range(8):
        end = raw.data.find(f'"{token_text(i)}"'.encode()) + 1
        stamps.append(next(t for t, size in raw.times if size >= end))
    assert head > 0 and len(_events(payload)) == 9
    assert TIMED_TTFT_S - 0.01 <= stamps[0] <= TIMED_TTFT_S + 0.25
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    assert abs(statistics.median(gaps) - TIMED_ITL_S) < 0.025


def test_stall_midway_is_silent_then_hangs_up(faulty_server: FaultyServer) -> None:
    raw = raw_post(faulty_server.port, "/v1/chat/completions", _body("stall_midway"), timeout=5)
    assert raw.error is None  # the server hung up by itself, after the silence
    payload, _, complete, _ = dechunk(raw.body)
    assert not complete and len(_events(payload)) == N // 2
    assert raw.times[-1][0] < 0.5  # the chunks came at once, then the silence
    assert STALL_S - 0.1 <= raw.ended < STALL_S + 1


# --- WebSocket frames -------------------------------------------------------------------------


def _ws_request(server: FaultyServer, scenario: str, n: int = N) -> tuple[list[Any], Any]:
    """Frames received for one request, and the ConnectionClosed that ended them (or None)."""
    frames: list[Any] = []
    with ws_connect(server.ws_url, close_timeout=1) as ws:
        ws.send(json.dumps(_body(scenario, n)))
        try:
            while True:
                frame = ws.recv(timeout=5)
                frames.append(frame)
                if frame == "[DONE]":
                    return frames, None
        except ConnectionClosed as exc:
            return frames, exc


def test_ws_ok_twice_on_one_connection(faulty_server: FaultyServer) -> None:
    with ws_connect(faulty_server.ws_url, close_timeout=1) as ws:
        for name in ("ok", "ok_role_empty", "ok_dribble"):
            ws.send(json.dumps(_body(name)))
            frames = []
            while (frame := ws.recv(timeout=5)) != "[DONE]":
                frames.append(json.loads(frame))
            texts = [
                f["choices"][0]["delta"].get("content")
                for f in frames
                if f["choices"] and f["choices"][0]["delta"].get("content")
            ]
            assert texts == [token_text(i) for i in range(N)], name
        ws.send(json.dumps(_body("ok", chat=False)))
        assert json.loads(ws.recv(timeout=5))["choices"][0]["text"] == token_text(0)


@pytest.mark.parametrize(
    ("scenario", "content", "code", "error_code"),
    [
        ("close_1011_midway", N // 2, 1011, None),
        ("close_1000_midway", N // 2, 1000, None),
        ("no_done", N, 1000, None),
        ("error_midstream", N // 2, 1011, 500),
        ("error_first_500", 0, 1011, 500),
        ("error_first_400", 0, 1008, 400),
        ("http_400", 0, 1008, 400),
        ("http_429", 0, 1013, 429),
        ("http_503", 0, 1011, 503),
        ("ws_close_1013", 0, 1013, None),
        ("ws_close_1009", 0, 1009, None),
        ("truncated_close", N // 2, None, None),
        ("truncated_reset", N // 2, None, None),
    ],
)
def test_ws_close_codes(
    faulty_server: FaultyServer, scenario: str, content: int, code: int | None, error_code: Any
) -> None:
    frames, closed = _ws_request(faulty_server, scenario)
    assert closed is not None and "[DONE]" not in frames
    errors = [json.loads(f)["error"] for f in frames if "error" in json.loads(f)]
    assert len(frames) - len(errors) == content
    assert [e["code"] for e in errors] == ([error_code] if error_code else [])
    assert (closed.rcvd.code if closed.rcvd else None) == code


def test_ws_binary_and_non_json_frames(faulty_server: FaultyServer) -> None:
    frames, closed = _ws_request(faulty_server, "ws_binary_frame")
    assert closed is None and [type(f) for f in frames].count(bytes) == 1
    frames, closed = _ws_request(faulty_server, "bad_json")
    assert closed is None and sum(1 for f in frames if f.startswith("{not") or "{not" in f) == 1


def test_ws_handshake_refusals(faulty_server: FaultyServer) -> None:
    for name, status in (("ws_refuse_403", 403), ("ws_refuse_500", 500)):
        with pytest.raises(InvalidStatus) as info:
            ws_connect(faulty_server.ws_url_for(name), open_timeout=2).close()
        assert info.value.response.status_code == status
        assert json.loads(info.value.response.body)["error"]["code"] == status
    with pytest.raises((InvalidMessage, OSError)):
        ws_connect(faulty_server.ws_url_for("close_immediately"), open_timeout=2).close()
    with pytest.raises(TimeoutError):
        ws_connect(faulty_server.ws_url_for("no_headers"), open_timeout=0.5).close()


def _raw_ws(port: int, body: dict[str, Any]) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(
        (
            "GET /v1/ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        ).encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(1)
    assert head.startswith(b"HTTP/1.1 101 ")
    payload = json.dumps(body).encode()
    mask = os.urandom(4)
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    sock.sendall(struct.pack("!BBH", 0x81, 0x80 | 126, len(payload)) + mask + masked)
    return sock


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        piece = sock.recv(size - len(data))
        assert piece, "EOF"
        data += piece
    return data


def test_ws_dribble_fragments_messages(faulty_server: FaultyServer) -> None:
    with _raw_ws(faulty_server.port, _body("ok_dribble", n=1)) as sock:
        first, second = _recv_exactly(sock, 2)
        assert first == 0x01  # FIN clear, opcode text: a fragmented message starts
        assert second <= 16
        _recv_exactly(sock, second)
        first, second = _recv_exactly(sock, 2)
        assert first & 0x0F == 0x0  # a continuation frame


def test_ws_endless_line_announces_64_mib(faulty_server: FaultyServer) -> None:
    with _raw_ws(faulty_server.port, _body("endless_line")) as sock:
        first, second = _recv_exactly(sock, 2)
        assert (first, second) == (0x81, 127)
        (length,) = struct.unpack("!Q", _recv_exactly(sock, 8))
        assert length == 64 * 1024 * 1024
        assert _recv_exactly(sock, 7) == b'{"id":"'


# --- hostile bytes ----------------------------------------------------------------------------


def test_hostile_heads_are_sent_as_promised(faulty_server: FaultyServer) -> None:
    from tests.faulty.scenarios_hostile_heads import HEAD_FAULTS

    for name, (sse_head, _ws_head) in HEAD_FAULTS.items():
        raw = raw_post(
            faulty_server.port, f"/s/{name}/v1/chat/completions", _body(None), timeout=0.5
        )
        assert raw.data == sse_head, name


def test_hostile_body_bytes(faulty_server: FaultyServer) -> None:
    port = faulty_server.port
    raw = raw_post(port, "/s/negative_chunk/v1/chat/completions", _body(None), timeout=0.5)
    assert b"\r\n-6\r\nabcdef\r\n" in raw.body
    raw = raw_post(port, "/s/chunk_size_prefixed/v1/chat/completions", _body(None), timeout=0.5)
    assert raw.body.startswith(b"0x")
    raw = raw_post(port, "/s/deep_json/v1/chat/completions", _body(None), timeout=2.0)
    assert b"data: " + b"[" * 100_000 + b"]" * 100_000 in raw.data
    raw = raw_post(port, "/s/code_infinity/v1/chat/completions", _body(None), timeout=2.0)
    assert b'"code": Infinity' in raw.body
    raw = raw_post(
        port, "/s/flood_after_done/v1/chat/completions", _body(None), timeout=5.0, max_bytes=1 << 20
    )
    assert b"data: [DONE]" in raw.body and raw.body.endswith(b"x" * 1000)


def test_drip_sends_one_byte_per_interval(faulty_server: FaultyServer) -> None:
    payload = json.dumps(_body(None)).encode()
    request = (
        "POST /s/head_drip/v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
        f"Content-Length: {len(payload)}\r\n\r\n"
    ).encode() + payload
    got = b""
    with socket.create_connection(("127.0.0.1", faulty_server.port), timeout=1.0) as sock:
        sock.sendall(request)
        end = time.monotonic() + 1.05
        while (left := end - time.monotonic()) > 0:
            sock.settimeout(left)
            try:
                got += sock.recv(100)
            except TimeoutError:
                break
    assert got == b"HTTP/1.1 200 OK"[: len(got)]
    assert 6 <= len(got) <= 14  # about one byte per 100 ms


def test_mix_cycles_through_every_hostile_case(faulty_server: FaultyServer) -> None:
    mix = MIXES["mix_hostile"]
    assert set(HOSTILE) <= set(mix) and mix[0] == "ok"
    seen = []
    with httpx.Client(base_url=faulty_server.base_url) as client:
        for _ in range(len(mix)):
            r = client.get("/s/mix_hostile/health")
            seen.append(r.status_code)
    assert seen == [200] * len(mix)
