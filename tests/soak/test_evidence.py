"""The target's evidence over time: --metrics-url scrapes, the bundled server's processes,
and the series drift reads from them."""

from __future__ import annotations

import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from streamslo.figures.drift import collect_series
from streamslo.results.layout import Layout
from streamslo.run.evidence import ServerEvidence
from streamslo.runfiles.server_samples import latest_server_rss


def _serve(routes: dict[str, bytes]):
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            body = routes.get(self.path)
            self.send_response(200 if body is not None else 404)
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def fake_server():
    servers = []

    def start(routes):
        s = _serve(routes)
        servers.append(s)
        return f"http://127.0.0.1:{s.server_address[1]}"

    yield start
    for s in servers:
        s.shutdown()
        s.server_close()


def test_another_servers_metrics_url_is_scraped_with_its_process_memory(fake_server, tmp_path):
    url = fake_server(
        {
            "/metrics": b"# HELP x\nprocess_resident_memory_bytes 1.048576e+08\nprocess_open_fds 12\nvllm:num_requests_running 3\n"
        }
    )
    ev = ServerEvidence(url, tmp_path, metrics_url=url + "/metrics")
    assert ev.probe() is None  # not the bundled server
    for _ in range(3):
        ev.scrape_once()
    layout = Layout(tmp_path)
    lines = [json.loads(x) for x in layout.server_metrics.read_text().splitlines()]
    assert len(lines) == 3 and lines[0]["metrics"]["vllm:num_requests_running"] == 3.0
    assert latest_server_rss(layout) == 104857600.0
    series = collect_series(tmp_path, [])
    assert (
        series["server_rss_mb"][2] == [100.0] * 3 and series["server_open_files"][2] == [12.0] * 3
    )


def test_the_bundled_servers_processes_are_measured_here(fake_server, tmp_path):
    workers = {
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "server": "uvicorn",
        "worker_restarts_total": 2,
    }
    url = fake_server(
        {
            "/healthz": json.dumps({"server": "streamslo-target", "mode": "fixed"}).encode(),
            "/metrics": b"streamslo_tokens_total 5\n",
            "/debug/workers": json.dumps(workers).encode(),
            "/debug/stalls": b"{}",
        }
    )
    ev = ServerEvidence(url, tmp_path, interval=0.05)
    assert ev.probe()["mode"] == "fixed"
    assert ev.metrics_url == url + "/metrics"  # found by itself
    ev.start()
    try:
        deadline = threading.Event()
        deadline.wait(0.5)
    finally:
        ev.stop()
    layout = Layout(tmp_path)
    res = [json.loads(x) for x in layout.server_resources.read_text().splitlines()]
    assert res, "no process sample"
    # psutil on this process (the "server" here): its memory, threads and files, and restarts.
    assert (
        res[-1]["rss_bytes"] > 10 * 2**20 and res[-1]["threads"] >= 2 and res[-1]["open_files"] >= 3
    )
    assert res[-1]["worker_restarts"] == 2 and res[-1]["processes"] >= 1
    assert layout.server_workers.exists() and layout.server_stalls.exists()


def test_no_metrics_url_and_not_bundled_scrapes_nothing(fake_server, tmp_path):
    url = fake_server({})
    ev = ServerEvidence(url, tmp_path)
    assert ev.probe() is None
    ev.start()
    ev.stop()
    assert not Layout(tmp_path).server_dir.exists()
    assert latest_server_rss(Layout(tmp_path)) is None
