"""Any OpenAI-compatible server: the recorded stream shapes of vLLM, TGI, llama.cpp and Ollama
(``server_shapes.py``), each classified by the real tracker under the options the server needs,
at several read splits, and once each over a real loopback socket through the SSE transport."""

from __future__ import annotations

import re
import socket
import socketserver
import threading
import time
from collections.abc import Iterator

import pytest

from streamslo.results.columns import stream_row
from streamslo.stream.timing import StreamRecord
from streamslo.stream.tracker import StreamTracker
from streamslo.transport.sync import ClientLimits, Target, stream_sse
from streamslo.workload.requests import RequestOptions, build_body
from tests.stream.feed import Feed
from tests.workload.server_shapes import MAX_TOKENS, SHAPES, Shape

BY_NAME = {s.name: s for s in SHAPES}


def _opts(shape: Shape) -> RequestOptions:
    return RequestOptions(model="m", max_tokens=MAX_TOKENS, **shape.options)


def _check(shape: Shape, rec: StreamRecord) -> None:
    assert rec.outcome == shape.outcome, (shape.name, rec.error)
    if shape.tokens is not None:
        assert stream_row(rec)["tokens"] == shape.tokens, (
            shape.name
        )  # (usage under --coalesced-chunks)
    if shape.usage is not None:
        assert (rec.usage_prompt_tokens, rec.usage_completion_tokens) == shape.usage, shape.name


def _feed(shape: Shape, size: int) -> StreamRecord:
    rec = StreamRecord(shape.name, "sse", "test", 0.0, 0.0)
    tracker = Feed(StreamTracker(rec, _opts(shape).expectations()))
    tracker.on_response(0.01, 200, "text/event-stream")
    body = shape.body
    for i in range(0, len(body), size):
        tracker.on_sse_bytes(0.02 + i * 1e-6, body[i : i + size])
    tracker.on_eof(0.5, True)
    return rec


@pytest.mark.parametrize("shape", SHAPES, ids=[s.name for s in SHAPES])
@pytest.mark.parametrize("size", [1, 7, 64, 1 << 20])
def test_each_shape_is_classified_right_at_any_split(shape, size):
    _check(shape, _feed(shape, size))


def test_the_shapes_cover_what_the_servers_send():
    bodies = {s.name: s.body for s in SHAPES}
    assert b'"choices":[],"usage"' in bodies["vllm"]  # the usage chunk has empty choices
    assert (
        b'"reasoning_content"' in bodies["vllm_reasoning"]
        and b'"tool_calls"' in bodies["vllm_tool_calls"]
    )
    assert bodies["tgi"].startswith(b"data:{")  # no space after the field name
    assert b'"timings"' in bodies["llamacpp"] and b"[DONE]" not in bodies["llamacpp_no_done"]
    assert b"fp_ollama" in bodies["ollama"] and b'"reasoning"' in bodies["ollama_reasoning"]


# ------------------------------------------------------------------- over a real socket
class _Replay(socketserver.BaseRequestHandler):
    """Answers ``POST /s/<shape>/v1/chat/completions`` with that shape's body, one event per
    HTTP chunk, a few milliseconds apart, then closes."""

    def handle(self) -> None:
        sock: socket.socket = self.request
        data = b""
        while b"\r\n\r\n" not in data:
            more = sock.recv(65536)
            if not more:
                return
            data += more
        head, _, rest = data.partition(b"\r\n\r\n")
        length = int(re.search(rb"(?i)content-length:\s*(\d+)", head).group(1))  # type: ignore[union-attr]
        while len(rest) < length:
            rest += sock.recv(65536)
        name = head.split(b" ", 2)[1].decode().split("/")[2]
        shape = BY_NAME[name]
        sock.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        )
        for event in re.split(rb"(?<=\n\n)", shape.body):
            if event:
                sock.sendall(b"%x\r\n%s\r\n" % (len(event), event))
                time.sleep(0.002)
        sock.sendall(b"0\r\n\r\n")


@pytest.fixture(scope="module")
def replay_url() -> Iterator[str]:
    socketserver.ThreadingTCPServer.allow_reuse_address = True
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Replay)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("shape", SHAPES, ids=[s.name for s in SHAPES])
def test_each_shape_over_a_real_socket(replay_url, shape):
    opts = _opts(shape)
    rec = StreamRecord(shape.name, "sse", "test", time.time(), time.perf_counter())
    stream_sse(
        Target.from_url(f"{replay_url}/s/{shape.name}"),
        opts.path,
        build_body(opts, "hi"),
        StreamTracker(rec, opts.expectations()),
        ClientLimits(stall_timeout=5, request_timeout=10),
    )
    _check(shape, rec)
    if shape.outcome == "ok":
        assert rec.ttft_s is not None and rec.e2e_s is not None and rec.e2e_s >= rec.ttft_s
