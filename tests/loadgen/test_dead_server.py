"""A server that stops answering, through real runs: the closed loop does not spin against a
dead port, the default SLO fails on connection errors, and streams kept alive without tokens
end ``stalled`` (never ``cancelled``) on SSE and WebSocket."""

from __future__ import annotations

import json

import pytest

from streamslo.loadgen.backoff import BACKOFF_CAP_S, PACED_ATTEMPTS_PER_S, Pacer, UserBackoff
from streamslo.stream.outcome import Outcome
from streamslo.stream.timing import StreamRecord
from tests.faulty.process import unused_port
from tests.loadgen.helpers import streams, streamslo_run


def _rec(outcome: str, status: int | None) -> StreamRecord:
    rec = StreamRecord("s", "sse", "T", 0.0, 0.0, status=status)
    rec.outcome = Outcome(outcome)
    return rec


def test_pacer_spaces_attempts_while_failing_and_stops_on_an_answer():
    now = [100.0]
    pacer = Pacer(rate=50.0, clock=lambda: now[0])
    assert pacer.slot() == 0.0  # the server answers: no wait
    pacer.record(_rec("connect_error", None))
    waits = [pacer.slot() for _ in range(500)]  # 500 users at once
    assert (
        waits[0] == 0.0 and waits[1] == pytest.approx(0.02) and waits[-1] == pytest.approx(499 / 50)
    )
    pacer.record(_rec("truncated", 200))  # any answer ends the pacing
    assert pacer.slot() == 0.0


def test_user_backoff_doubles_to_its_cap_and_resets():
    slept: list[float] = []
    backoff = UserBackoff(Pacer(), slept.append)
    for _ in range(8):
        backoff.after([_rec("connect_error", None)])
    assert slept[:3] == pytest.approx([0.1, 0.2, 0.4]) and slept[-1] == BACKOFF_CAP_S
    backoff.after([_rec("http_5xx", 503)])
    backoff.after([_rec("connect_error", None)])
    assert slept[-1] == pytest.approx(0.1)


@pytest.mark.load
def test_dead_port_is_paced_and_fails_the_default_slo(tmp_path):
    """200 users against a closed port: attempts per second stay under 100 after the first
    wave (each user's first attempt), and the default SLO fails on connect_error_rate."""
    out = tmp_path / "run"
    r = streamslo_run(
        f"http://127.0.0.1:{unused_port()}",
        out,
        "--model",
        "m",
        "--users",
        "200",
        "--duration",
        "6",
        "--protocol",
        "mixed",
        "--max-tokens",
        "8",
        "--drain",
        "2",
        "--no-preflight",  # the load's own pacing is under test, not the preflight's stop
    )
    assert r.returncode == 99, r.stdout + r.stderr
    s = streams(out)
    assert set(s["outcome"]) == {"connect_error"}
    t = s["started_at"] - s["started_at"].min()
    per_s = t.astype(int).value_counts().sort_index()
    after_first_wave = per_s[per_s.index >= 1]  # the first wave is every user's first attempt
    assert len(after_first_wave) >= 3
    assert after_first_wave.max() < 100, per_s.to_dict()
    assert after_first_wave.max() <= PACED_ATTEMPTS_PER_S * 1.2 + 5
    slo = json.loads((out / "slo.json").read_text())
    failed = {c["metric"] for c in slo["thresholds"] if not c["passed"]}
    assert "connect_error_rate" in failed
    assert "connect errors 100.000 %" in r.stdout  # the summary shows them


@pytest.mark.load
@pytest.mark.parametrize("scenario", ["keepalive_comments", "keepalive_empty_deltas"])
def test_kept_alive_streams_end_stalled_not_cancelled(faulty_server, tmp_path, scenario):
    """A long request timeout and a drain longer than the stall timeout: streams kept alive
    without tokens end ``stalled`` within the stall timeout + 1 s; none is ``cancelled``."""
    out = tmp_path / "run"
    r = streamslo_run(
        faulty_server.url(scenario),
        out,
        "--model",
        scenario,
        "--users",
        "6",
        "--duration",
        "3",
        "--protocol",
        "mixed",
        "--max-tokens",
        "8",
        "--stall-timeout",
        "1.5",
        "--drain",
        "4",
        "--request-timeout",
        "300",
        # The preflight's own streams would stall too, 5 s a protocol, before any load: the
        # load's streams are under test here (the preflight's verdicts: first_contact).
        "--no-preflight",
    )
    assert r.returncode == 99, r.stdout + r.stderr
    s = streams(out)
    assert len(s) >= 6 and set(s["protocol"]) == {"sse", "ws"}
    assert set(s["outcome"]) == {"stalled"}, s[["outcome", "error"]].to_dict("records")
    assert s["error"].str.contains("kept the connection alive").all()
    # The last token came at ttft + the stream's other gaps; the stall ended it 1.5-2.5 s later.
    assert (s["max_gap_ms"] >= 1500 * 0.95).all() and (s["max_gap_ms"] <= 2500).all()


