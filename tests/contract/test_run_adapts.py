"""``streamslo run`` learns a server's contract before the load and adapts, with no flags: a
healthy server reads healthy; a gateway that cuts streams and says "stop" reads broken, by a
forced length where one works and by reference replies where none does; a run that could not
see silent stops says so, and an SLO that requires them fails it."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from streamslo.proxy.process import spawn_proxy
from tests.contract.server import ContractServer, contract_server
from tests.loadgen.helpers import REPO, streamslo_run

pytestmark = pytest.mark.load

LOAD = (
    "--users",
    "4",
    "--spawn-rate",
    "4",
    "--duration",
    "4s",
    "--max-tokens",
    "24",
    "--drain",
    "10",
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ContractServer]:
    with contract_server(tmp_path_factory.mktemp("model")) as s:
        yield s


def read(out: Path) -> tuple[dict, dict, pd.DataFrame]:
    run = json.loads((out / "run.json").read_text())
    summary = json.loads((out / "summary.json").read_text())
    return run, summary, pd.read_csv(out / "streams.csv")


def test_a_healthy_server_with_no_ignore_eos_reads_healthy_with_no_flags(
    server: ContractServer, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    r = streamslo_run(server.url("tfserve"), out, *LOAD)
    assert r.returncode == 0, r.stdout + r.stderr
    # Each adaptation is said in one line before any load ...
    for line in (
        "streamslo run:   --no-done-marker: streams end with the body after their stop reason",
        "streamslo run:   --forced-length min_new_tokens: proven",
        "streamslo run:   --coalesced-chunks: a whole stream's usage counts",
        "streamslo run: this run cannot see a lost chunk",
    ):
        assert line in r.stderr, r.stderr
    # ... and kept in run.json, with what the run could check.
    run, summary, streams = read(out)
    assert [a["flag"] for a in run["contract"]["adaptations"]] == [
        "--no-done-marker",
        "--forced-length min_new_tokens",
        "--coalesced-chunks",
    ]
    assert run["forced_length"] == "min_new_tokens"
    assert run["truth"]["silent_stop"] == "a forced length (min_new_tokens)"
    assert summary["truth"]["missing"] == ["lost_chunk"]
    assert len(streams) > 8 and set(streams["outcome"]) == {"ok"}
    assert set(streams["cause"]) == {"complete"}
    assert "checks    sees a cut stream: by the stop reason at the body's end" in r.stdout


def test_a_gateway_that_cuts_streams_and_says_stop_reads_broken(
    server: ContractServer, tmp_path: Path
) -> None:
    """The third incident behind a server that refuses ignore_eos: the cut streams are read as
    silent truncations by the forced length the probes found, the rest ok."""
    args = ["--upstream", server.url("tfserve").rsplit("/p/", 1)[0], "--silent-stop"]
    with spawn_proxy([*args, "--probability", "0.3", "--seed", "3"]) as proxy:
        out = tmp_path / "run"
        r = streamslo_run(f"{proxy.url}/p/tfserve", out, *LOAD)
    assert r.returncode == 99, r.stdout + r.stderr
    run, _, streams = read(out)
    cut = streams[streams["outcome"] == "silent_truncation"]
    assert set(streams["outcome"]) == {"ok", "silent_truncation"}
    assert set(cut["cause"]) <= {"stopped_early", "counted_short"}
    assert set(cut["finish_reason"]) == {"stop"}
    # Every cut the gateway made during the load is a silent truncation, and nothing else is:
    # the probes before the load went through it too (at most one cut each).
    probes = run["contract"]["probes"] + len(run["preflight"])
    stops = proxy.stats["silent_stops"]
    assert stops - probes <= len(cut) <= stops, (len(cut), stops, probes)
    assert 0.1 < len(cut) / len(streams) < 0.6
    # The advice rests on what the probes proved: no hint to drop the forced length.
    assert "--forced-length none" not in r.stdout and "--no-ignore-eos" not in r.stdout


def test_where_no_means_works_reference_replies_catch_the_cut(
    server: ContractServer, tmp_path: Path
) -> None:
    args = ["--upstream", server.url("stubborn").rsplit("/p/", 1)[0], "--silent-stop"]
    with spawn_proxy([*args, "--every", "3"]) as proxy:
        out = tmp_path / "run"
        r = streamslo_run(f"{proxy.url}/p/stubborn", out, *LOAD, "--reference-prompts", "4")
    assert "streamslo run:   --reference on: no forced length works here" in r.stderr, r.stderr
    run, summary, streams = read(out)
    refs = json.loads((out / "references.json").read_text())
    assert len(refs["replies"]) == 4 and refs["missing"] == []
    assert run["truth"]["silent_stop"].startswith("reference replies")
    counted = streams[streams["outcome"] != "cancelled"]
    cut = counted[counted["outcome"] == "silent_truncation"]
    assert len(cut) >= 1 and set(cut["cause"]) == {"reference_prefix"}
    assert set(cut["reference"]) == {"prefix"}
    whole = counted[counted["outcome"] == "ok"]
    assert set(whole["reference"]) == {"match"}
    assert summary["truth"]["reference_replies"]["prefix"] == len(cut)
    assert summary["truth"]["unchecked_stops"] == 0
    assert proxy.stats["silent_stops"] >= len(cut)


def test_a_run_that_could_not_see_silent_stops_says_so_and_fails_an_slo_that_requires_it(
    server: ContractServer, tmp_path: Path
) -> None:
    slo = tmp_path / "slo.toml"
    slo.write_text(
        '[thresholds]\ntruncation_rate = ["rate<0.01"]\n\n[truth]\nrequire = ["silent_stop"]\n'
    )
    out = tmp_path / "run"
    # (48 tokens: its answers end by themselves after 40, an ordinary stop)
    r = streamslo_run(server.url("chaotic"), out, *LOAD, "--max-tokens", "48", "--slo", str(slo))
    assert r.returncode == 99, r.stdout + r.stderr
    assert "requires that a run sees silent stop; this run could not" in r.stderr
    assert "greedy replies differ" in r.stderr
    run, summary, streams = read(out)
    assert run["truth"]["silent_stop"] is None
    ok = int((streams["outcome"] == "ok").sum())
    assert ok > 0 and summary["truth"]["unchecked_stops"] == ok
    assert f"!! {ok:,} of {ok:,} ok streams ended with an ordinary stop" in r.stdout
    v = subprocess.run(
        [sys.executable, "-m", "streamslo", "verify", str(out), "--slo", str(slo)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert v.returncode == 99, v.stdout + v.stderr
    assert f"{slo}:5 requires that a run sees silent stop" in v.stdout
    # The same directory under the default SLO: every threshold holds, and the report says
    # what the run could not see.
    rep = subprocess.run(
        [sys.executable, "-m", "streamslo", "report", str(out), "--out", str(tmp_path / "r.html")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert rep.returncode == 0, rep.stderr
    md = (tmp_path / "r.md").read_text()
    assert "could NOT see a silent stop" in md and "ordinary stop it could not check" in md
