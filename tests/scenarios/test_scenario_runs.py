"""Scenario runs against the faulty test server: the arrival rate along a ramp, dropped
iterations when ``maxVUs`` is too small (no catch-up burst), and two scenarios told apart."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from streamslo.results.layout import SCHEMA_VERSION
from tests.loadgen.helpers import streams, streamslo_run

pytestmark = pytest.mark.load


def _scenario(tmp_path: Path, text: str) -> str:
    path = tmp_path / "scenario.toml"
    path.write_text(text)
    return str(path)


#: 20 arrivals a second for 3 s with 2 VUs at most: 'timed' streams of 8 tokens last ~0.65 s,
#: so about 13 VUs would be needed.
TIGHT = """
[load]
max_tokens = 8

[scenarios.tight]
executor = "constant-arrival-rate"
rate = 20
duration = "3s"
preAllocatedVUs = 2
maxVUs = 2
gracefulStop = "3s"
"""


def _owed(t: float) -> float:
    """The ramp below: arrivals owed by ``t`` (the integral of its rate)."""
    if t <= 4.0:
        return 20 * t + 5 * t * t  # 20/s rising to 60/s over 4 s
    return 160 + 60 * (t - 4.0)


def test_ramping_arrival_rate_within_3_percent_along_the_ramp(faulty_server, tmp_path):
    scenario = _scenario(
        tmp_path,
        """
[load]
max_tokens = 4

[scenarios.ramp]
executor = "ramping-arrival-rate"
startRate = 20
timeUnit = "1s"
preAllocatedVUs = 20
maxVUs = 200
stages = [{ duration = "4s", target = 60 }, { duration = "2s", target = 60 }]
gracefulStop = "5s"
""",
    )
    out = tmp_path / "run"
    r = streamslo_run(
        faulty_server.base_url, out, "--scenario", scenario, "--model", "ok", "--seed", "5"
    )
    assert r.returncode == 0, r.stdout + r.stderr
    s = streams(out)
    run = json.loads((out / "run.json").read_text())
    assert set(s["scenario"]) == {"ramp"} and run["dropped_iterations"] == 0
    t = np.sort(s["scheduled_at"].to_numpy() - s["scheduled_at"].min())
    assert len(t) == pytest.approx(_owed(6.0), rel=0.03)
    # Along the ramp: the rate achieved in each second against the integral of the asked rate.
    for a in range(6):
        got = ((t >= a) & (t < a + 1)).sum()
        asked = _owed(a + 1) - _owed(a)
        assert got == pytest.approx(asked, rel=0.03, abs=1), (a, got, asked)
    # The generator kept its schedule, or the run says it is not to be trusted.
    late = (s["started_at"] - s["scheduled_at"]).to_numpy()
    assert (late > -0.01).all()
    assert np.percentile(late, 99) < 0.1 or run["valid"] is False, np.percentile(late, 99)


def test_arrivals_dropped_when_max_vus_is_too_small(faulty_server, tmp_path):
    # 'timed' streams of 8 tokens last ~0.65 s; 20 arrivals a second need ~13 VUs, 2 are allowed.
    scenario = _scenario(tmp_path, TIGHT)
    out = tmp_path / "run"
    r = streamslo_run(faulty_server.base_url, out, "--scenario", scenario, "--model", "timed")
    assert r.returncode in (0, 99), r.stdout + r.stderr
    s = streams(out)
    run = json.loads((out / "run.json").read_text())
    summary = json.loads((out / "summary.json").read_text())
    dropped = run["dropped_iterations"]
    assert len(s) + dropped == 60  # every scheduled arrival is either sent or counted
    assert dropped >= 30 and summary["dropped_iterations_by_scenario"] == {"tight": dropped}
    assert summary["dropped_iterations"] == dropped
    assert (
        f"!! DROPPED ITERATIONS: {dropped} arrivals found no free VU and were not sent (tight {dropped})"
        in r.stdout
    )
    # No catch-up burst: nothing is sent late, and never more than maxVUs at once.
    late = (s["started_at"] - s["scheduled_at"]).to_numpy()
    assert late.max() < 0.2, late.max()
    starts = s["started_at"].to_numpy()
    ends = starts + s["e2e_ms"].to_numpy() / 1000.0
    in_flight = max(((starts <= x) & (ends > x)).sum() for x in starts)
    assert in_flight <= 2, in_flight


def test_two_scenarios_told_apart_in_results_and_thresholds(faulty_server, tmp_path):
    scenario = _scenario(
        tmp_path,
        """
[scenarios.chat]
executor = "constant-vus"
vus = 2
duration = "3s"
protocol = "sse"
outputTokens = 4
promptTokens = 5

[scenarios.bulk]
executor = "constant-arrival-rate"
rate = 4
duration = "3s"
preAllocatedVUs = 8
protocol = "ws"
outputTokens = 16
promptTokens = "uniform:30,40"
startTime = "500ms"

