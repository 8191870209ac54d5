"""Against a real vLLM (its CPU build serving the tiny Llama of ``vllm_setup.py``), with no
server-specific flags: a healthy server reads healthy, a too-long ``max_tokens`` is the
client's fault with vLLM's message, the server's own series are scraped, and a killed engine
fails the default SLO. Skipped unless ``STREAMSLO_VLLM_VENV`` is set (``tox -e vllm``).

The last test kills the module's server: keep it last.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.realserver.conftest import (
    AGENTIC,
    LOAD,
    REPO,
    Run,
    assert_sessions_whole,
    run_command,
    run_streamslo,
)
from tests.realserver.conftest import assert_healthy as _healthy

pytestmark = [pytest.mark.realserver, pytest.mark.load]


@pytest.fixture(scope="module")
def chat_run(vllm: Any, tmp_path_factory: pytest.TempPathFactory) -> Run:
    out = tmp_path_factory.mktemp("chat") / "run"
    return run_streamslo(
        vllm.url, out, "--endpoint", "chat", *LOAD, "--metrics-url", vllm.url + "/metrics"
    )


@pytest.fixture(scope="module")
def completions_run(vllm: Any, tmp_path_factory: pytest.TempPathFactory) -> Run:
    out = tmp_path_factory.mktemp("completions") / "run"
    return run_streamslo(vllm.url, out, "--endpoint", "completions", *LOAD)


def test_a_healthy_vllm_is_all_ok_on_chat(chat_run: Run) -> None:
    _healthy(chat_run)


def test_a_healthy_vllm_is_all_ok_on_completions(completions_run: Run) -> None:
    _healthy(completions_run)


def test_a_healthy_vllm_is_all_ok_on_responses(vllm: Any, tmp_path: Path) -> None:
    """/v1/responses: vLLM ends a forced length with response.completed holding an incomplete
    response (max_output_tokens), and sends no delta for a held-back token; the final
    response's text equals the deltas', so every stream is whole (read 0 of 362 ok before)."""
    run = run_streamslo(vllm.url, tmp_path / "run", "--api", "openai-responses", *LOAD)
    _healthy(run, finish_reasons=("max_output_tokens", "completed"))


@pytest.mark.parametrize("tools", ["none", "off"])
def test_a_short_agentic_replay_on_vllm_is_whole(vllm: Any, tmp_path: Path, tools: str) -> None:
    """Synthetic sessions (4 steps, a fan-out of 2 and a join) against vLLM: every step ok, every
    session whole, each step's prompt the context its ancestors built (it grows with depth).
    vLLM here runs without a tool parser: a tool step sends the tool with tool_choice none (or
    no tool at all)."""
    run = run_streamslo(vllm.url, tmp_path / "run", *AGENTIC, "--session-tools", tools)
    assert_sessions_whole(run)


def test_a_healthy_vllm_is_all_ok_on_messages(vllm: Any, tmp_path: Path) -> None:
    """/v1/messages: vLLM ignores ignore_eos there and merges tokens into one delta without a
    count (read 36 of 393 ok before); the run says so, judges it without a forced length and
    counts tokens by usage."""
    run = run_streamslo(vllm.url, tmp_path / "run", "--api", "anthropic-messages", *LOAD)
    s = run.streams
    counted = s[s["outcome"] != "cancelled"]
    ok = counted[counted["outcome"] == "ok"]
    msg = f"outcomes {run.outcomes()}: {counted['error'].value_counts().head(3).to_dict()}"
    assert len(counted) >= 20 and len(ok) >= 0.99 * len(counted), msg
    assert (ok["tokens"] == ok["usage_completion_tokens"]).all(), msg
    assert ok["finish_reason"].isin(["max_tokens", "end_turn"]).all(), msg
    assert "vLLM's /v1/messages is known to ignore a forced length" in run.stderr
    preflight = run.run["preflight"]
    assert preflight[0]["engine"] == "vllm" and len(preflight[0]["adapted"]) == 1
    assert "--forced-length none" in [a["flag"] for a in run.run["contract"]["adaptations"]]
    # With no forced length, what shows a silent stop there is the reference replies (vLLM's
    # greedy replies repeat), or nothing: the run says which.
    assert run.run["truth"]["silent_stop"] in (None, "reference replies (16 prompts, greedy)")


def test_check_passes_a_healthy_vllm_in_every_dialect(vllm: Any) -> None:
    for api in ("openai-chat", "openai-completions", "openai-responses", "anthropic-messages"):
        proc = subprocess.run(
            [sys.executable, "-m", "streamslo", "check", vllm.url, "--api", api, "--no-ws"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, (api, proc.stdout[-2000:])
        assert "a run against this server needs" not in proc.stdout, (api, proc.stdout)


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_with_coalesced_chunks_a_healthy_vllm_is_all_ok(
    vllm: Any, tmp_path: Path, endpoint: str
) -> None:
    """What docs/servers.md tells vLLM users today: complete by [DONE], finish "length" and
    usage = max_tokens, tokens from usage (chunks are merged and some are empty)."""
    run = run_streamslo(
        vllm.url, tmp_path / "run", "--endpoint", endpoint, *LOAD, "--coalesced-chunks"
    )
    _healthy(run)


def test_the_scrape_shows_vllms_own_series(chat_run: Run, tmp_path: Path) -> None:
    from streamslo.reports import build_report

    lines = [
        json.loads(x) for x in (chat_run.out / "server" / "metrics.jsonl").read_text().splitlines()
    ]
    assert len(lines) >= 5
    names = {k.split("{")[0] for ln in lines for k in ln["metrics"]}
    assert {
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:num_preemptions_total",
        "process_cpu_seconds_total",
    } <= names
    res = build_report(None, chat_run.out, tmp_path / "report.html", resamples=50)
    (server,) = json.loads(res.json.read_text())["server"]
    by = {r["title"]: r for r in server["samples"] if r["title"]}
    assert 1 <= by["vLLM running requests"]["value"] <= 4  # 4 users
    cpu = by["server process CPU"]
    # the run's CPU (an increase over the run), not vLLM's lifetime since start-up
    assert cpu["kind"] == "increase" and 0 < cpu["value"] < cpu["last"]
    assert "own series over the run" in res.html.read_text()


def test_max_tokens_beyond_the_models_length_is_http_4xx_with_vllms_message(
    vllm: Any, tmp_path: Path
) -> None:
    run = run_streamslo(
        vllm.url,
        tmp_path / "run",
        "--endpoint",
        "chat",
        "--users",
        "1",
        "--duration",
        "3s",
        "--max-tokens",
        "1000",
        "--allow-invalid",
    )
    assert set(run.outcomes()) == {"http_4xx"}, run.outcomes()
    assert (run.streams["status"] == 400).all()
    assert (
        run.streams["error"]
        .str.contains("max_tokens=1000 cannot be greater than max_model_len=512")
        .all()
    )
    assert run.code == 99  # nothing began: the default SLO's rates have no data


def test_a_killed_engine_is_classified_and_fails_the_default_slo(vllm: Any, tmp_path: Path) -> None:
    """SIGKILL to vLLM's engine processes 8 s into a 25 s run: the streams in flight and
    every request after it fail, and the default SLO fails. (Kills this module's server.)"""
    out = tmp_path / "run"
    # A long run (400 tokens a stream) that the kill cuts short.
    cmd = run_command(
        vllm.url,
        out,
        "--endpoint",
        "chat",
        *LOAD[:4],  # users and spawn rate
        "--duration",
        "25s",
        "--max-tokens",
        "400",
        "--allow-invalid",
    )
    proc = subprocess.Popen(
        cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        time.sleep(8)
        engines = vllm.engine_pids()
        assert engines, "no engine process under the API server"
        killed_at = time.time()
        for pid in engines:
            os.kill(pid, signal.SIGKILL)
        _, stderr = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    run = Run(proc.returncode, out, stderr)
    outcomes = run.outcomes()
    assert run.code == 99, (outcomes, stderr[-2000:])
    after = run.streams[run.streams["started_at"] > killed_at + 1]
    assert len(after) and (after["outcome"] != "ok").all(), after["outcome"].value_counts()
    failed = {k: v for k, v in outcomes.items() if k not in ("ok", "cancelled")}
    assert set(failed) <= {"error_event", "truncated", "http_5xx", "connect_error", "stalled"}, (
        outcomes
    )
    slo = json.loads((out / "slo.json").read_text())
    assert any(not t["passed"] for t in slo["thresholds"]), slo
