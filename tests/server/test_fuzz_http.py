"""hypothesis over raw HTTP/1.1 requests on a real socket: methods, targets, headers, content
types, bodies (wrong types, huge numbers, unicode, deep nesting, raw bytes), framings (length,
chunked, split writes), under Uvicorn and once under Gunicorn. Every answer is below 500, every
refusal carries the error body, and afterwards the server is alive with no worker lost."""

from __future__ import annotations

import json
import socket
import time
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.server.fuzz import FuzzServer, assert_survived
from tests.server.streams import read_response

GENERATE = ["/v1/chat/completions", "/v1/completions", "/v1/stream"]
ROUTES = [
    *GENERATE,
    "/v1/models",
    "/v1/ws",
    "/healthz",
    "/readyz",
    "/metrics",
    "/openapi.json",
    "/debug/stalls",
    "/debug/workers",
    "/",
    "/v1/",
    "/v1/stream/",
    "/v1/stream?x=1",
    "/%ff%fe",
    "/\xe9t\xe9",
    "/../../etc/passwd",
    "*",
    "http://other.example/v1/models",
    "/v1/stream#frag",
    "//v1//stream",
]
METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD", "TRACE", "BREW", "post"]
CONTENT_TYPES = [
    "application/json",
    "application/json; charset=utf-8",
    "APPLICATION/JSON",
    "application/vnd.api+json",
    "text/plain",
    "multipart/form-data; boundary=x",
    "application/x-www-form-urlencoded",
    "",
    ";",
    "application/json;;;",
    "\xe9/\xe9",
]
_TOKEN = st.text(
    st.sampled_from("abcdefghijklmnopqrstuvwxyz-_0123456789!#$%&'*+.^`|~"), min_size=1, max_size=20
)
# Any byte but CR and LF in a header value (those would only end the header early).
_VALUE = st.binary(max_size=80).map(lambda b: b.replace(b"\r", b"").replace(b"\n", b""))
_FRAMING_HEADERS = {"content-length", "transfer-encoding", "connection"}

_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=10**18)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=40)
)
_json = st.recursive(
    _scalars,
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=10), c, max_size=4),
    max_leaves=12,
)
_messages = (
    st.lists(
        st.fixed_dictionaries(
            {"role": st.sampled_from(["user", "system"]) | _json},
            optional={"content": st.text(max_size=60) | _json},
        ),
        max_size=3,
    )
    | _json
)
_request = st.fixed_dictionaries(
    {},
    optional={
        "prompt": st.text(max_size=80) | _json,
        "messages": _messages,
        "max_tokens": st.integers(-5, 12) | _json,
        "temperature": st.floats(-1, 3) | _json,
        "seed": st.integers() | _json,
        "stream": st.booleans() | _json,
        "ignore_eos": st.booleans() | _json,
        "n": st.integers(0, 3) | _json,
        "stream_options": st.fixed_dictionaries({"include_usage": st.booleans() | _json}) | _json,
        "model": st.text(max_size=20) | _json,
    },
)
VALID = {
    "model": "m",
    "messages": [{"role": "user", "content": "hi"}],
    "prompt": "hi",
    "max_tokens": 3,
    "stream": True,
    "stream_options": {"include_usage": True},
}
# A valid request with one field replaced: reaches each field's own check.
_mutated = st.builds(
    lambda k, v: {**VALID, k: v},
    st.sampled_from([*VALID, "temperature", "seed", "ignore_eos", "n", "max_completion_tokens"]),
    _json,
)
BODIES = (
    _request.map(lambda d: json.dumps(d).encode())
    | _mutated.map(lambda d: json.dumps(d).encode())
    | _mutated.map(lambda d: json.dumps(d).encode())
    | _json.map(lambda v: json.dumps(v).encode())
    | st.integers(1, 200_000).map(lambda n: b"[" * n)  # nested deeper than any parser recurses
    | st.integers(1, 50_000).map(lambda n: b'{"prompt": ' + b"[" * n + b'"x"' + b"]" * n + b"}")
    | st.binary(max_size=300)
    | st.text(max_size=100).map(lambda t: t.encode("utf-8", "surrogatepass"))
    | st.just(b"")
)


