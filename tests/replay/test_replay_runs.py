"""Replay, hang-ups and the prefix cache end to end: ``streamslo run`` against the bundled
server (real processes on loopback). Correctness only: the 2-minute timing measurement is
``bench/bench_replay.py``."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from streamslo.options.cancel import CancelPlan
from streamslo.run.evidence import parse_prometheus
from streamslo.server.bundled import BundledServer
from streamslo.workload.trace import iter_trace

pytestmark = pytest.mark.load

REPO = Path(__file__).resolve().parents[2]
EXCERPT = Path(__file__).resolve().parent / "data" / "mooncake_excerpt.jsonl"
#: Correctness only: the default SLO less its ITL bound (it measured the loaded suite).
SLO = REPO / "tests" / "correctness_slo.toml"


def run(host: str, out: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    cmd = [
        sys.executable,
        "-m",
        "streamslo",
        "run",
        "--host",
        host,
        "--out",
        str(out),
        "--allow-invalid",
        "--quiet",
        *(() if "--slo" in args else ("--slo", str(SLO))),
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BundledServer]:
    d = tmp_path_factory.mktemp("server")
    with BundledServer(["--mode", "fixed", "--max-streams", "128"], d / "server.log") as s:
        yield s.wait_ready()


def _metrics(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url + "/metrics", timeout=5) as r:
        return parse_prometheus(r.read().decode())


def _excerpt(tmp_path: Path, seconds: float) -> Path:
    """The excerpt's first ``seconds`` (the first burst included)."""
    lines = [
        ln
        for ln in EXCERPT.read_text().splitlines()
        if json.loads(ln)["timestamp"] <= seconds * 1000
    ]
    p = tmp_path / "excerpt.jsonl"
    p.write_text("\n".join(lines) + "\n")
    return p


def test_trace_replays_at_its_offsets_with_its_lengths(server, tmp_path):
    trace = _excerpt(tmp_path, 12.0)
    want = list(iter_trace(trace))
    out = tmp_path / "run"
    r = run(
        server.url,
        out,
        "--trace",
        str(trace),
        "--trace-speed",
        "3",
        "--processes",
        "2",
        "--drain",
        "5",
    )
    assert r.returncode == 0, r.stdout + r.stderr
    s = pd.read_csv(out / "streams.csv")
    assert len(s) == len(want) and (s["outcome"] == "ok").all()
    assert set(s["user_class"]) == {"TraceReplayUser"}
    # Each request was scheduled at its trace offset / speed (two processes split the trace,
    # each from its own start: compare within a process, whose streams share a prefix).
    for _, part in s.groupby(s["stream_id"].str.split("-").str[0]):
        sched = np.sort(part["scheduled_at"].to_numpy())
        offsets = np.sort([w.offset_s / 3 for w in want])
        gaps = np.diff(sched)
        shares = [np.diff(offsets[i::2]) for i in (0, 1)]
        assert any(len(w) == len(gaps) and np.allclose(gaps, w, atol=1e-3) for w in shares)
    # Lengths: max_tokens is the trace's output length; every stream asked for it.
    assert sorted(s["expected_tokens"]) == sorted(w.output_tokens for w in want)
    assert sorted(s["usage_completion_tokens"]) == sorted(w.output_tokens for w in want)
    # Lateness is recorded per stream and summarised.
    lag = (s["started_at"] - s["scheduled_at"]) * 1000
    assert np.allclose(s["schedule_lag_ms"], lag, atol=0.01)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["schedule_lag_ms"]["count"] == len(s)
    assert summary["schedule_lag_ms"]["p99"] == pytest.approx(
        np.percentile(s["schedule_lag_ms"], 99)
    )
    run_json = json.loads((out / "run.json").read_text())
    tr = run_json["workload"]["trace"]
    assert tr["name"] == "excerpt.jsonl" and tr["format"] == "mooncake" and tr["speed"] == 3
    import hashlib

    assert tr["sha256"] == hashlib.sha256(trace.read_bytes()).hexdigest()
    # The run ended when the trace did (not at a fixed duration).
    assert run_json["end_epoch"] - run_json["start_epoch"] < 12.0 / 3 + 20


def test_double_speed_doubles_the_arrival_rate(server, tmp_path):
    trace = _excerpt(tmp_path, 12.0)
    rates = []
    for speed in ("2", "4"):
        out = tmp_path / f"x{speed}"
        r = run(server.url, out, "--trace", str(trace), "--trace-speed", speed, "--drain", "5")
        assert r.returncode == 0, r.stderr
        sched = pd.read_csv(out / "streams.csv")["scheduled_at"]
        rates.append((len(sched) - 1) / (sched.max() - sched.min()))
    assert rates[1] / rates[0] == pytest.approx(2.0, rel=0.01)


def test_late_arrivals_are_dropped_and_counted_when_asked(server, tmp_path):
    """At 200x the bursts come faster than a request can be prepared and started: with
    ``--trace-late drop`` those later than the bound are dropped and counted, never sent in a
    catch-up burst."""
    trace = _excerpt(tmp_path, 30.0)
    out = tmp_path / "drop"
    r = run(
        server.url,
        out,
        "--trace",
        str(trace),
        "--trace-speed",
        "200",
        "--trace-late",
        "drop",
        "--trace-max-lag",
        "1ms",
        "--drain",
        "5",
    )
    assert r.returncode in (0, 99), r.stderr
    s = pd.read_csv(out / "streams.csv")
    summary = json.loads((out / "summary.json").read_text())
    dropped = summary["dropped_iterations"]
    assert dropped == summary["dropped_iterations_by_scenario"].get("trace", 0)
    assert len(s) + dropped == len(list(iter_trace(trace)))
    assert dropped > 0 and len(s) > 0


