"""``streamslo run``: a real headless Locust run against the faulty server, writing docs/results.md."""

from __future__ import annotations

import json

import numpy as np
import pytest

from streamslo.results.columns import STREAM_COLUMNS
from streamslo.stream.outcome import OUTCOMES
from tests.faulty.server import TIMED_ITL_S, TIMED_TTFT_S
from tests.loadgen.helpers import REPO, gaps, streams, streamslo_run

pytestmark = pytest.mark.load


@pytest.fixture(scope="module")
def timed_run(faulty_server, tmp_path_factory):
    out = tmp_path_factory.mktemp("timed") / "run"
    r = streamslo_run(
        faulty_server.base_url,
        out,
        "--model",
        "timed",
        "--users",
        "12",
        "--duration",
        "5",
        "--protocol",
        "mixed",
        "--max-tokens",
        "8",
        "--drain",
        "5",
        "--stall-timeout",
        "2",
    )
    assert r.returncode == 0, r.stdout + r.stderr
    return out, r


def test_results_directory_layout(timed_run):
    out, r = timed_run
    for name in ("run.json", "streams.csv", "gaps.parquet", "summary.json", "slo.json"):
        assert (out / name).exists(), name
    s = streams(out)
    assert list(s.columns) == list(STREAM_COLUMNS)
    assert s["stream_id"].is_unique
    assert set(s["protocol"]) == {"sse", "ws"}
    assert set(s["outcome"]) == {"ok"}
    assert set(s.loc[s.protocol == "ws", "status"]) == {101}
    assert set(s.loc[s.protocol == "sse", "status"]) == {200}
    run = json.loads((out / "run.json").read_text())
    for key in (
        "tool_version",
        "start",
        "end",
        "target",
        "users",
        "protocol_mix",
        "stall_timeout",
        "locust_version",
        "valid",
    ):
        assert key in run, key
    assert run["users"] == 12
    assert "requests" in r.stdout and "itl_ms" in r.stdout  # the summary table


def test_timings_match_the_server_schedule(timed_run):
    out, _ = timed_run
    s = streams(out)
    assert np.allclose(s["ttft_ms"], TIMED_TTFT_S * 1000, atol=150)
    g = gaps(out)
    assert len(g) == 7 * len(s)  # 8 tokens: 7 gaps each, all in the parquet
    assert set(g["index"]) == set(range(1, 8))
    assert not g["open"].any()
    assert np.median(g["gap_ms"]) == pytest.approx(TIMED_ITL_S * 1000, abs=10)
    # t is seconds since the run's start: inside the run
    run = json.loads((out / "run.json").read_text())
    assert g["t"].min() > 0 and g["t"].max() < run["end_epoch"] - run["start_epoch"] + 1


def test_summary_agrees_with_streams_csv(timed_run):
    out, _ = timed_run
    s = streams(out)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["requests"] == len(s)
    assert set(summary["outcomes"]) == set(OUTCOMES)
    assert summary["outcomes"]["ok"] == len(s)
    assert summary["truncation_rate"] == 0.0
    itl = gaps(out)["gap_ms"].to_numpy()
    assert summary["itl_ms"]["p99"] == pytest.approx(float(np.percentile(itl, 99)))
    assert summary["itl_ms"]["count"] == len(itl)
    slo = json.loads((out / "slo.json").read_text())
    assert {t["metric"] for t in slo["thresholds"]} == {
        "truncation_rate",
        "http_5xx_rate",
        "connect_error_rate",
        "itl_ms",
    }
    assert all(t["passed"] for t in slo["thresholds"])


def test_truncated_run_fails_with_99(faulty_server, tmp_path):
    out = tmp_path / "run"
    r = streamslo_run(
        faulty_server.base_url,
        out,
        "--model",
        "truncated_close",
        "--users",
        "4",
        "--duration",
        "2",
        "--max-tokens",
        "6",
        "--drain",
        "3",
    )
    assert r.returncode == 99, r.stdout + r.stderr
    s = streams(out)
    assert len(s) > 0 and set(s["outcome"]) == {"truncated"}
    summary = json.loads((out / "summary.json").read_text())
    assert summary["truncation_rate"] == 1.0
    assert "FAIL" in r.stdout


def test_streams_in_flight_after_drain_are_cancelled(faulty_server, tmp_path):
    out = tmp_path / "run"
    # 'timed' streams of 60 tokens take ~3.3 s; the run stops after 2 s with a 1 s drain.
    r = streamslo_run(
        faulty_server.base_url,
        out,
        "--model",
        "timed",
        "--users",
        "4",
        "--duration",
        "2",
        "--max-tokens",
        "60",
        "--drain",
        "1",
    )
    s = streams(out)
    assert (s["outcome"] == "cancelled").sum() == 4, s["outcome"].value_counts()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["truncation_rate"] is None  # nothing that began was counted
    assert r.returncode == 99  # no data for the SLO: a threshold fails


def test_two_processes_write_every_stream_once(faulty_server, tmp_path):
    out = tmp_path / "run"
    r = streamslo_run(
        faulty_server.base_url,
        out,
        "--model",
        "timed",
        "--users",
        "8",
        "--duration",
        "4",
        "--max-tokens",
        "4",
        "--processes",
        "2",
        "--drain",
        "5",
        "--slo",
        str(REPO / "tests" / "correctness_slo.toml"),  # what is written, not how fast
    )
    assert r.returncode == 0, r.stdout + r.stderr
    s = streams(out)
    assert s["stream_id"].is_unique
    writers = s["stream_id"].str.rsplit("-", n=1).str[0].nunique()
    assert writers == 2
    g = gaps(out)
    assert set(g["stream_id"]) == set(s["stream_id"])
    assert len(g) == 3 * len(s)
    run = json.loads((out / "run.json").read_text())
    assert run["generator"]["processes"] == 2
    assert run["relay"]["workers"] == 2 and run["relay"]["records"] == len(
        s
    )  # the master wrote them


def test_bad_input_exits_2(tmp_path):
    r = streamslo_run("http://127.0.0.1:9", tmp_path / "x", "--slow-readers", "2")
    assert r.returncode == 2
    assert "slow-readers" in r.stderr


def test_unreachable_server_is_connect_error(tmp_path):
    from tests.faulty.process import unused_port

    out = tmp_path / "run"
    # --no-preflight: the preflight would stop this run before any load (tests/first_contact)
    r = streamslo_run(
        f"http://127.0.0.1:{unused_port()}",
        out,
        "--model",
        "x",
        "--users",
        "2",
        "--duration",
        "1",
        "--drain",
        "1",
        "--no-preflight",
    )
    assert r.returncode == 99
    s = streams(out)
    assert len(s) > 0 and set(s["outcome"]) == {"connect_error"}


def test_ctrl_c_keeps_and_finalizes_the_results(faulty_server, tmp_path):
    import signal
    import subprocess
    import sys

    from tests.loadgen.helpers import REPO, wait_rows

    out = tmp_path / "run"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "streamslo",
            "run",
            "--host",
            faulty_server.base_url,
            "--out",
            str(out),
            "--model",
            "timed",
            "--users",
            "3",
            "--duration",
            "60",
            "--max-tokens",
            "4",
            "--drain",
            "2",
            "--allow-invalid",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_rows(out / "streams.csv", proc)  # the load runs, and some streams ended
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "interrupted" in stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["outcomes"]["ok"] > 0
    assert json.loads((out / "run.json").read_text())["interrupted"] is True
