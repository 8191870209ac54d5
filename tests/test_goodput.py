"""Goodput against hand-computed values: the parser, the mask, summary.json and thresholds."""

from __future__ import annotations

import pandas as pd
import pytest

from streamslo.figures import metrics
from streamslo.figures.metrics import GoodputBounds
from streamslo.results.layout import RunData
from streamslo.slo import thresholds

#: (outcome, ttft_ms, e2e_ms, tokens), one row a request. With ttft<=500, tpot<=50, e2e<=2000:
ROWS = [
    ("ok", 100.0, 1000.0, 19),  # tpot 50.0: good (bounds are inclusive)
    ("ok", 501.0, 1000.0, 10),  # ttft over: not good
    ("ok", 100.0, 2100.0, 40),  # e2e over (tpot 51.3 over too): not good
    ("ok", 100.0, 1500.0, 11),  # tpot 140: not good
    ("ok", 400.0, 400.0, 1),  # one token: no tpot, meets it; good
    ("truncated", 50.0, 300.0, 5),  # fast but not ok: never good
    ("cancelled", 50.0, 300.0, 5),  # not counted at all
    ("ok", None, 900.0, 0),  # no ttft: fails the ttft bound
]


def _run(goodput: dict[str, float] | None, duration: float = 10.0) -> RunData:
    streams = pd.DataFrame(
        {
            "stream_id": [f"s{i}" for i in range(len(ROWS))],
            "outcome": pd.array([r[0] for r in ROWS], dtype="string"),
            "status": pd.array([200] * len(ROWS), dtype="Int64"),
            "ttft_ms": [r[1] for r in ROWS],
            "e2e_ms": [r[2] for r in ROWS],
            "tokens": pd.array([r[3] for r in ROWS], dtype="Int64"),
            "started_at": [1000.0 + i for i in range(len(ROWS))],
            "scheduled_at": [None] * len(ROWS),
            "protocol": pd.array(["sse"] * len(ROWS), dtype="string"),
            "user_class": pd.array(["U"] * len(ROWS), dtype="string"),
        }
    )
    run = {"start_epoch": 1000.0, "end_epoch": 1000.0 + duration}
    if goodput is not None:
        run["goodput"] = goodput
    gaps = pd.DataFrame(
        {"stream_id": pd.Series(dtype="string"), "gap_ms": pd.Series(dtype="float64")}
    )
    return RunData(path=None, run=run, streams=streams, gaps=gaps)  # type: ignore[arg-type]


BOUNDS = {"ttft_ms": 500.0, "tpot_ms": 50.0, "e2e_ms": 2000.0}


def test_vllm_syntax_parses_to_bounds_in_ms() -> None:
    b = GoodputBounds.parse(["ttft:500", "tpot:50", "e2el:2000"])
    assert b.as_dict() == BOUNDS
    assert GoodputBounds.parse("ttft:500,e2e_ms:2000").as_dict() == {
        "ttft_ms": 500.0,
        "e2e_ms": 2000.0,
    }
    assert not GoodputBounds().any


@pytest.mark.parametrize(
    "bad", ["ttft", "ttft:", "itl:5", "ttft:-1", "ttft:abc", "ttft:inf", "ttft:1 ttft:2"]
)
def test_bad_bounds_say_what_was_expected(bad: str) -> None:
    with pytest.raises(ValueError, match="goodput bound"):
        GoodputBounds.parse(bad)


def test_good_requests_by_hand() -> None:
    data = _run(BOUNDS)
    good = metrics.good_mask(data.streams, GoodputBounds(**BOUNDS)).tolist()
    assert good == [True, False, False, False, True, False, False, False]
    # 2 good of 7 counted requests (the cancelled one is in no denominator), over 10 s.
    assert metrics.rate_value(data, "goodput_fraction") == (2, 7)
    assert metrics.gauge_value(data, "goodput_per_s") == pytest.approx(0.2)
    summary = metrics.summarize(data)
    assert summary["goodput_fraction"] == pytest.approx(2 / 7)
    assert summary["goodput_per_s"] == pytest.approx(0.2)
    assert summary["goodput"] == BOUNDS


def test_one_bound_alone() -> None:
    data = _run({"ttft_ms": 500.0})
    # ok with ttft <= 500: rows 0, 2, 3, 4.
    assert metrics.rate_value(data, "goodput_fraction") == (4, 7)


def test_without_bounds_goodput_has_no_data_and_its_threshold_fails() -> None:
    data = _run(None)
    assert "goodput_per_s" not in metrics.summarize(data)
    slo = thresholds.parse_thresholds_table(
        {"goodput_fraction": ["rate>0.1"], "goodput_per_s": ["value>0"]}
    )
    results = thresholds.evaluate(slo, data)
    assert [r.passed for r in results] == [False, False]
    assert all("no data" in r.message for r in results)


def test_thresholds_on_goodput_and_gauges() -> None:
    data = _run(BOUNDS)
    slo = thresholds.parse_thresholds_table(
        {
            "goodput_fraction": ["rate>0.25", "rate<0.3"],
            "goodput_per_s": ["value>=0.2", "value<0.2"],
            "requests_per_s": ["value==0.7"],
        }
    )
    results = thresholds.evaluate(slo, data)
    assert [r.passed for r in results] == [True, True, True, False, True]
    assert results[0].numerator == 2 and results[0].samples == 7


def test_gauge_takes_only_value() -> None:
    from streamslo.errors import SLOFileError

    with pytest.raises(SLOFileError, match="value"):
        thresholds.parse_thresholds_table({"goodput_per_s": ["p(99)<5"]})


def test_verify_checks_goodput_thresholds_on_a_results_directory(tmp_path) -> None:
    """``streamslo verify`` (the pytest plugin's CLI) over a results directory whose run.json
    holds goodput bounds. By hand, without the row that has no TTFT: 6 counted (one is
    cancelled), 2 good (rows 0 and 4), so 1/3; 2 good over the run's 10 s, 0.2 per s."""
    import subprocess
    import sys

    from streamslo.verify.testing import stream_row, write_run

    rows = [
        stream_row(
            f"s{i}",
            outcome=o,
            ttft_ms=t,
            e2e_ms=e,
            tokens=n,
            expected_tokens=n,
            usage_completion_tokens=n,
        )
        for i, (o, t, e, n) in enumerate(ROWS)
        if t is not None
    ]
    run = {"valid": True, "start_epoch": 0.0, "end_epoch": 10.0, "goodput": BOUNDS}
    path = write_run(
        tmp_path / "run",
        rows,
        {r["stream_id"]: [20.0] * max(r["tokens"] - 1, 0) for r in rows},
        run=run,
    )
    good = tmp_path / "good.toml"
    good.write_text(
        '[thresholds]\ngoodput_fraction = ["rate>=0.333"]\ngoodput_per_s = ["value>=0.2"]\n'
    )
    bad = tmp_path / "bad.toml"
    bad.write_text('[thresholds]\ngoodput_fraction = ["rate>0.334"]\n')

    def verify(slo):
        return subprocess.run(
            [sys.executable, "-m", "streamslo.verify", str(path), "--slo", str(slo)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    proc = verify(good)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "goodput_fraction rate = 0.333333 (2 of 6 streams)" in proc.stdout
    assert "goodput_per_s value = 0.2/s" in proc.stdout
    proc = verify(bad)
    assert proc.returncode == 99, proc.stdout + proc.stderr
    assert "goodput_fraction" in proc.stdout and "FAILED" in proc.stdout
