"""The server's side, from its own metrics: Prometheus text through prometheus_client's parser,
strict JSON scrapes, counters as increases over the run, and the streaming series (vLLM, TGI,
SGLang, the bundled server) charted over the run's time axis and tabled in the report."""

from __future__ import annotations

import json
import math
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from streamslo.reports.load import load_server_evidence
from streamslo.run.evidence import ServerEvidence, json_value, parse_prometheus_typed
from tests.reports.conftest import START, write_run


def _strict(line: str) -> dict:
    return json.loads(line, parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))


TEXT = """\
# HELP req_total Requests.
# TYPE req_total counter
req_total{path="/v1 chat",note="a \\"quoted\\" {brace}"} 3 1700000000000
# TYPE temp gauge
temp NaN
odd_untyped +Inf
neg_untyped -Inf
# TYPE lat histogram
lat_bucket{le="0.5"} 1
lat_bucket{le="+Inf"} 4
lat_sum 2.5
lat_count 4
"""


def test_prometheus_text_through_prometheus_clients_parser() -> None:
    values, types = parse_prometheus_typed(TEXT)
    key = 'req_total{note="a \\"quoted\\" {brace}",path="/v1 chat"}'  # labels sorted, escaped
    # the sample's own timestamp (ms) is not its value (the old parser read 1.7e12 here)
    assert values[key] == 3.0
    assert math.isnan(values["temp"]) and values["odd_untyped"] == math.inf
    assert values["neg_untyped"] == -math.inf
    assert values['lat_bucket{le="+Inf"}'] == 4.0 and values["lat_sum"] == 2.5
    assert types["req_total"] == "counter" and types["temp"] == "gauge"
    assert types["odd_untyped"] == "unknown" and types["lat_bucket"] == "histogram"
    assert [json_value(values[k]) for k in ("temp", "odd_untyped", "neg_untyped")] == [
        "NaN",
        "+Inf",
        "-Inf",
    ]


def test_a_broken_line_costs_only_that_line() -> None:
    values, _ = parse_prometheus_typed("good 1\nbad{ 2\nalso_good 3\n")
    assert values == {"good": 1.0, "also_good": 3.0}


class _Changing:
    """A metrics endpoint whose counters rise by one per scrape (a stand-in for any server's
    /metrics: the evidence thread is what is under test)."""

    def __init__(self) -> None:
        self.n = 0
        self.lock = threading.Lock()

    def text(self) -> bytes:
        with self.lock:
            self.n += 1
            n = self.n
        return (
            f"# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total {220 + n}\n"
            f"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running {n % 3}\n"
            "# TYPE weird gauge\nweird NaN\n"
        ).encode()


@pytest.fixture
def changing_url():
    source = _Changing()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            body = source.text()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_scrapes_are_strict_json_from_the_start_to_the_end(changing_url, tmp_path) -> None:
    ev = ServerEvidence(changing_url, tmp_path, interval=0.3, metrics_url=changing_url + "/metrics")
    ev.start()
    time.sleep(0.75)
    ev.stop()
    lines = [_strict(x) for x in (tmp_path / "server" / "metrics.jsonl").read_text().splitlines()]
    # a baseline at once (not one interval later), two on the interval, one at the stop
    assert len(lines) == 4 and lines[0]["t"] < 0.2
    assert lines[0]["metrics"]["weird"] == "NaN" and lines[0]["types"]["weird"] == "gauge"
    assert all("types" not in ln for ln in lines[1:])  # written when first seen only
    assert [ln["metrics"]["process_cpu_seconds_total"] for ln in lines] == [
        221.0,
        222.0,
        223.0,
        224.0,
    ]
    assert all(abs(ln["epoch"] - time.time()) < 60 for ln in lines)
    ev_loaded = load_server_evidence(tmp_path)
    assert ev_loaded.types["process_cpu_seconds_total"] == "counter"
    assert math.isnan(ev_loaded.metrics.query("name == 'weird'")["value"].iloc[0])


