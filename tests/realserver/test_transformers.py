"""Against a real Hugging Face ``transformers serve`` (transformers 5.25.0, the tiny Llama of
``transformers_setup.py``), with no server flags: the contract probes learn what it takes (it
refuses ``ignore_eos`` and ``min_tokens`` with 422, honours ``generation_config``'s
``min_new_tokens``, sends no ``[DONE]``, and no chunk for a token without text), a healthy
server reads healthy, ``streamslo check`` passes and prints the command line, and a gateway that
cuts 30 % of the streams and says "stop" reads broken. Skipped unless
``STREAMSLO_TRANSFORMERS_DIR`` is set (``tox -e transformers``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from streamslo.proxy.process import spawn_proxy
from tests.realserver.conftest import LOAD, REPO, assert_healthy, run_streamslo

pytestmark = [pytest.mark.realserver, pytest.mark.load]

#: What a run against it adapts to, in order.
ADAPTS = ["--no-done-marker", "--forced-length min_new_tokens", "--coalesced-chunks"]


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_a_healthy_transformers_serve_reads_healthy_with_no_flags(
    transformers: Any, tmp_path: Path, endpoint: str
) -> None:
    run = run_streamslo(transformers.url, tmp_path / "run", "--endpoint", endpoint, *LOAD)
    assert_healthy(run)
    contract = run.run["contract"]
    assert [a["flag"] for a in contract["adaptations"]] == ADAPTS, contract
    statuses = {m["means"]: m["status"] for m in contract["means"]}
    assert statuses["ignore_eos"] == "rejected" and statuses["min_tokens"] == "rejected"
    assert run.run["truth"]["silent_stop"] == "a forced length (min_new_tokens)"
    assert run.run["truth"]["missing"] == ["lost_chunk"]
    for flag in ADAPTS:
        assert f"streamslo run:   {flag}: " in run.stderr


def test_check_passes_and_prints_the_command_line(transformers: Any) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "streamslo", "check", transformers.url + "/v1", "--no-ws"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"run: streamslo run --host {transformers.url}/v1   (it adapts by itself)" in r.stdout
    assert "spelled out: " + " ".join(["streamslo run --host", transformers.url + "/v1", *ADAPTS])
    assert "sees a silent stop: by a forced length (min_new_tokens)" in r.stdout
    assert "cannot see a lost chunk" in r.stdout


def test_a_gateway_that_cuts_a_third_of_the_streams_and_says_stop_reads_broken(
    transformers: Any, tmp_path: Path
) -> None:
    args = ["--upstream", transformers.url, "--silent-stop", "--probability", "0.3", "--seed", "5"]
    with spawn_proxy(args) as proxy:
        run = run_streamslo(proxy.url, tmp_path / "run", *LOAD)
    s = run.streams
    counted = s[s["outcome"] != "cancelled"]
    cut = counted[counted["outcome"] == "silent_truncation"]
    ok = counted[counted["outcome"] == "ok"]
    assert len(cut) + len(ok) == len(counted), run.outcomes()
    assert set(cut["finish_reason"]) == {"stop"} and set(cut["cause"]) <= {
        "stopped_early",
        "counted_short",
    }
    # Each cut made during the load reads broken: the proxy also cut some of the probes
    # before the load (at most one each).
    stops = proxy.stats["silent_stops"]
    probes = run.run["contract"]["probes"] + len(run.run["preflight"])
    assert stops - probes <= len(cut) <= stops, (len(cut), stops, probes)
    assert 0.15 < len(cut) / len(counted) < 0.5, run.outcomes()
    assert (ok["usage_completion_tokens"] == 64).all()