@pytest.mark.load
def test_duration_is_the_length_of_the_load(faulty_server, tmp_path):
    """``--duration 5`` loads for 5 s from the first request: start-up (spawn, the model
    lookup, test-start work) is not taken out of it. Streams last ~0.35 s, so the last one
    starts within 0.5 s of the end."""
    out = tmp_path / "run"
    r = streamslo_run(
        faulty_server.base_url,
        out,
        "--users",
        "4",
        "--duration",
        "5",
        "--model",
        "timed",
        "--max-tokens",
        "2",
        "--drain",
        "5",
    )
    assert r.returncode in (0, 99), r.stdout + r.stderr
    s = streams(out)
    load = s["started_at"].max() - s["started_at"].min()
    # Never longer than asked; as long, less the last stream (a user starts no stream its time
    # cannot hold): 0.35 s on a quiet machine (4.5 s or more), longer on a loaded one.
    last = s["e2e_ms"].max() / 1000
    assert 5 - last - 0.15 <= load <= 5.05, (load, last)


def test_a_waiting_user_stops_waiting_when_the_server_answers_again():
    now = [0.0]
    pacer = Pacer(rate=50.0, clock=lambda: now[0])
    pacer.record(_rec("connect_error", None))
    for _ in range(100):
        pacer.slot()  # 100 users queued: the next slot is 2 s away
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s
        if len(slept) == 2:
            pacer.record(_rec("ok", 200))  # meanwhile another user's request got an answer

    UserBackoff(pacer, sleep).before()
    assert slept == [0.25, 0.25]  # not the whole 2 s


@pytest.mark.load
def test_a_server_killed_mid_run_fails_the_default_slo(tmp_path):
    """Fast streams, the server killed (SIGKILL) halfway through, nothing left in flight: the
    default SLO fails on connect_error_rate, and the refused attempts stay under 100/s."""
    import subprocess
    import sys
    import time

    from tests.faulty.process import start_faulty_server
    from tests.loadgen.helpers import REPO, wait_rows

    out = tmp_path / "run"
    with start_faulty_server(quiet=True) as server:
        cmd = [
            sys.executable,
            "-m",
            "streamslo",
            "run",
            "--host",
            server.base_url,
            "--out",
            str(out),
            "--allow-invalid",
            "--model",
            "ok",
            "--users",
            "50",
            "--duration",
            "10",
            "--max-tokens",
            "4",
            "--drain",
            "2",
        ]
        run = subprocess.Popen(
            cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        # Killed once the load has run a while (its rows flushed), however long Locust took to
        # start: a fixed sleep could kill the server before the first stream.
        wait_rows(out / "streams.csv", run, rows=150)
        server.process.kill()
        killed_at = time.time()
        stdout, _ = run.communicate(timeout=120)
    assert run.returncode == 99, stdout
    s = streams(out)
    before = s[s["started_at"] < killed_at - 0.5]
    after = s[s["started_at"] > killed_at + 1.0]
    assert (before["outcome"] == "ok").mean() > 0.99 and len(before) > 100
    assert set(after["outcome"]) == {"connect_error"}
    per_s = (after["started_at"] - killed_at).astype(int).value_counts()
    assert per_s.max() < 100, per_s.to_dict()
    slo = json.loads((out / "slo.json").read_text())
    verdicts = {c["metric"]: c["passed"] for c in slo["thresholds"]}
    assert verdicts["connect_error_rate"] is False
    assert "connect errors" in stdout
    # Users waiting for a paced slot when the load's time ran out start nothing after it.
    assert s["started_at"].max() - s["started_at"].min() <= 10.5