[thresholds]
"e2e_ms{scenario:chat}" = ["max<900"]
"e2e_ms{scenario:bulk}" = ["min>900"]
"itl_ms{scenario:chat,protocol:sse}" = ["count>0"]
"e2e_ms" = ["max<900"]
""",
    )
    out = tmp_path / "run"
    r = streamslo_run(faulty_server.base_url, out, "--scenario", scenario, "--model", "timed")
    assert r.returncode == 99, r.stdout + r.stderr  # the unselected e2e_ms threshold fails
    s = streams(out)
    chat, bulk = s[s["scenario"] == "chat"], s[s["scenario"] == "bulk"]
    assert len(chat) + len(bulk) == len(s) and len(chat) >= 4 and len(bulk) == 12
    assert set(chat["protocol"]) == {"sse"} and set(bulk["protocol"]) == {"ws"}
    assert set(chat["tokens"]) == {4} and set(bulk["tokens"]) == {16}
    # Each scenario's prompt lengths (the faulty server counts the prompt's words).
    assert set(chat["usage_prompt_tokens"]) == {5}
    assert (
        bulk["usage_prompt_tokens"].between(30, 40).all()
        and bulk["usage_prompt_tokens"].nunique() > 1
    )
    assert chat["scheduled_at"].isna().all() and bulk["scheduled_at"].notna().all()
    slo = {
        c["metric"] + " " + c["expression"]: c
        for c in json.loads((out / "slo.json").read_text())["thresholds"]
    }
    assert slo["e2e_ms{scenario:chat} max<900"]["passed"]
    assert slo["e2e_ms{scenario:chat} max<900"]["observed"] == pytest.approx(
        chat["e2e_ms"].max(), abs=0.01
    )
    assert slo["e2e_ms{scenario:bulk} min>900"]["passed"]
    assert slo["e2e_ms{scenario:bulk} min>900"]["observed"] == pytest.approx(
        bulk["e2e_ms"].min(), abs=0.01
    )
    assert slo["itl_ms{scenario:chat,protocol:sse} count>0"]["passed"]
    assert not slo["e2e_ms max<900"]["passed"]
    run = json.loads((out / "run.json").read_text())
    assert [sc["name"] for sc in run["scenarios"]] == ["chat", "bulk"] and run[
        "schema_version"
    ] == SCHEMA_VERSION
    # Per-scenario figures: summary.json and the report's scenario table.
    figures = json.loads((out / "summary.json").read_text())["scenarios"]
    assert figures["chat"]["requests"] == len(chat) and figures["bulk"]["requests"] == 12
    assert figures["bulk"]["e2e_ms"]["p50"] == pytest.approx(bulk["e2e_ms"].median(), abs=0.01)
    from streamslo.reports.build import build_report

    result = build_report(None, out, tmp_path / "report" / "report.html")
    md = result.markdown.read_text()
    assert "### Scenarios: run" in md
    assert f"| chat | {len(chat)} | {len(chat)} | 0 |" in md and "| bulk | 12 | 12 | 0 |" in md
    assert json.loads(result.json.read_text())["scenarios"]["run"]["bulk"]["requests"] == 12


def test_soak_runs_a_constant_rate_scenario_without_stages(faulty_server, tmp_path):
    import subprocess
    import sys

    from tests.loadgen.helpers import REPO

    scenario = _scenario(
        tmp_path,
        """
[load]
max_tokens = 4
model = "timed"

[scenarios.steady]
executor = "constant-arrival-rate"
rate = 5
duration = "3s"
preAllocatedVUs = 4
gracefulStop = "2s"

[thresholds]
"itl_ms{scenario:steady}" = ["p(99)<500"]
""",
    )
    out = tmp_path / "soak"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "streamslo",
            "soak",
            "--scenario",
            scenario,
            "--host",
            faulty_server.base_url,
            "--out",
            str(out),
            "--allow-invalid",
        ],
        capture_output=True,
        text=True,
        timeout=90,
        cwd=REPO,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    s = streams(out)
    run = json.loads((out / "run.json").read_text())
    # 5/s for 3 s: 15 arrivals, each a stream or, when all 4 VUs were busy (a loaded machine
    # slows the streams), a dropped iteration (k6's rule: no catch-up burst).
    dropped = int(run.get("dropped_iterations") or 0)
    assert len(s) + dropped == 15 and dropped <= 2, (len(s), dropped)
    assert set(s["scenario"]) == {"steady"} and set(s["outcome"]) == {"ok"}
    assert run["duration_s"] == 3.0 and run["end_epoch"] - run["start_epoch"] < 15


def test_a_whole_run_load_option_beside_scenarios_is_refused(faulty_server, tmp_path):
    scenario = _scenario(
        tmp_path,
        """
[load]
stages = "2s:3"

