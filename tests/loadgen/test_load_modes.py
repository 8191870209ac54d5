"""Open loop, k6-style stages, slow readers, scenario files and live abortOnFail."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from tests.loadgen.helpers import REPO, streams, streamslo_run

pytestmark = pytest.mark.load


def assert_ran(r) -> None:  # type: ignore[no-untyped-def]
    """The run finished: exit 0, or 99 where only a latency threshold failed. Its SLO's
    ``itl_ms p(99)<200`` is this machine's pace, not what these runs test (a starved generator
    read the timed server's 50 ms gaps at 437 ms p99 under load); a stream that did not end ok
    fails the outcome checks each test makes."""
    out = r.stdout + r.stderr
    assert r.returncode in (0, 99), out
    if r.returncode == 99:
        failed = [
            line.split()[1] for line in r.stdout.splitlines() if line.strip().startswith("FAIL ")
        ]
        assert failed and all(name.endswith("_ms") for name in failed), out


def open_loop_run(server, tmp_path) -> tuple[pd.DataFrame, dict]:
    """Poisson arrivals at 10/s for 5 s: the streams and summary.json."""
    out = tmp_path / "run"
    r = streamslo_run(
        server.base_url,
        out,
        "--model",
        "timed",
        "--request-rate",
        "10",
        "--duration",
        "5",
        "--max-tokens",
        "4",
        "--drain",
        "3",
        "--seed",
        "3",
    )
    assert_ran(r)
    return streams(out), json.loads((out / "summary.json").read_text())


def test_open_loop_rate_and_scheduled_latency(faulty_server, tmp_path):
    s, summary = open_loop_run(faulty_server, tmp_path)
    # Poisson arrivals at 10/s for 5 s: about 50, whatever the server does (a slow machine may
    # start the arrival loop late, so the rate is judged over the span the arrivals cover).
    assert s["scheduled_at"].notna().all()
    assert 20 <= len(s) <= 80, len(s)
    span = s["scheduled_at"].max() - s["scheduled_at"].min()
    assert 5 <= (len(s) - 1) / span <= 20, (len(s), span)
    lag = s["started_at"] - s["scheduled_at"]
    # Never before its time; how soon after (median < 50 ms) is a quiet machine's figure:
    # tests/bench/test_load_timing.py.
    assert (lag > -0.01).all()
    assert set(s["user_class"]) == {"OpenLoopStreamUser"}
    assert summary["ttft_sched_ms"]["count"] == len(s)
    assert summary["ttft_sched_ms"]["p50"] >= summary["ttft_ms"]["p50"]


def capped_open_loop_run(server, tmp_path) -> tuple[pd.DataFrame, dict, dict]:
    """20 arrivals/s, at most 2 in flight: the streams, summary.json and run.json."""
    out = tmp_path / "run"
    # 'timed' streams of 8 tokens last ~0.65 s; at 20/s with at most 2 in flight most arrivals
    # find the cap reached: they are dropped and counted (k6's dropped_iterations), and the
    # ones sent go at their scheduled time (no waiting, then a catch-up burst).
    r = streamslo_run(
        server.base_url,
        out,
        "--model",
        "timed",
        "--request-rate",
        "20",
        "--max-concurrency",
        "2",
        "--duration",
        "4",
        "--max-tokens",
        "8",
        "--drain",
        "3",
    )
    assert r.returncode in (0, 99), r.stderr
    summary = json.loads((out / "summary.json").read_text())
    return streams(out), summary, json.loads((out / "run.json").read_text())


def test_open_loop_max_concurrency_drops_instead_of_bursting(faulty_server, tmp_path):
    s, summary, run = capped_open_loop_run(faulty_server, tmp_path)
    late = (s["started_at"] - s["scheduled_at"]).to_numpy()
    # Never early; how late at most (< 0.2 s, no queue) is timed in tests/bench. A queue would
    # also show as more streams sent than dropped, and more than 2 in flight.
    assert late.min() > -0.01, late.min()
    dropped = summary["dropped_iterations"]
    assert dropped > len(s) and summary["dropped_iterations_by_scenario"] == {"default": dropped}
    assert run["dropped_iterations"] == dropped
    starts = s["started_at"].to_numpy()
    ends = starts + s["e2e_ms"].to_numpy() / 1000.0
    assert max(((starts <= x) & (ends > x)).sum() for x in starts) <= 2


def test_stages_shape_follows_targets(faulty_server, tmp_path):
    out = tmp_path / "run"
    r = streamslo_run(
        faulty_server.base_url,
        out,
        "--model",
        "timed",
        "--stages",
        "2s:2,3s:6",
        "--duration",
        "5",
        "--max-tokens",
        "4",
        "--drain",
        "3",
    )
    assert_ran(r)
    s = streams(out)
    run = json.loads((out / "run.json").read_text())
    t = s["started_at"] - run["start_epoch"]
    early, late = (t < 1.5).sum(), ((t > 3.5) & (t < 5.0)).sum()
    assert late > early * 1.5, (early, late)


def test_slow_readers_are_labelled_and_measured(faulty_server, tmp_path):
    out = tmp_path / "run"
    r = streamslo_run(
        faulty_server.base_url,
        out,
        "--model",
        "ok",
        "--users",
        "4",
        "--slow-readers",
        "0.5",
        "--duration",
        "3",
        "--max-tokens",
        "64",
        "--drain",
        "10",
    )
    assert_ran(r)
    s = streams(out)
    assert set(s["user_class"]) == {"SSEStreamUser", "SlowSSEStreamUser"}
    fast = s[s.user_class == "SSEStreamUser"]["e2e_ms"].median()
    slow = s[s.user_class == "SlowSSEStreamUser"]["e2e_ms"].median()
    assert slow > 3 * fast


def test_scenario_with_abort_on_fail_stops_early(faulty_server, tmp_path):
    scenario = tmp_path / "s.toml"
    scenario.write_text(
        '[load]\nusers = 3\nduration = "60s"\nmax_tokens = 6\ndrain = "2s"\n'
        '[thresholds]\ntruncation_rate = [{ threshold = "rate<0.01", abortOnFail = true, delayAbortEval = "2s" }]\n'
    )
    out = tmp_path / "run"
    r = streamslo_run(
        faulty_server.base_url,
        out,
        "--scenario",
        str(scenario),
        "--model",
        "truncated_close",
        timeout=60,
    )
    assert r.returncode == 99
    run = json.loads((out / "run.json").read_text())
    assert run["aborted"] and run["aborted"][0]["metric"] == "truncation_rate"
    assert run["end_epoch"] - run["start_epoch"] < 30  # far less than the 60 s asked for
    slo = json.loads((out / "slo.json").read_text())
    assert not slo["passed"]


def soak_run(server, tmp_path) -> tuple[pd.DataFrame, dict]:
    """``streamslo soak`` of a two-stage scenario of 'timed' streams: streams and summary.json."""
    import subprocess
    import sys

    scenario = tmp_path / "soak.toml"
    scenario.write_text(
        '[load]\nmax_tokens = 4\ndrain = "3s"\nmodel = "timed"\nstages = [{ duration = "2s", target = 3 }, { duration = "2s", target = 3 }]\n'
        '[thresholds]\nitl_ms = ["p(99)<500"]\n'
    )
    out = tmp_path / "soak"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "streamslo",
            "soak",
            "--scenario",
            str(scenario),
            "--host",
            server.base_url,
            "--out",
            str(out),
            "--allow-invalid",
        ],
        capture_output=True,
        text=True,
        timeout=90,
        cwd=REPO,
    )
    assert_ran(r)
    return streams(out), json.loads((out / "summary.json").read_text())


def test_soak_runs_a_scenario(faulty_server, tmp_path):
    s, summary = soak_run(faulty_server, tmp_path)
    assert len(s) > 5 and set(s["outcome"]) == {"ok"}
    # The server waits 50 ms between tokens: the median gap is no shorter (within 50 +- 10 ms
    # on a quiet machine: tests/bench/test_load_timing.py).
    assert np.median(summary["itl_ms"]["p50"]) >= 40


def test_spike_shape(faulty_server, tmp_path):
    out = tmp_path / "run"
    r = streamslo_run(
        faulty_server.base_url,
        out,
        "--model",
        "timed",
        "--shape",
        "spike",
        "--users",
        "10",
        "--duration",
        "8",
        "--max-tokens",
        "4",
        "--drain",
        "3",
    )
    assert_ran(r)
    s = streams(out)
    run = json.loads((out / "run.json").read_text())
    t = s["started_at"] - run["start_epoch"]
    base = ((t > 0.5) & (t < 2.5)).sum() / 2.0  # streams started per second at the base load
    spike = ((t > 3.5) & (t < 4.5)).sum() / 1.0  # ... during the spike (10 users)
    assert spike > 2.5 * base, (base, spike)
