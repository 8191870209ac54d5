"""``streamslo run --api openai-responses | anthropic-messages``: real headless Locust runs
against the bundled server playing a reasoning model, and against the faulty server's dialect
faults (every outcome as the dialect says; nothing cancelled)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from streamslo.results.columns import STREAM_COLUMNS
from streamslo.results.layout import SCHEMA_VERSION
from tests.faulty.constants import STALL_S
from tests.faulty.dialects import DIALECT_EXPECTED
from tests.faulty.scenarios import MIXES
from tests.loadgen.helpers import gaps, streams, streamslo_run
from tests.server.servers import Server, model_server

pytestmark = pytest.mark.load

APIS = ["openai-responses", "anthropic-messages"]
REASONING = 4
INTERVAL_MS = 20


@pytest.fixture(scope="module")
def reasoning_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with model_server(tmp_path_factory.mktemp("reasoning"), INTERVAL_MS, reasoning=REASONING) as s:
        yield s


@pytest.mark.parametrize("api", APIS)
def test_a_run_per_dialect_is_ok_with_ttfo(
    reasoning_server: Server, tmp_path: Path, api: str
) -> None:
    slo = tmp_path / "slo.toml"
    slo.write_text(
        '[thresholds]\nttfo_ms = ["p(50)<30000"]\n"itl_ms{token:answer}" = ["p(99)<10000"]\n'
        'truncation_rate = ["rate<0.001"]\n'
    )
    out = tmp_path / "run"
    r = streamslo_run(
        reasoning_server.url,
        str(out),
        "--api",
        api,
        "--users",
        "8",
        "--duration",
        "6",
        "--max-tokens",
        "12",
        "--drain",
        "10",
        "--slo",
        str(slo),
    )
    assert r.returncode == 0, r.stdout + r.stderr
    s = streams(out)
    assert list(s.columns) == list(STREAM_COLUMNS)
    assert len(s) >= 8 and set(s["outcome"]) == {"ok"}
    assert (s["tokens"] == s["usage_completion_tokens"]).all() and (s["tokens"] == 12).all()
    assert (s["reasoning_tokens"] == REASONING).all() and (s["tool_tokens"] == 0).all()
    # TTFO is the (REASONING + 1)-th token: TTFT plus the first REASONING gaps, exactly.
    g = gaps(out)
    lead = (s["ttfo_ms"] - s["ttft_ms"]).to_numpy()
    first = g[g["index"] <= REASONING].groupby("stream_id")["gap_ms"].sum()
    assert np.allclose(lead, first.reindex(s["stream_id"]).to_numpy(), atol=0.01)
    assert (
        np.median(lead) > REASONING * INTERVAL_MS / 4
    )  # paced by the server (a loose bound: shared CPUs)
    run = json.loads((out / "run.json").read_text())
    assert run["api"] == api and run["schema_version"] == SCHEMA_VERSION
    summary = json.loads((out / "summary.json").read_text())
    assert summary["reasoning_tokens"] == REASONING * len(s)
    assert summary["ttfo_ms"]["count"] == len(s)
    checks = {c["metric"]: c for c in json.loads((out / "slo.json").read_text())["thresholds"]}
    answer = checks["itl_ms{token:answer}"]
    assert answer["passed"] is True
    assert len(g) == 11 * len(s)
    # The answer's gaps are the last 12 - REASONING - 1 of each stream.
    from streamslo.figures.metrics import answer_gaps

    kept = answer_gaps(
        s.assign(stream_id=s["stream_id"].astype(str)),
        g.assign(stream_id=g["stream_id"].astype(str)),
    )
    assert len(kept) == (12 - REASONING - 1) * len(s)
    assert set(kept["index"]) == set(range(REASONING + 1, 12))


@pytest.mark.parametrize("api", APIS)
def test_the_faulty_dialect_mix_through_a_run(faulty_server, tmp_path: Path, api: str) -> None:
    out = tmp_path / "run"
    r = streamslo_run(
        f"{faulty_server.base_url}/s/mix_dialect",
        str(out),
        "--api",
        api,
        "--users",
        "9",
        "--duration",
        "6",
        "--max-tokens",
        "8",
        "--stall-timeout",
        "1",
        "--request-timeout",
        "4",
        # The mix's first answer may be one of its faults: the preflight would stop the run.
        "--drain",
        "6",
        "--no-preflight",
        timeout=150,
    )
    assert r.returncode == 99, r.stdout + r.stderr  # the default SLO fails: that is the point
    s = streams(out)
    expected = {DIALECT_EXPECTED[(name, api)] for name in MIXES["mix_dialect"]}
    got = set(s["outcome"])
    assert "cancelled" not in got
    assert got <= expected, got - expected
    assert {"ok", "truncated", "error_event", "silent_truncation", "stalled"} <= got
    stalled = s[s["outcome"] == "stalled"]
    # The keep-alive case is told as such. (On a loaded machine another case's stream may also
    # go a whole second without a token and stall: those say only how long.)
    kept = stalled[stalled["error"].str.contains("events kept the connection alive")]
    assert len(kept) >= 1 and stalled["error"].str.startswith("no ").all(), stalled
    # The stall timeout (1 s) counts from the last token, through the keep-alives: each stream
    # ends stalled well before the server's keep-alives stop (STALL_S after the last token;
    # a reader fooled by them would wait for that FIN). From the first token, not the request,
    # so that a loaded machine's late start does not count. Not in a run the generator itself
    # calls invalid: a CPU-starved machine held its loop for seconds (run.json says so, and
    # why), and no timing of that run holds.
    run = json.loads((out / "run.json").read_text())
    if run["valid"]:
        assert (kept["e2e_ms"] - kept["ttft_ms"] < STALL_S * 1000 - 500).all(), kept
    else:
        assert "greenlet lag" in run["invalid_reason"], run["invalid_reason"]