[scenarios.a]
executor = "constant-vus"
duration = "2s"
""",
    )
    r = streamslo_run(faulty_server.base_url, tmp_path / "run", "--scenario", scenario, timeout=30)
    assert r.returncode == 2 and "remove stages" in r.stderr, r.stderr
    scenario = _scenario(tmp_path, '[scenarios.a]\nexecutor = "constant-vus"\nduration = "2s"\n')
    r = streamslo_run(
        faulty_server.base_url,
        tmp_path / "run",
        "--scenario",
        scenario,
        "--duration",
        "9",
        timeout=30,
    )
    assert r.returncode == 2 and "remove duration" in r.stderr, r.stderr


def test_a_bad_scenario_names_its_line_before_any_load(faulty_server, tmp_path):
    scenario = _scenario(
        tmp_path, '[scenarios.a]\nexecutor = "constant-vus"\nduration = "2s"\nrate = 3\n'
    )
    r = streamslo_run(faulty_server.base_url, tmp_path / "run", "--scenario", scenario, timeout=30)
    assert r.returncode == 2 and f"{scenario}:4: [scenarios.a] rate" in r.stderr, r.stderr
    assert not (tmp_path / "run").exists()


def test_scenarios_split_over_processes_and_drops_add_up(faulty_server, tmp_path):
    # Two generator processes (Locust's master and two workers): each takes every other
    # arrival and half of maxVUs; their drops reach the master and add up.
    scenario = _scenario(
        tmp_path,
        TIGHT
        + """
[scenarios.vus]
executor = "constant-vus"
vus = 3
duration = "3s"
gracefulStop = "3s"
""",
    )
    out = tmp_path / "run"
    r = streamslo_run(
        faulty_server.base_url, out, "--scenario", scenario, "--model", "timed", "--processes", "2"
    )
    assert r.returncode in (0, 99), r.stdout + r.stderr
    s = streams(out)
    run = json.loads((out / "run.json").read_text())
    procs = run["generator"]["per_process"]
    assert len(procs) == 2 and all(p["dropped_iterations"].get("tight", 0) > 0 for p in procs)
    tight = s[s["scenario"] == "tight"]
    assert len(tight) + run["dropped_iterations_by_scenario"]["tight"] == 60
    assert len(set(tight["scheduled_at"].round(3))) == len(tight)  # no arrival sent twice
    # Three VUs over two processes: never more than three streams of the scenario at once.
    v = s[s["scenario"] == "vus"]
    starts, ends = v["started_at"].to_numpy(), (v["started_at"] + v["e2e_ms"] / 1000.0).to_numpy()
    assert max(((starts <= x) & (ends > x)).sum() for x in starts) == 3


def test_protocol_mix_and_slow_reader_share_per_scenario(faulty_server, tmp_path):
    scenario = _scenario(
        tmp_path,
        """
[load]
max_tokens = 4

[scenarios.mix]
executor = "constant-arrival-rate"
rate = 30
duration = "2s"
preAllocatedVUs = 30
protocol = { sse = 3, ws = 1 }
slowReaders = 0.5

[scenarios.plain]
executor = "constant-vus"
vus = 1
duration = "2s"
protocol = "ws"
""",
    )
    out = tmp_path / "run"
    r = streamslo_run(
        faulty_server.base_url, out, "--scenario", scenario, "--model", "ok", "--seed", "11"
    )
    assert r.returncode == 0, r.stdout + r.stderr
    s = streams(out)
    mix, plain = s[s["scenario"] == "mix"], s[s["scenario"] == "plain"]
    assert len(mix) == 60 and len(plain) > 0
    ws_share = (mix["protocol"] == "ws").mean()
    slow_share = mix["user_class"].str.startswith("Slow").mean()
    # Seeded draws: a quarter WebSocket, half slow readers, give or take a binomial spread.
    assert 0.1 <= ws_share <= 0.4 and 0.3 <= slow_share <= 0.7, (ws_share, slow_share)
    assert set(mix["user_class"]) == {
        "SSEStreamUser",
        "SlowSSEStreamUser",
        "WebSocketStreamUser",
        "SlowWebSocketStreamUser",
    }
    assert set(plain["protocol"]) == {"ws"} and set(plain["user_class"]) == {"WebSocketStreamUser"}


def test_ramping_down_stops_a_vu_after_graceful_ramp_down(faulty_server, tmp_path):
    # Streams of 100 'timed' tokens last ~5.3 s; the target falls to 0 at 2 s: each VU's
    # stream is stopped 0.5 s later (recorded, cancelled), not left to run to its end.
    scenario = _scenario(
        tmp_path,
        """
[load]
max_tokens = 100

[scenarios.down]
executor = "ramping-vus"
startVUs = 2
stages = [{ duration = "2s", target = 2 }, { duration = "100ms", target = 0 }, { duration = "3s", target = 0 }]
gracefulRampDown = "500ms"
""",
    )
    out = tmp_path / "run"
    r = streamslo_run(faulty_server.base_url, out, "--scenario", scenario, "--model", "timed")
    assert r.returncode in (0, 99), r.stdout + r.stderr
    s = streams(out)
    assert len(s) == 2 and set(s["outcome"]) == {"cancelled"}, s[["outcome", "e2e_ms"]]
    assert (s["e2e_ms"] < 4000).all() and (s["e2e_ms"] > 2000).all(), s["e2e_ms"]