def _scrape(t: float, metrics: dict[str, float], types: dict[str, str] | None = None) -> str:
    line = {"t": t, "epoch": START + t, "metrics": {k: json_value(v) for k, v in metrics.items()}}
    if types:
        line["types"] = types
    return json.dumps(line, allow_nan=False)


def _vllm_scrapes() -> str:
    """A vLLM that served 220 s of CPU before the run: 7.7 s within it."""
    lab = '{engine="0",model_name="tiny-llama"}'
    cpu = [220.0, 221.5, 224.0, 226.0, 227.7]
    running = [0.0, 3.0, 5.0, 2.0, 0.0]
    kv = [0.0, 0.1, 0.25, 0.05, 0.0]
    pre = [10.0, 10.0, 11.0, 12.0, 12.0]
    types = {
        "process_cpu_seconds_total": "counter",
        "vllm:num_requests_running": "gauge",
        "vllm:kv_cache_usage_perc": "gauge",
        "vllm:num_preemptions_total": "counter",
        "vllm:request_success_total": "counter",
        "python_gc_objects_collected_total": "counter",
    }
    return (
        "\n".join(
            _scrape(
                5.0 * i,
                {
                    "process_cpu_seconds_total": cpu[i],
                    f"vllm:num_requests_running{lab}": running[i],
                    f"vllm:kv_cache_usage_perc{lab}": kv[i],
                    f"vllm:num_preemptions_total{lab}": pre[i],
                    f'vllm:request_success_total{{finished_reason="length",{lab[1:]}': 100.0
                    + 10 * i,
                    'python_gc_objects_collected_total{generation="0"}': 5000.0,  # did not move
                },
                types if i == 0 else None,
            )
            for i in range(5)
        )
        + "\n"
    )


def test_the_report_shows_the_runs_increase_and_the_streaming_series(tmp_path: Path) -> None:
    from streamslo.reports import build_report

    s = write_run(tmp_path / "vllm", seed=3, server={"metrics.jsonl": _vllm_scrapes()})
    res = build_report(None, s.path, tmp_path / "r.html", resamples=20)
    (server,) = json.loads(res.json.read_text())["server"]
    rows = {r["sample"]: r for r in server["samples"]}
    cpu = rows["process_cpu_seconds_total"]
    # the run's CPU, not the server's lifetime (the bug: 220 s shown for a 7.7 s run)
    assert cpu["kind"] == "increase" and cpu["value"] == pytest.approx(7.7)
    assert cpu["first"] == 220.0 and cpu["per_s"] == pytest.approx(7.7 / 20.0)
    lab = '{engine="0",model_name="tiny-llama"}'
    assert rows[f"vllm:num_requests_running{lab}"]["value"] == 5.0
    assert rows[f"vllm:num_requests_running{lab}"]["title"] == "vLLM running requests"
    assert rows[f"vllm:kv_cache_usage_perc{lab}"]["value"] == 0.25
    assert rows[f"vllm:num_preemptions_total{lab}"]["value"] == 2.0
    # other counters only when they moved, as their increase
    assert rows[f'vllm:request_success_total{{finished_reason="length",{lab[1:]}']["value"] == 40.0
    assert not any(k.startswith("python_gc") for k in rows)
    # the streaming series come first, in the catalogue's order
    assert [r["title"] for r in server["samples"][:4]] == [
        "vLLM running requests",
        "vLLM KV-cache usage",
        "vLLM preemptions",
        "server process CPU",
    ]
    html = res.html.read_text()
    assert "The server&#x27;s own series over the run" in html or "own series over the run" in html
    assert "+7.70" in html and "227.70 (total)" not in html
    # a vLLM has no write backlog nor loop stalls: no empty chart of them
    assert "no write backlog scraped" not in html


def test_older_files_without_epoch_or_types_still_load(tmp_path: Path) -> None:
    lines = (
        "\n".join(
            json.dumps({"t": float(t), "metrics": {"x_total": 100.0 + t, "g": 1.0}})
            for t in range(3)
        )
        + "\n"
    )
    s = write_run(tmp_path / "old", seed=4, server={"metrics.jsonl": lines})
    from streamslo.reports import build_report

    res = build_report(None, s.path, tmp_path / "o.html", resamples=20)
    (server,) = json.loads(res.json.read_text())["server"]
    rows = {r["sample"]: r for r in server["samples"]}
    assert rows["x_total"]["kind"] == "increase" and rows["x_total"]["value"] == 2.0  # by its name
    assert "g" not in rows  # a gauge that did not move


