"""The numbers in report.json, checked against numpy on the hand-built arrays themselves."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.reports.conftest import Built, Synth, write_fixed

PCTS = (50, 90, 95, 99)


def _began(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r["outcome"] != "http_5xx"]


def expected_samples(s: Synth, metric: str) -> np.ndarray:
    """Every sample of a latency metric, straight from what conftest wrote."""
    began = _began(s.rows)
    if metric == "itl_ms":
        ids = {r["stream_id"] for r in began}
        return s.gaps.loc[s.gaps["stream_id"].isin(ids), "gap_ms"].to_numpy()
    if metric == "tpot_ms":
        return np.array([(r["e2e_ms"] - r["ttft_ms"]) / (r["tokens"] - 1) for r in began])
    return np.array([r[metric] for r in began])


def _side(built: Built, side: str) -> Synth:
    return built.before if side == "before" else built.after


@pytest.mark.parametrize("side", ["before", "after"])
@pytest.mark.parametrize("metric", ["ttft_ms", "itl_ms", "tpot_ms", "e2e_ms"])
def test_latency_percentiles_match_numpy(compared: Built, metric: str, side: str) -> None:
    samples = expected_samples(_side(compared, side), metric)
    entry = next(x for x in compared.data["latency"] if x["metric"] == metric)
    stats = entry[side]
    assert stats["count"] == samples.size
    for p in PCTS:
        assert stats[f"p{p}"] == pytest.approx(np.percentile(samples, p), rel=1e-12)
    assert stats["max"] == pytest.approx(samples.max())
    assert stats["mean"] == pytest.approx(samples.mean())
    # the delta rows carry the same numbers
    for d in entry["differences"]:
        p = int(d["stat"][1:])
        b = np.percentile(expected_samples(compared.before, metric), p)
        a = np.percentile(expected_samples(compared.after, metric), p)
        assert d["delta"] == pytest.approx(a - b, rel=1e-9, abs=1e-9)


def test_itl_p99_of_the_stalled_run_breaks_the_slo(compared: Built) -> None:
    # every third stream carries a 600 ms stall: well over 1 % of gaps
    itl = expected_samples(compared.before, "itl_ms")
    assert np.percentile(itl, 99) > 200
    assert np.percentile(expected_samples(compared.after, "itl_ms"), 99) < 200


def test_rates_match_counts(compared: Built) -> None:
    rows = compared.before.rows
    began = _began(rows)
    truncated = sum(r["outcome"] == "truncated" for r in began)
    rates = {r["metric"]: r for r in compared.data["rates"]}
    assert rates["truncation_rate"]["before"] == pytest.approx(truncated / len(began))
    assert rates["truncation_rate"]["before_counts"] == [truncated, len(began)]
    assert rates["http_5xx_rate"]["before"] == pytest.approx(4 / len(rows))
    assert rates["error_rate"]["before"] == pytest.approx((truncated + 4) / len(rows))
    assert rates["truncation_rate"]["after"] == 0.0
    assert rates["truncation_rate"]["after_counts"] == [0, len(compared.after.rows)]


def test_outcome_counts_by_cause_and_protocol(compared: Built) -> None:
    got = {
        (o["outcome"], o["protocol"]): (o["before"], o["after"]) for o in compared.data["outcomes"]
    }
    for outcome, proto in {(r["outcome"], r["protocol"]) for r in compared.before.rows}:
        want = sum(r["outcome"] == outcome and r["protocol"] == proto for r in compared.before.rows)
        assert got[(outcome, proto)][0] == want
    n_ok_after = sum(r["outcome"] == "ok" for r in compared.after.rows)
    assert got[("ok", "all")] == (
        sum(r["outcome"] == "ok" for r in compared.before.rows),
        n_ok_after,
    )
    # every outcome of the taxonomy is listed overall, zeros included
    assert got[("stalled", "all")] == (0, 0)


def test_throughput_is_tokens_over_run_duration(compared: Built) -> None:
    rows = compared.after.rows
    tput = {t["metric"]: t for t in compared.data["throughput"]}
    duration = 30.0  # run.json end_epoch - start_epoch
    assert tput["tokens_per_s"]["after"] == pytest.approx(sum(r["tokens"] for r in rows) / duration)
    assert tput["requests_per_s"]["after"] == pytest.approx(len(rows) / duration)


def test_verdicts_table(compared: Built) -> None:
    rows = {v["metric"]: v for v in compared.data["verdicts"]}
    assert set(rows) == {"truncation_rate", "http_5xx_rate", "connect_error_rate", "itl_ms"}
    assert (
        rows.pop("connect_error_rate")["verdict"] == "pass"
    )  # no refused connection in either run
    assert all(v["verdict"] == "fixed" for v in rows.values())
    assert rows["itl_ms"]["before"] == pytest.approx(
        np.percentile(expected_samples(compared.before, "itl_ms"), 99)
    )
    assert compared.data["passed"] is True
    assert compared.result.passed and compared.result.valid
    assert compared.result.verdicts == compared.result.report.verdicts


def test_server_evidence_summarised(compared: Built) -> None:
    before, after = compared.data["server"]
    assert after["present"] is False
    assert before["present"] is True
    assert before["stall_causes"] == {"tokenizer": 30.0}  # counter increase 0 -> 30
    # /debug/workers (read after the run, from the Gunicorn master) wins over the last scrape
    assert before["worker_restarts"] == {"restarts": 3.0, "aborts": 3.0}
    assert before["peak_write_backlog_bytes"] == 30000.0
    assert before["longest_stalls"][0][:2] == [612.5, "tokenizer"]
    assert not any(s["sample"].endswith("_bucket") for s in before["samples"])


def test_report_json_is_strict_and_matches_files(compared: Built) -> None:
    text = compared.result.json.read_text()
    json.loads(text, parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))
    assert compared.data["mode"] == "compare"
    assert [r["label"] for r in compared.data["runs"]] == ["before", "after"]
    assert compared.data["runs"][0]["name"] == "naive"
    assert compared.result.markdown.exists() and compared.result.html.exists()
    assert compared.result.html.with_suffix(".md") == compared.result.markdown


def test_single_run_report(tmp_path: Path) -> None:
    from streamslo.reports import build_report

    s = write_fixed(tmp_path / "run", truncate_every=7)
    res = build_report(None, s.path, tmp_path / "single.html")
    data = json.loads((tmp_path / "single.json").read_text())
    assert data["mode"] == "single"
    assert len(data["runs"]) == 1 and data["runs"][0]["label"] == "run"
    itl = next(x for x in data["latency"] if x["metric"] == "itl_ms")
    assert itl["before"] is None and itl["differences"] == []
    assert itl["after"]["p99"] == pytest.approx(np.percentile(expected_samples(s, "itl_ms"), 99))
    trunc = next(r for r in data["rates"] if r["metric"] == "truncation_rate")
    assert trunc["after"] > 0.001
    assert {v["verdict"] for v in data["verdicts"]} == {"pass", "fail"}
    assert res.passed is False
    assert "FAIL" in res.summary and "truncation_rate" in res.summary
    assert (tmp_path / "single.md").read_text().startswith("## streamslo report")


def test_activity_timeline_counts_tokens(compared: Built) -> None:
    from streamslo.reports.load import load_report_runs
    from streamslo.reports.timeline import activity_timeline, lateness_timeline

    (run,) = load_report_runs(None, compared.after.path)
    tl = activity_timeline(run, 1.0)
    # every token: first tokens at ttft plus every closed gap
    assert tl["tokens_per_s"].sum() == sum(r["tokens"] for r in compared.after.rows)
    # time-averaged open streams: their sum over 1 s buckets is the total stream-seconds
    assert tl["active"].sum() == pytest.approx(sum(r["e2e_ms"] for r in compared.after.rows) / 1000)
    assert tl["active"].max() >= 1
    lt = lateness_timeline(run, 1.0)
    gaps = compared.after.gaps
    want = gaps.assign(b=np.floor(gaps["t"])).groupby("b")["gap_ms"].max()
    assert lt["max_gap_ms"].to_numpy() == pytest.approx(want.to_numpy())


def test_counter_increase_survives_worker_restarts() -> None:
    import numpy as np

    from streamslo.reports.server_series import counter_increase

    # a worker had counted 1 stall at the run's first scrape, counts 4 more, is killed, its
    # replacement counts 2 then 2 more: 8 within the run
    assert counter_increase(np.array([1.0, 5.0, 2.0, 4.0])) == 8.0
    # a series first seen after the run's first scrape counted its first value within the run
    assert counter_increase(np.array([1.0, 5.0, 2.0, 4.0]), from_zero=True) == 9.0
    # a lifetime total before the run is not the run's (the bug: 220 s of CPU shown as the run's)
    assert counter_increase(np.array([220.0, 224.5, 227.7])) == pytest.approx(7.7)
    assert counter_increase(np.array([])) == 0.0


def test_goodput_is_shown_when_the_run_measured_it(tmp_path: Path) -> None:
    """A run with --goodput bounds in its run.json gets goodput in the throughput table,
    counted by hand from the rows written: ok streams within the TTFT bound."""
    from streamslo.reports import build_report

    s = write_fixed(tmp_path / "run", truncate_every=7, run={"goodput": {"ttft_ms": 40.0}})
    build_report(None, s.path, tmp_path / "g.html")
    data = json.loads((tmp_path / "g.json").read_text())
    rows = {t["metric"]: t["after"] for t in data["throughput"]}
    counted = [r for r in s.rows if r["outcome"] != "cancelled"]
    good = [r for r in counted if r["outcome"] == "ok" and r["ttft_ms"] <= 40.0]
    assert 0 < len(good) < len(counted)
    assert rows["goodput_fraction"] == pytest.approx(len(good) / len(counted))
    assert "goodput_per_s" in rows
    assert "goodput_fraction" in (tmp_path / "g.md").read_text()