def _chunked(body: bytes, cuts: list[int]) -> bytes:
    out, prev = b"", 0
    for cut in [*sorted({c % (len(body) + 1) for c in cuts}), len(body)]:
        if cut > prev:
            out += b"%x\r\n%s\r\n" % (cut - prev, body[prev:cut])
            prev = cut
    return out + b"0\r\n\r\n"


@st.composite
def http_requests(draw: st.DrawFn) -> tuple[str, bytes]:
    """One request's bytes (always ``connection: close``, consistent framing) and its method."""
    # Mostly what the generation routes take, so most inputs reach the request parser.
    if draw(st.integers(0, 3)):
        method, target, ctype = "POST", draw(st.sampled_from(GENERATE)), "application/json"
    else:
        method = draw(st.sampled_from(METHODS) | _TOKEN.map(str.upper))
        target = draw(st.sampled_from(ROUTES))
        ctype = draw(st.none() | st.sampled_from(CONTENT_TYPES))
    version = draw(st.sampled_from([b"HTTP/1.1", b"HTTP/1.1", b"HTTP/1.0"]))
    headers = [(b"host", draw(st.sampled_from([b"x", b"[", b"", b"127.0.0.1:1", b"\xff"])))]
    if ctype is not None:
        headers.append((b"content-type", ctype.encode("utf-8")))
    for name, value in draw(st.lists(st.tuples(_TOKEN, _VALUE), max_size=4)):
        if name.lower() not in _FRAMING_HEADERS:
            headers.append((name.encode(), value))
    body = draw(BODIES) if method != "GET" or draw(st.booleans()) else b""
    framing = draw(st.sampled_from(["length", "chunked", "none"]) if body else st.just("none"))
    if framing == "length" or (framing == "none" and body):
        headers.append((b"content-length", str(len(body)).encode()))
        payload = body
    elif framing == "chunked":
        headers.append((b"transfer-encoding", b"chunked"))
        payload = _chunked(body, draw(st.lists(st.integers(0, 10**6), max_size=4)))
    else:
        payload = b""
    headers.append((b"connection", b"close"))
    head = b"%s %s %s\r\n" % (method.encode(), target.encode("utf-8"), version)
    head += b"".join(b"%s: %s\r\n" % h for h in headers) + b"\r\n"
    return method, head + payload


def _send(port: int, data: bytes, splits: list[int]) -> tuple[Any, bool]:
    """The response, and whether the whole request could be sent (the server may answer and
    close before reading a body it refuses; its answer can then be lost to the reset)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        t0 = time.monotonic()
        prev = 0
        try:
            for cut in [*sorted({s % (len(data) + 1) for s in splits}), len(data)]:
                sock.sendall(data[prev:cut])
                prev = cut
            complete = True
        except (BrokenPipeError, ConnectionResetError):
            complete = False
        res = read_response(sock, t0, timeout=30)
        # Interim "100 Continue" answers to an Expect header come first.
        while 100 <= res.status < 200 and res.status != 101:
            rest = res.body
            head, _, body = rest.partition(b"\r\n\r\n")
            res.status = int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/1.1 ") else 0
            res.body = body
        return res, complete


@given(req=http_requests(), splits=st.lists(st.integers(0, 10**6), max_size=3))
@settings(
    max_examples=300,
    deadline=None,
    database=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
    ],
)
def test_any_http_request_answers_below_500(
    fuzz_server: FuzzServer, req: tuple[str, bytes], splits: list[int]
) -> None:
    method, data = req
    res, complete = _send(fuzz_server.server.port, data, splits)
    fuzz_server.sent["http-raw"] += 1
    if res.status == 0 and not complete:
        fuzz_server.answers[0] += 1  # refused before its body was read; the answer was reset
        return
    assert res.status != 0, data[:200]  # an answer, not a dropped connection
    if res.status >= 400 and method != "HEAD":
        body = res.body
        if "transfer-encoding: chunked" in res.head.lower():
            body = body.split(b"\r\n", 1)[1].rsplit(b"\r\n0\r\n", 1)[0]
        fuzz_server.check_error_body(res.status, body)
    else:
        fuzz_server.answers[res.status] += 1
        assert res.status < 500


def test_the_server_survived_the_http_fuzz(fuzz_server: FuzzServer) -> None:
    assert fuzz_server.sent["http-raw"] >= 300
    assert_survived(fuzz_server)