@pytest.mark.load
def test_the_bundled_servers_own_metrics(tmp_path: Path) -> None:
    """The real bundled server, scraped while it streams: its streams-being-written gauge
    moves and its CPU is the run's share."""
    from streamslo.reports.load import LoadedRun
    from streamslo.reports.server_series import moved_samples, panel_series
    from tests.server.servers import start_server

    server = start_server(["--mode", "fixed"], tmp_path)
    try:
        ev = ServerEvidence(server.url, tmp_path / "run", interval=0.2)
        assert ev.probe() is not None
        ev.start()
        body = {"model": "m", "prompt": "hi", "max_tokens": 40, "stream": True}

        def stream() -> None:
            with httpx.stream("POST", server.url + "/v1/completions", json=body, timeout=30) as r:
                for _ in r.iter_bytes():
                    pass

        threads = [threading.Thread(target=stream) for _ in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        time.sleep(0.3)
        ev.stop()
    finally:
        server.stop()
    evidence = load_server_evidence(tmp_path / "run")
    run = LoadedRun(
        "run",
        "fixed",
        None,
        float(evidence.metrics["epoch"].min()),
        None,  # type: ignore[arg-type]
        evidence,
    )
    panels = {k.panel for k, _, _ in panel_series(run)}
    assert {"running", "cpu", "memory"} <= panels
    rows, _ = moved_samples(run)
    active = [r for r in rows if r.sample.startswith("streamslo_active_streams")]
    assert active and max(r.value for r in active) >= 1
    cpu = next(r for r in rows if r.sample == "process_cpu_seconds_total")
    assert cpu.kind == "increase" and 0 < cpu.value < cpu.last  # the run's share, not the total


@pytest.mark.parametrize(
    "server, metrics, want",
    [
        (
            "tgi",
            {
                "tgi_batch_current_size": [0, 3, 1],
                "tgi_queue_size": [0, 2, 0],
                "tgi_batch_current_max_tokens": [0, 900, 100],
            },
            {
                "running": "TGI batch size (running)",
                "waiting": "TGI queue size (waiting)",
                "batch_tokens": "TGI batch max tokens",
            },
        ),
        (
            "sglang",
            {
                "sglang:num_running_reqs": [0, 5, 2],
                "sglang:num_queue_reqs": [0, 1, 0],
                "sglang:token_usage": [0.0, 0.4, 0.1],
            },
            {
                "running": "SGLang running requests",
                "waiting": "SGLang queued requests",
                "kv": "SGLang token-pool usage",
            },
        ),
        (
            "older vllm",
            {"vllm:gpu_cache_usage_perc": [0.0, 0.3, 0.0]},
            {"kv": "vLLM KV-cache usage"},
        ),
    ],
)
def test_each_servers_streaming_series_by_its_own_names(
    server, metrics, want, tmp_path: Path
) -> None:
    from streamslo.reports.load import LoadedRun
    from streamslo.reports.server_series import moved_samples, panel_series

    lines = (
        "\n".join(
            _scrape(
                2.0 * i,
                {name: values[i] for name, values in metrics.items()},
                {name: "gauge" for name in metrics} if i == 0 else None,
            )
            for i in range(3)
        )
        + "\n"
    )
    (tmp_path / "server").mkdir()
    (tmp_path / "server" / "metrics.jsonl").write_text(lines)
    run = LoadedRun("run", server, None, START, None, load_server_evidence(tmp_path))  # type: ignore[arg-type]
    series = panel_series(run)
    assert {k.panel: k.title for k, _, _ in series} == want
    title_of = {name: k.title for k, name, _ in series}
    peaks = {r.title: r.value for r in moved_samples(run)[0]}
    for name, values in metrics.items():
        assert peaks[title_of[name]] == max(values), name
