"""Gunicorn worker kills, with the real parts (the SIGTERM drain: test_drain.py)."""

from __future__ import annotations

import concurrent.futures as cf
import time

import httpx

from tests.server.streams import sse

BODY = {"prompt": "Explain quantum entanglement", "max_tokens": 40, "ignore_eos": True}


def test_gunicorn_naive_workers_killed_mid_stream_fixed_not(serve) -> None:
    naive = serve("--mode", "naive", "--server", "gunicorn", "--timeout", "2")
    fixed = serve("--mode", "fixed", "--server", "gunicorn", "--timeout", "2")
    body = {**BODY, "max_tokens": 64}
    runs = {}
    for s in (naive, fixed):
        with cf.ThreadPoolExecutor(30) as pool:
            runs[s.port] = [pool.submit(sse, s.url, "/v1/stream", body, 60) for _ in range(30)]
    naive_results = [f.result() for f in runs[naive.port]]
    fixed_results = [f.result() for f in runs[fixed.port]]
    cut = [r for r in naive_results if not (r.done and r.finish_reason == "length")]
    assert len(cut) >= 3
    restarts = httpx.get(naive.url + "/debug/workers", timeout=30).json()
    assert restarts["worker_restarts_total"] >= 1 and restarts["worker_aborts_total"] >= 1
    assert "WORKER TIMEOUT" in naive.output()
    assert all(r.done and r.content_chunks == 64 for r in fixed_results)
    assert httpx.get(fixed.url + "/debug/workers").json()["worker_restarts_total"] == 0
    metrics = httpx.get(naive.url + "/metrics", timeout=30).text
    assert "streamslo_worker_restarts_total" in metrics
    assert naive.stop() == 0 and fixed.stop() == 0


def test_trainer_does_not_outlive_a_killed_worker(serve) -> None:
    """A Gunicorn worker killed while its trainer is still starting leaves no trainer behind."""
    import os
    import signal

    import psutil

    s = serve("--fault", "training-contention", "--server", "gunicorn")
    master = psutil.Process(s.proc.pid)

    def trainers() -> list[psutil.Process]:
        return [
            p
            for p in master.children(recursive=True)
            if "streamslo.server.trainer" in " ".join(p.cmdline())
        ]

    (first,) = trainers()
    worker = first.parent()
    assert worker is not None
    os.kill(worker.pid, signal.SIGKILL)
    first.wait(timeout=60)  # gone with the worker (bounds a hang); Gunicorn boots a new one
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not trainers():
        time.sleep(0.2)
    (second,) = trainers()
    assert second.pid != first.pid