def test_hang_ups_are_their_own_outcome_and_the_server_frees_them(server, tmp_path):
    out = tmp_path / "cancel"
    r = run(
        server.url,
        out,
        "--users",
        "6",
        "--duration",
        "4",
        "--max-tokens",
        "16",
        "--protocol",
        "mixed",
        "--cancel-rate",
        "0.3",
        "--cancel-after",
        "4tok",
        "--cancel-check",
        "5s",
        "--seed",
        "11",
        "--drain",
        "5",
    )
    assert r.returncode == 0, r.stdout + r.stderr
    s = pd.read_csv(out / "streams.csv")
    summary = json.loads((out / "summary.json").read_text())
    hung = s[s["outcome"] == "client_cancelled"]
    assert set(s["outcome"]) == {"ok", "client_cancelled"}
    # Exactly the streams the seeded plan picked (one process: its draws in stream order).
    plan = CancelPlan(0.3, "4tok", 11 * 1_000_003 + 17)
    picked = [plan.draw() != (None, None) for _ in range(len(s))]
    order = s.sort_values("stream_id", key=lambda c: c.str.rsplit("-", n=1).str[1].astype(int))
    assert (order["outcome"] == "client_cancelled").tolist() == picked
    assert (hung["tokens"] == 4).all() and hung["e2e_ms"].notna().all()  # timed up to the hang-up
    assert summary["error_rate"] == 0 and summary["truncation_rate"] == 0
    assert summary["client_cancelled"]["count"] == len(hung) > 0
    assert summary["server_freed"]["passed"] is True
    assert summary["server_freed"]["gauge"] == "streamslo_requests_running"


def test_a_server_that_leaks_hung_up_streams_fails_the_check(tmp_path):
    with BundledServer(
        ["--mode", "fixed", "--fault", "leak-cancelled", "--graceful-timeout", "1"],
        tmp_path / "leak.log",
    ) as leak:
        leak.wait_ready()
        out = tmp_path / "leak"
        r = run(
            leak.url,
            out,
            "--users",
            "4",
            "--duration",
            "5",
            "--max-tokens",
            "16",
            "--cancel-rate",
            "0.8",
            "--cancel-after",
            "3tok",
            "--cancel-check",
            "2s",
            "--drain",
            "5",
        )
        assert r.returncode == 99, r.stdout + r.stderr
        assert "did not free the streams" in r.stderr
        run_json = json.loads((out / "run.json").read_text())
        freed = run_json["server_freed"]
        hung = int((pd.read_csv(out / "streams.csv")["outcome"] == "client_cancelled").sum())
        # Every stream the server leaked is one the client hung up on; a stream the client hung
        # up on may still have ended on the server first (all its tokens written while a
        # loaded client was reading its third), so the leak is at most that count.
        assert freed["passed"] is False and 0 < freed["last"] <= hung and freed["baseline"] == 0
        assert hung - freed["last"] <= max(2, hung // 10), (freed, hung)
        assert _metrics(leak.url)["streamslo_requests_running"] == freed["last"]


def test_prefix_groups_hit_rate_matches_the_servers_count(server, tmp_path):
    before = _metrics(server.url)
    out = tmp_path / "prefix"
    r = run(
        server.url,
        out,
        "--users",
        "4",
        "--duration",
        "4",
        "--max-tokens",
        "4",
        "--prefix-groups",
        "4",
        "--prefix-tokens",
        "300",
        "--drain",
        "5",
        "--no-preflight",  # the server's counters must see the run's requests only
    )
    assert r.returncode == 0, r.stdout + r.stderr
    after = _metrics(server.url)
    hits = after["streamslo_prefix_cache_hits_total"] - before["streamslo_prefix_cache_hits_total"]
    queries = (
        after["streamslo_prefix_cache_queries_total"]
        - before["streamslo_prefix_cache_queries_total"]
    )
    pc = json.loads((out / "summary.json").read_text())["prefix_cache"]
    assert pc["cached_tokens"] == hits and pc["prompt_tokens"] == queries
    assert pc["hit_rate"] == pytest.approx(hits / queries)
    # Four groups: after each group's first request, every request hits its group's prefix.
    assert pc["streams"] - pc["streams_hit"] <= 4
    assert pc["ttft_ms_hit"]["count"] + pc["ttft_ms_miss"]["count"] == pc["streams"]
    s = pd.read_csv(out / "streams.csv")
    assert (s["cached_tokens"] >= 0).all()


def test_a_trace_scenario_replays_beside_other_scenarios(server, tmp_path):
    trace = _excerpt(tmp_path, 8.0)
    scenario = tmp_path / "s.toml"
    scenario.write_text(f"""
[scenarios.replay]
executor = "trace"
trace = "{trace}"
speed = 2

[scenarios.steady]
executor = "constant-vus"
vus = 1
duration = "3s"
""")
    out = tmp_path / "sc"
    r = run(server.url, out, "--scenario", str(scenario), "--max-tokens", "4", "--drain", "5")
    assert r.returncode == 0, r.stdout + r.stderr
    s = pd.read_csv(out / "streams.csv")
    replayed = s[s["scenario"] == "replay"]
    assert len(replayed) == len(list(iter_trace(trace))) and (replayed["outcome"] == "ok").all()
    assert replayed["scheduled_at"].notna().all() and replayed["schedule_lag_ms"].notna().all()
    assert (s["scenario"] == "steady").sum() > 0
    run_json = json.loads((out / "run.json").read_text())
    assert [sc["executor"] for sc in run_json["scenarios"]] == ["trace", "constant-vus"]
