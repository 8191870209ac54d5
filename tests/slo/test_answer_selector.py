"""``itl_ms{token:answer}`` and ``ttfo_ms``: the answer's own gaps, found on each stream's clock."""

from __future__ import annotations

import itertools

import pandas as pd
import pytest

from streamslo.figures.metrics import answer_gaps, select, trend_samples
from streamslo.results.layout import RunData
from streamslo.slo import thresholds


def _run() -> RunData:
    # a: 3 reasoning tokens then 4 answer tokens, 10 ms apart, answer gaps 20 ms;
    # b: no reasoning (every gap is the answer's); c: reasoning only (no answer gap).
    streams = pd.DataFrame(
        {
            "stream_id": pd.array(["a", "b", "c"], dtype="string"),
            "status": pd.array([200, 200, 200], dtype="Int64"),
            "outcome": pd.array(["ok", "ok", "ok"], dtype="string"),
            "started_at": [100.0, 100.0, 100.0],
            "scheduled_at": [None, None, None],
            "ttft_ms": [50.0, 40.0, 30.0],
            "ttfo_ms": [80.0, 40.0, None],
            "e2e_ms": [200.0, 200.0, 200.0],
            "tokens": pd.array([7, 3, 3], dtype="Int64"),
            "reasoning_tokens": pd.array([3, 0, 3], dtype="Int64"),
            "protocol": pd.array(["sse"] * 3, dtype="string"),
        }
    )
    rows = []
    for sid, first_s, gaps in (
        ("a", 1.05, [10, 10, 10, 20, 20, 20]),
        ("b", 2.04, [0, 5]),
        ("c", 3.03, [7, 7]),
    ):
        t = first_s
        for i, g in enumerate(gaps, 1):
            t += g / 1000.0
            rows.append({"stream_id": sid, "index": i, "gap_ms": float(g), "t": t, "open": False})
    return RunData(path=None, run={"valid": True}, streams=streams, gaps=pd.DataFrame(rows))  # type: ignore[arg-type]


def test_answer_gaps_are_those_after_the_first_answer_token():
    data = _run()
    kept = answer_gaps(data.streams, data.gaps)
    got = {(s, int(i)) for s, i in zip(kept["stream_id"], kept["index"], strict=True)}
    assert got == {("a", 4), ("a", 5), ("a", 6), ("b", 1), ("b", 2)}
    sub = select(data, {"token": "answer"})
    assert sorted(trend_samples(sub, "itl_ms").tolist()) == [0.0, 5.0, 20.0, 20.0, 20.0]
    assert sorted(trend_samples(data, "ttfo_ms").tolist()) == [40.0, 80.0]


def test_tokens_read_together_are_told_apart_by_count():
    """One read held the last reasoning token and the first two answer tokens (one time for
    all three, gaps of 0): the gap that ends at the first answer token is not the answer's, the
    one that ends at the second is, though both end at the same instant."""
    streams = pd.DataFrame(
        {
            "stream_id": pd.array(["r"], dtype="string"),
            "ttft_ms": [50.0],
            "ttfo_ms": [70.0],
            "reasoning_tokens": pd.array([3], dtype="Int64"),
            "tool_tokens": pd.array([0], dtype="Int64"),
            "ttftc_ms": [None],
        }
    )
    # tokens 1..6 at 1.050, 1.060, 1.070, 1.070, 1.070, 1.090 s: 3 reasoning, then 3 answer
    times = [1.050, 1.060, 1.070, 1.070, 1.070, 1.090]
    gaps = pd.DataFrame(
        [
            {"stream_id": "r", "index": i, "gap_ms": (b - a) * 1000, "t": b, "open": False}
            for i, (a, b) in enumerate(itertools.pairwise(times), 1)
        ]
    )
    kept = answer_gaps(streams, gaps)
    assert list(kept["index"]) == [4, 5]  # gap 3 ends at the first answer token


def test_reasoning_and_answer_read_together_from_the_first_token():
    """A server behind sent every reasoning token and the first answer tokens in one write:
    TTFO equals TTFT. The first token was still a reasoning one: the gaps up to the first
    answer token are not the answer's (they were all kept, as if the answer had come first)."""
    streams = pd.DataFrame(
        {
            "stream_id": pd.array(["r"], dtype="string"),
            "ttft_ms": [120.0],
            "ttfo_ms": [120.0],
            "reasoning_tokens": pd.array([4], dtype="Int64"),
        }
    )
    # tokens 1..5 (4 reasoning, the first answer) at 1.734 s, tokens 6..8 at 1.898 s
    times = [1.734] * 5 + [1.898] * 3
    gaps = pd.DataFrame(
        [
            {"stream_id": "r", "index": i, "gap_ms": (b - a) * 1000, "t": b, "open": False}
            for i, (a, b) in enumerate(itertools.pairwise(times), 1)
        ]
    )
    kept = answer_gaps(streams, gaps)
    assert list(kept["index"]) == [5, 6, 7]  # gap 4 ends at the first answer token


def test_the_selector_in_a_threshold():
    slo = thresholds.parse_slo(
        '[thresholds]\n"itl_ms{token:answer}" = ["max<=20"]\nitl_ms = ["max<=20"]\n'
    )
    checks = {c.metric: c for c in thresholds.evaluate(slo, _run())}
    assert checks["itl_ms{token:answer}"].passed and checks["itl_ms"].passed
    slo = thresholds.parse_slo('[thresholds]\n"itl_ms{token:answer}" = ["max<20"]\n')
    assert not thresholds.evaluate(slo, _run())[0].passed


def test_an_unknown_token_value_is_refused():
    with pytest.raises(KeyError):
        select(_run(), {"token": "reasoning"})
