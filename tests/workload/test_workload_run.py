"""Workloads through a real ``streamslo run`` (Locust subprocess) against the faulty server,
which counts ``usage.prompt_tokens`` as the words of every message it was sent."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from streamslo.results.layout import SCHEMA_VERSION
from tests.faulty.fixtures import faulty_server  # noqa: F401
from tests.loadgen.helpers import streamslo_run

pytestmark = pytest.mark.load


def test_multi_turn_conversations_carry_their_history(faulty_server, tmp_path):  # noqa: F811
    out = tmp_path / "run"
    r = streamslo_run(
        faulty_server.base_url,
        out,
        "--model",
        "ok",
        "--users",
        "3",
        "--duration",
        "3",
        "--protocol",
        "mixed",
        "--max-tokens",
        "4",
        "--turns",
        "3",
        "--prompt-tokens",
        "5",
        "--system-prompt",
        "be brief",
        "--drain",
        "5",
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    s = pd.read_csv(out / "streams.csv")
    s = s[s["outcome"] == "ok"]
    assert set(s["turn"]) == {1, 2, 3} and set(s["protocol"]) == {"sse", "ws"}
    # Turn 1: the system prompt (2 words) and a 5-word prompt; each later turn adds the answer
    # as it streamed and a new 5-word prompt.
    assert set(s.loc[s["turn"] == 1, "usage_prompt_tokens"]) == {7}
    for _cid, conv in s.groupby("conversation_id"):
        conv = conv.sort_values("turn")
        grows = conv["usage_prompt_tokens"].diff().dropna()
        assert (grows >= 6).all(), conv  # 5 new words and at least one word of answer
        assert conv["protocol"].nunique() == 1  # one user, one transport
    assert s["conversation_id"].nunique() >= 3
    run = json.loads((out / "run.json").read_text())
    assert run["workload"]["turns"] == 3 and run["workload"]["system_prompt"] is True
    assert run["schema_version"] == SCHEMA_VERSION


def test_a_dataset_sets_each_requests_max_tokens_and_goodput_is_recorded(faulty_server, tmp_path):  # noqa: F811
    data = tmp_path / "d.jsonl"
    data.write_text(
        "".join(
            json.dumps({"prompt": f"prompt number {i}", "output_tokens": 3 + i}) + "\n"
            for i in range(4)
        )
    )
    out = tmp_path / "run"
    r = streamslo_run(
        faulty_server.base_url,
        out,
        "--model",
        "ok",
        "--users",
        "2",
        "--duration",
        "2",
        "--dataset",
        str(data),
        "--goodput",
        "ttft:5000",
        "e2el:20000",
        "--drain",
        "5",
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    s = pd.read_csv(out / "streams.csv")
    # Entries are sampled: a slow machine sends fewer requests, so not every entry may come up.
    assert set(s["expected_tokens"]) <= {3, 4, 5, 6} and s["expected_tokens"].nunique() >= 2
    assert (s["tokens"] == s["expected_tokens"]).all()
    assert (s["usage_prompt_tokens"] == 3).all()
    run = json.loads((out / "run.json").read_text())
    assert run["goodput"] == {"ttft_ms": 5000.0, "e2e_ms": 20000.0}
    assert run["workload"]["dataset"]["entries"] == 4 and run["workload"]["source"] == "dataset"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["goodput_fraction"] == 1.0 and summary["goodput_per_s"] > 0


def test_a_bad_dataset_is_bad_input_before_any_load(faulty_server, tmp_path):  # noqa: F811
    data = tmp_path / "d.jsonl"
    data.write_text('{"nope": 1}\n')
    r = streamslo_run(faulty_server.base_url, tmp_path / "run", "--dataset", str(data))
    assert r.returncode == 2 and "d.jsonl:1: no prompt" in r.stderr
