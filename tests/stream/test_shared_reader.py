"""The process's one reader under gevent (``streamslo.transport.reactor``): kernel arrival
stamps, a stopped stream leaving the set, and many streams read by one greenlet.

Each case runs in a child process patched by ``gevent.monkey`` (as a Locust worker is), against
a scripted server on a thread here that writes each token at a known time after the request.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
    b"Connection: close\r\n\r\n"
)


def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _token(k: int, last: bool) -> bytes:
    finish = b'"stop"' if last else b"null"
    return _chunk(
        b'data: {"choices":[{"index":0,"delta":{"content":"t%d"},"finish_reason":%s}]}\n\n'
        % (k, finish)
    )


class ScriptedServer:
    """Answers every POST with a head at once, then token k at ``times[k]`` seconds after the
    request was read, then ``[DONE]`` (or holds the stream open with ``hold``)."""

    def __init__(self, times: list[float], hold: bool = False) -> None:
        self.times = times
        self.hold = hold
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self._stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        self.sock.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:  # closed: the test is over
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            buf = b""
            while b"\r\n\r\n" not in buf:
                data = conn.recv(65536)
                if not data:
                    return
                buf += data
            t0 = time.monotonic()
            try:
                conn.sendall(HEAD)
                for k, at in enumerate(self.times, 1):
                    time.sleep(max(0.0, t0 + at - time.monotonic()))
                    conn.sendall(_token(k, k == len(self.times) and not self.hold))
                if self.hold:
                    self._stop.wait(10)
                    return
                conn.sendall(_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
            except OSError:
                return

    def close(self) -> None:
        self._stop.set()
        self.sock.close()


@pytest.fixture
def server(request) -> Iterator[ScriptedServer]:
    times, hold = request.param
    srv = ScriptedServer(times, hold)
    yield srv
    srv.close()


CHILD = r"""
from gevent import monkey

monkey.patch_all()

import json
import sys
import time

import gevent

from streamslo.stream.timing import StreamExpectations, StreamRecord
from streamslo.stream.tracker import StreamTracker
from streamslo.transport.reactor import REACTOR
from streamslo.transport.sync import ClientLimits, SSEConnection, Target

url, mode, streams = sys.argv[1], sys.argv[2], int(sys.argv[3])
target = Target.from_url(url)


def one(_: int) -> StreamRecord:
    rec = StreamRecord("s", "sse", "T", time.time(), time.perf_counter())
    tracker = StreamTracker(rec, StreamExpectations())
    conn = SSEConnection(target, ClientLimits(stall_timeout=5.0), keep_alive=False)
    try:
        conn.request("/v1/chat/completions", b"{}", tracker)
    finally:
        conn.close()
    return rec


def hog() -> None:
    # A greenlet that keeps the process busy without yielding, as a burst of other work
    # would: no read can happen meanwhile.
    gevent.sleep(0.15)
    end = time.perf_counter() + 0.8
    while time.perf_counter() < end:
        pass


if mode == "hog":
    gevent.spawn(hog)
    recs = [one(0)]
elif mode == "kill":
    g = gevent.spawn(one, 0)
    gevent.sleep(0.3)
    g.kill()
    killed = g.value
    recs = []
    left = len(REACTOR._entries)
else:
    jobs = [gevent.spawn(one, i) for i in range(streams)]
    gevent.joinall(jobs)
    recs = [j.value for j in jobs]
out = {
    "recs": [
        {"outcome": r.outcome, "tokens": r.tokens, "ttft": r.ttft_s, "gaps": list(r.gap_s), "error": r.error}
        for r in recs
    ],
    "reads": REACTOR.reads,
    "passes": REACTOR.passes,
    "open": len(REACTOR._entries),
}
print(json.dumps(out))
"""


def run_child(url: str, mode: str, streams: int = 1, **env: str) -> dict:
    full = {k: v for k, v in os.environ.items() if k not in ("STREAMSLO_READ", "STREAMSLO_STAMP")}
    full.update(env)
    res = subprocess.run(
        [sys.executable, "-c", CHILD, url, mode, str(streams)],
        cwd=REPO,
        env=full,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    out: dict = json.loads(res.stdout.strip().splitlines()[-1])
    return out


HOG = ([0.1, 0.25, 1.2], False)


@pytest.mark.skipif(sys.platform != "linux", reason="kernel receive stamps: Linux")
@pytest.mark.parametrize("server", [HOG], indirect=True)
def test_a_token_keeps_its_arrival_time_while_the_process_is_busy(server):
    """Token 2 arrives (0.25 s) while a greenlet holds the process (0.15-0.95 s): with kernel
    stamps its time is its arrival; stamped when read, it is at least the hog's end."""
    url = f"http://127.0.0.1:{server.port}"
    kernel = run_child(url, "hog")
    rec = kernel["recs"][0]
    assert rec["outcome"] == "ok" and rec["tokens"] == 3, rec
    assert kernel["reads"] > 0, "the shared reader did not read"
    assert rec["gaps"][0] < 0.6, f"token 2 stamped {rec['gaps'][0]:.3f} s after token 1"
    read = run_child(url, "hog", STREAMSLO_STAMP="read")
    rec = read["recs"][0]
    assert rec["outcome"] == "ok" and rec["tokens"] == 3, rec
    assert rec["gaps"][0] >= 0.65, f"read-time stamp {rec['gaps'][0]:.3f} s: the hog did not hold"


@pytest.mark.parametrize("server", [([0.05, 0.1], True)], indirect=True)
def test_a_stream_stopped_by_the_load_test_leaves_the_set(server):
    out = run_child(f"http://127.0.0.1:{server.port}", "kill")
    assert out["open"] == 0, f"{out['open']} streams still in the shared reader's set"


@pytest.mark.parametrize("server", [([0.02 * k for k in range(1, 21)], False)], indirect=True)
def test_many_streams_one_reader(server):
    """Forty streams of twenty tokens: every token read, by one greenlet, in fewer passes than
    reads (one pass serves every stream ready at once)."""
    out = run_child(f"http://127.0.0.1:{server.port}", "many", 40)
    assert [r["outcome"] for r in out["recs"]] == ["ok"] * 40, out["recs"][:3]
    assert all(r["tokens"] == 20 for r in out["recs"])
    assert out["open"] == 0
    assert out["reads"] >= 40 * 20 / 4  # tokens may share a read, not all of them
    assert out["passes"] < out["reads"]


@pytest.mark.parametrize("server", [([0.02 * k for k in range(1, 6)], False)], indirect=True)
def test_per_stream_reads_when_asked(server):
    out = run_child(f"http://127.0.0.1:{server.port}", "many", 4, STREAMSLO_READ="per-stream")
    assert [r["outcome"] for r in out["recs"]] == ["ok"] * 4
    assert out["reads"] == 0
