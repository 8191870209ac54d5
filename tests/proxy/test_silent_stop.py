"""``streamslo proxy --silent-stop``: a stream cut short and ended as if whole — a finish chunk
with "stop", a usage that counts what was sent, [DONE], a clean end — and everything else passed
through as it came; a run that forces the length reads each cut a silent truncation."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from streamslo.proxy import spawn_proxy
from streamslo.proxy.config import Faults, ProxyConfigError
from tests.loadgen.helpers import streamslo_run
from tests.server.servers import Server, start_server


@pytest.fixture(scope="module")
def bundled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = start_server(["--mode", "fixed"], tmp_path_factory.mktemp("bundled"))
    yield s
    s.stop()


def events(url: str, body: dict[str, object]) -> list[str]:
    req = urllib.request.Request(
        url + "/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        text = r.read().decode()
    return [line[6:] for line in text.split("\n") if line.startswith("data: ")]


BODY = {
    "messages": [{"role": "user", "content": "hi"}],
    "stream": True,
    "max_tokens": 12,
    "ignore_eos": True,
    "stream_options": {"include_usage": True},
}


def test_a_cut_stream_ends_as_if_it_were_whole(bundled: Server) -> None:
    with spawn_proxy(["--upstream", bundled.url, "--silent-stop", "--silent-stop-after", "5"]) as p:
        got = events(p.url, BODY)
    assert got[-1] == "[DONE]"
    chunks = [json.loads(e) for e in got[:-1]]
    content = [c for c in chunks if c["choices"] and c["choices"][0]["delta"].get("content")]
    assert len(content) == 5
    finish = [c for c in chunks if c["choices"] and c["choices"][0].get("finish_reason")]
    assert [c["choices"][0]["finish_reason"] for c in finish] == ["stop"]
    assert chunks[-1]["usage"]["completion_tokens"] == 5 and chunks[-1]["choices"] == []
    assert p.stats["silent_stops"] == 1 and p.stats["faulted"] == 1


def test_an_unselected_request_passes_as_it_came(bundled: Server) -> None:
    with spawn_proxy(["--upstream", bundled.url, "--silent-stop", "--every", "100"]) as p:
        got = events(p.url, BODY)
        models = urllib.request.urlopen(p.url + "/v1/models", timeout=10).read()
    content = [
        e
        for e in got[:-1]
        if json.loads(e)["choices"] and json.loads(e)["choices"][0]["delta"].get("content")
    ]
    assert len(content) == 12 and json.loads(got[-2])["usage"]["completion_tokens"] == 12
    assert b"streamslo-tiny" in models
    assert p.stats["silent_stops"] == 0


def test_silent_stop_takes_no_byte_level_fault_beside_it() -> None:
    with pytest.raises(ProxyConfigError, match="run a second proxy"):
        Faults(silent_stop=True, latency_s=0.1)
    with pytest.raises(ProxyConfigError, match="needs --silent-stop"):
        Faults(silent_stop_after=3)
    assert "silent-stop after 3 chunks" in Faults(silent_stop=True, silent_stop_after=3).describe()


@pytest.mark.load
def test_a_run_through_it_reads_each_cut_as_a_silent_truncation(
    bundled: Server, tmp_path: Path
) -> None:
    args = ["--upstream", bundled.url, "--silent-stop", "--probability", "0.5", "--seed", "2"]
    with spawn_proxy(args) as p:
        out = tmp_path / "run"
        r = streamslo_run(p.url, out, "--users", "4", "--duration", "4s", "--max-tokens", "16")
    s = pd.read_csv(out / "streams.csv")
    counted = s[s["outcome"] != "cancelled"]
    cut = counted[counted["outcome"] == "silent_truncation"]
    assert set(counted["outcome"]) == {"ok", "silent_truncation"}, r.stdout
    assert set(cut["cause"]) <= {"stopped_early", "counted_short"}
    run = json.loads((out / "run.json").read_text())
    probes = len(run["preflight"]) + run["contract"]["probes"]  # they went through it too
    assert p.stats["silent_stops"] - probes <= len(cut) <= p.stats["silent_stops"]
