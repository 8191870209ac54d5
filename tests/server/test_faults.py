"""Each fault shows its signature; the fixed mode does not. Stalls, backlogs and processes on
real servers; what the app answers (a silent cancel's stream, admission's refusals) in this
process."""

from __future__ import annotations

import concurrent.futures as cf
import socket
import time

import httpx
import psutil

from tests.server.conftest import Server
from tests.server.inprocess import app_client, ws_refusal
from tests.server.streams import sse

BODY = {
    "prompt": "Explain quantum entanglement",
    "stream": True,
    "max_tokens": 20,
    "ignore_eos": True,
    "seed": 1,
}


def _load(server: Server, n: int, body: dict[str, object] = BODY) -> list[object]:
    with cf.ThreadPoolExecutor(n) as pool:
        return list(pool.map(lambda _: sse(server.url, "/v1/stream", body, timeout=60), range(n)))


def _stalls(server: Server) -> dict[str, object]:
    return httpx.get(server.url + "/debug/stalls", timeout=30).json()  # type: ignore[no-any-return]


def _metric(server: Server, name: str) -> float:
    for line in httpx.get(server.url + "/metrics", timeout=30).text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in /metrics")


def test_loop_blocking_generate_and_sync_stall_the_loop_fixed_does_not(serve) -> None:
    naive = serve("--fault", "loop-blocking-generate", "--fault", "per-token-sync")
    fixed = serve("--mode", "fixed")
    for s in (naive, fixed):
        results = _load(s, 8)
        assert all(r.done and r.content_chunks == 20 for r in results)
    ns, fs = _stalls(naive), _stalls(fixed)
    assert ns["stalls"] >= 3
    assert set(ns["by_cause"]) & {"device-sync", "model-compute"}
    # The sampled stack is logged and served. Not the oldest stall's: on a busy machine that
    # can be the whole process descheduled, with nothing to sample ("unknown", no frames).
    attributed = [r for r in ns["recent"] if r["cause"] in {"device-sync", "model-compute"}]
    assert attributed and all(r["frames"] for r in attributed)
    # The fixed server generates off the loop: nothing stalls it in the model or a device sync.
    # (A loaded machine may still deschedule the whole process: a stall of no cause of its own.)
    assert not set(fs["by_cause"]) & {"device-sync", "model-compute"}, fs


def test_per_request_setup_stalls_are_attributed(serve) -> None:
    s = serve("--fault", "per-request-setup")
    _load(s, 4)
    stalls = _stalls(s)
    causes = stalls["by_cause"]
    known = {"tokenizer-load", "tls-context", "pure-python-scoring", "compression", "garbage", "gc"}
    # Concurrent arrivals run their setups back to back: one stall may cover several requests.
    assert set(causes) & known, causes
    assert stalls["blocked_s"] > 0.3


