"""Against a real Apple MLX LM ``mlx_lm.server`` (mlx-lm 0.32.2, MLX 0.32.4's Linux CPU build),
serving the tiny Llama of ``transformers_setup.py`` as it is, with no server flags. It answers
HTTP/1.0 and ends each body by closing the connection, says nothing of who serves the model,
takes ``ignore_eos`` and ``min_tokens`` and ignores both, and honours ``logit_bias``: the probes
find the length forced by a bias against the end-of-sequence id (from the model's folder), a
healthy server reads healthy, ``streamslo check`` passes, and a gateway's silent stops read
broken. Skipped unless ``STREAMSLO_MLX_DIR`` and ``STREAMSLO_TRANSFORMERS_DIR`` are set
(``tox -e mlx``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from streamslo.proxy.process import spawn_proxy
from tests.realserver.conftest import LOAD, REPO, run_streamslo

pytestmark = [pytest.mark.realserver, pytest.mark.load]


def test_a_healthy_mlx_server_reads_healthy_with_no_flags(mlx: Any, tmp_path: Path) -> None:
    run = run_streamslo(mlx.url, tmp_path / "run", *LOAD)
    s = run.streams
    counted = s[s["outcome"] != "cancelled"]
    ok = counted[counted["outcome"] == "ok"]
    assert len(counted) >= 20 and len(ok) >= 0.99 * len(counted), run.outcomes()
    assert (ok["usage_completion_tokens"] == 64).all() and (ok["finish_reason"] == "length").all()
    contract = run.run["contract"]
    statuses = {m["means"]: m["status"] for m in contract["means"]}
    assert statuses["ignore_eos"] == "ignored" and statuses["min_tokens"] == "ignored"
    assert contract["forced_length"] == "logit_bias" and contract["eos_token_ids"] == [2]
    assert run.run["truth"]["silent_stop"] == "a forced length (logit_bias)"


def test_check_passes(mlx: Any) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "streamslo", "check", mlx.url, "--no-ws"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "--forced-length logit_bias" in r.stdout and "--eos-token-id 2" in r.stdout


def test_silent_stops_in_front_of_it_read_broken(mlx: Any, tmp_path: Path) -> None:
    args = ["--upstream", mlx.url, "--silent-stop", "--probability", "0.3", "--seed", "4"]
    with spawn_proxy(args) as proxy:
        run = run_streamslo(proxy.url, tmp_path / "run", *LOAD)
    s = run.streams
    counted = s[s["outcome"] != "cancelled"]
    cut = counted[counted["outcome"] == "silent_truncation"]
    assert set(counted["outcome"]) == {"ok", "silent_truncation"}, run.outcomes()
    stops = proxy.stats["silent_stops"]
    probes = run.run["contract"]["probes"] + len(run.run["preflight"])
    assert stops - probes <= len(cut) <= stops, (len(cut), stops, probes)