def _stuck_reader(server: Server, max_tokens: int) -> socket.socket:
    """A client that sends a streaming request and then never reads."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", server.port))
    body = f'{{"prompt": "x", "max_tokens": {max_tokens}, "ignore_eos": true}}'.encode()
    sock.sendall(
        b"POST /v1/stream HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n" % len(body) + body
    )
    return sock


def test_unbounded_write_grows_backlog_fixed_bounds_and_times_out(serve) -> None:
    args = ("--token-interval-ms", "2", "--sndbuf", "4096", "--write-timeout", "1.5")
    naive = serve("--fault", "unbounded-write", *args)
    fixed = serve("--mode", "fixed", "--stream-buffer-tokens", "16", *args)
    socks = [_stuck_reader(s, 4000) for s in (naive, fixed)]
    timed_out = 'streamslo_stream_outcomes_total{outcome="write_timeout"} 1.0'
    try:
        # Until the naive backlog has grown and the fixed stream timed out (seconds on a quiet
        # machine; the deadline only bounds a hang), the fixed backlog stays bounded throughout.
        deadline = time.monotonic() + 90
        while True:
            n_backlog = _metric(naive, "streamslo_write_backlog_bytes")
            f_backlog = _metric(fixed, "streamslo_write_backlog_bytes")
            assert f_backlog < 16 * 300, f_backlog  # at most the per-stream buffer
            f_outcomes = httpx.get(fixed.url + "/metrics", timeout=30).text
            if n_backlog > 100_000 and timed_out in f_outcomes:
                break
            assert time.monotonic() < deadline, (n_backlog, f_outcomes)
            time.sleep(0.25)
        assert n_backlog > 100_000, n_backlog  # everything generated waits in memory
        assert timed_out in f_outcomes
        assert "write_timeout" not in httpx.get(naive.url + "/metrics", timeout=30).text
    finally:
        for sock in socks:
            sock.close()


def test_training_contention_runs_a_trainer_process(serve) -> None:
    s = serve("--fault", "training-contention")
    plain = serve("--mode", "fixed")

    def trainers(server: Server) -> list[psutil.Process]:
        return [
            p
            for p in psutil.Process(server.proc.pid).children(recursive=True)
            if "streamslo.server.trainer" in " ".join(p.cmdline())
        ]

    deadline = time.monotonic() + 60  # the trainer starts beside the server (bounds a hang)
    while not trainers(s) and time.monotonic() < deadline:
        time.sleep(0.1)
    (trainer,) = trainers(s)
    assert trainer.nice() == 19  # fixed mode isolates it
    assert trainers(plain) == []
    assert httpx.get(s.url + "/healthz").json()["faults"] == ["training-contention"]
    s.stop()
    trainer.wait(timeout=10)  # gone with its server


def test_silent_cancel_ends_early_with_stop() -> None:
    """What the fault's stream says (the app in this process: its content, not its timing)."""
    with app_client(faults=("silent-cancel",), cancel_after_s=0.5) as tc:
        body = {**BODY, "max_tokens": 100, "stream_options": {"include_usage": True}}
        res = sse(tc, "/v1/stream", body)
    assert res.done and res.error is None  # looks complete...
    assert res.finish_reason == "stop" and res.content_chunks < 100  # ...but is cut
    assert res.usage is not None and res.usage["completion_tokens"] == res.content_chunks


def test_admission_control_429_and_ws_1013() -> None:
    """Admission is the app's: asked of it in this process, two streams held by two threads."""
    with (
        app_client(max_streams=2, token_interval_ms=50) as tc,
        cf.ThreadPoolExecutor(2) as pool,
    ):
        futs = [pool.submit(sse, tc, "/v1/stream", {**BODY, "max_tokens": 60}) for _ in range(2)]
        # Both streams admitted (the server says it is full), however slow the machine: each
        # then runs 3 s (60 tokens, 50 ms apart), the window for the refusals below.
        deadline = time.monotonic() + 60
        while tc.get("/readyz").status_code != 503:
            assert time.monotonic() < deadline and not any(f.done() for f in futs)
            time.sleep(0.05)
        r = tc.post("/v1/stream", json=BODY)
        assert r.status_code == 429 and r.headers["retry-after"]
        assert r.json()["error"]["code"] == 429
        err, code = ws_refusal(tc, '{"prompt": "x"}')
        assert code == 1013 and err is not None and err["error"]["code"] == 429
        assert tc.get("/readyz").status_code == 503
        assert all(f.result().done for f in futs)


def test_a_stall_while_the_loop_waited_in_select_is_the_hosts():
    """A loop sampled waiting in its selector had nothing to run: its lateness is a starved
    CPU's (counted as "host busy", logged at debug), not the server's work."""
    from streamslo.server.watchdog import _idle

    assert _idle(["base_events.py:1910 _run_once", "selectors.py:468 select"])
    assert not _idle(["selectors.py:468 select", "naive.py:80 generate"])
    assert not _idle([])
