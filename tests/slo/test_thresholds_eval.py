"""Evaluating thresholds over hand-built results directories, checked against numpy."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from streamslo.results.layout import load_run
from streamslo.slo.thresholds import (
    DEFAULT_SLO,
    abort_check,
    evaluate,
    evaluate_threshold,
    parse_thresholds_table,
    write_slo_json,
)
from streamslo.verify.testing import stream_row, write_run

RNG = np.random.default_rng(7)


def _one(table_key: str, expr: str, data: object):  # type: ignore[no-untyped-def]
    (th,) = parse_thresholds_table({table_key: [expr]}).thresholds
    return evaluate_threshold(th, data)


@pytest.fixture
def mixed_run(tmp_path: Path):  # type: ignore[no-untyped-def]
    """40 streams, SSE and WS, two user classes, random gaps, a few failures."""
    streams, gaps = [], {}
    for i in range(40):
        sid = f"s{i:02d}"
        proto = "ws" if i % 2 else "sse"
        outcome = "ok"
        status = 101 if proto == "ws" else 200
        if i in (5, 17):
            outcome = "truncated"
        if i == 30:
            outcome, status = "http_5xx", 503
        if i == 31:
            outcome = "cancelled"
        g = list(RNG.gamma(2.0, 10.0, size=20).round(3))
        if outcome != "http_5xx":
            gaps[sid] = g
        streams.append(
            stream_row(
                sid,
                protocol=proto,
                status=status,
                outcome=outcome,
                user_class="SlowSSEUser" if i % 4 == 0 else "SSEUser",
                ttft_ms=None if outcome == "http_5xx" else float(40 + i),
                e2e_ms=None if outcome == "http_5xx" else float(400 + 3 * i),
            )
        )
    return load_run(write_run(tmp_path / "run", streams, gaps)), streams, gaps


def _pool_gaps(streams: list[dict], gaps: dict, pred=lambda s: True) -> np.ndarray:  # type: ignore[no-untyped-def]
    keep = [
        s["stream_id"]
        for s in streams
        if s["outcome"] not in ("cancelled", "http_5xx", "http_4xx", "connect_error") and pred(s)
    ]
    return np.array([v for sid in keep for v in gaps.get(sid, [])])


@pytest.mark.parametrize(
    ("expr", "fn"),
    [
        ("p(99)<1e9", lambda a: np.percentile(a, 99)),
        ("p(99.9)<1e9", lambda a: np.percentile(a, 99.9)),
        ("p(50)<1e9", lambda a: np.percentile(a, 50)),
        ("med<1e9", np.median),
        ("avg<1e9", np.mean),
        ("min<1e9", np.min),
        ("max<1e9", np.max),
        ("count<1e9", lambda a: a.size),
    ],
)
def test_itl_aggregations_match_numpy(mixed_run, expr, fn) -> None:  # type: ignore[no-untyped-def]
    data, streams, gaps = mixed_run
    res = _one("itl_ms", expr, data)
    pool = _pool_gaps(streams, gaps)
    assert res.observed == pytest.approx(float(fn(pool)), rel=1e-12)
    assert res.samples == pool.size
    assert res.passed


def test_selectors_filter_streams(mixed_run) -> None:  # type: ignore[no-untyped-def]
    data, streams, gaps = mixed_run
    res = _one("itl_ms{protocol:ws}", "p(95)<1e9", data)
    pool = _pool_gaps(streams, gaps, lambda s: s["protocol"] == "ws")
    assert res.observed == pytest.approx(np.percentile(pool, 95))
    res2 = _one("itl_ms{user_class:SlowSSEUser,protocol:sse}", "max<1e9", data)
    pool2 = _pool_gaps(
        streams, gaps, lambda s: s["protocol"] == "sse" and s["user_class"] == "SlowSSEUser"
    )
    assert res2.observed == pytest.approx(pool2.max()) and res2.samples == pool2.size
    res3 = _one("ttft_ms{protocol:ws}", "avg<1e9", data)
    ws_ttft = [
        s["ttft_ms"]
        for s in streams
        if s["protocol"] == "ws" and s["outcome"] not in ("cancelled", "http_5xx")
    ]
    assert res3.observed == pytest.approx(np.mean(ws_ttft))


def test_rates_follow_the_spec(mixed_run) -> None:  # type: ignore[no-untyped-def]
    data, _, _ = mixed_run
    # 40 streams, 1 cancelled (out of every rate), 1 http_5xx (never began), 2 truncated.
    trunc = _one("truncation_rate", "rate<0.001", data)
    assert (trunc.numerator, trunc.samples) == (2, 38)
    assert trunc.observed == pytest.approx(2 / 38) and not trunc.passed
    h5 = _one("http_5xx_rate", "rate<0.05", data)
    assert (h5.numerator, h5.samples) == (1, 39) and h5.passed
    err = _one("error_rate", "rate<=0.1", data)
    assert err.observed == pytest.approx(3 / 39) and err.passed
    assert _one("truncated_rate{protocol:ws}", "rate>0", data).observed == pytest.approx(2 / 19)
    assert "2 of 38 streams" in trunc.message


def test_counters(mixed_run) -> None:  # type: ignore[no-untyped-def]
    data, _, _ = mixed_run
    assert _one("requests", "count==40", data).passed
    assert _one("requests{protocol:sse}", "count==20", data).passed
    (th,) = parse_thresholds_table({"requests": ["rate>=1"]}).thresholds
    res = evaluate_threshold(th, data, duration_s=20.0)
    assert res.observed == 2.0 and res.passed


# Boundary semantics, exactly like k6: every gap is 200 ms, so p(99) is exactly 200.
@pytest.mark.parametrize(
    ("expr", "passed"),
    [
        ("p(99)<200", False),
        ("p(99)<=200", True),
        ("p(99)>200", False),
        ("p(99)>=200", True),
        ("p(99)==200", True),
        ("p(99)!=200", False),
        ("p(99)<200.0001", True),
        ("max<200", False),
        ("min>=200", True),
        ("avg==200", True),
        ("med!=200", False),
    ],
)
def test_boundaries(tmp_path: Path, expr: str, passed: bool) -> None:
    data = load_run(
        write_run(
            tmp_path, [stream_row("a"), stream_row("b")], {"a": [200.0] * 50, "b": [200.0] * 50}
        )
    )
    res = _one("itl_ms", expr, data)
    assert res.observed == 200.0
    assert res.passed is passed
    assert ("ok" if passed else "FAILED") in res.message


@pytest.mark.parametrize(
    ("expr", "passed"),
    [("rate<0.5", False), ("rate<=0.5", True), ("rate==0.5", True), ("rate>0.5", False)],
)
def test_rate_boundaries(tmp_path: Path, expr: str, passed: bool) -> None:
    data = load_run(write_run(tmp_path, [stream_row("a"), stream_row("b", outcome="truncated")]))
    assert _one("truncation_rate", expr, data).passed is passed


def test_no_data_fails_with_no_data(tmp_path: Path) -> None:
    data = load_run(write_run(tmp_path, []))
    results = evaluate(DEFAULT_SLO, data)
    assert [r.observed for r in results] == [None, None, None, None]
    assert not any(r.passed for r in results)
    assert all("no data" in r.message for r in results)
    # A count has a value even with no data.
    assert _one("itl_ms", "count==0", data).passed
    assert not _one("requests", "count>0", data).passed


def test_selector_that_matches_nothing_has_no_data(mixed_run) -> None:  # type: ignore[no-untyped-def]
    data, _, _ = mixed_run
    res = _one("itl_ms{protocol:grpc}", "p(99)<200", data)
    assert res.observed is None and not res.passed and "no data" in res.message
    assert "no grpc streams in this run: the selector matched none of its 40 streams" in res.message
    res = _one("e2e_ms{protocol:ws,user_class:Nobody}", "p(99)<200", data)
    assert "no streams with protocol=ws, user_class=Nobody in this run" in res.message


def test_open_gaps_of_failed_streams_count(tmp_path: Path) -> None:
    streams = [stream_row("a"), stream_row("b", outcome="stalled")]
    data = load_run(write_run(tmp_path, streams, {"a": [10.0] * 9, "b": [10.0, 10_000.0]}))
    res = _one("itl_ms", "max<200", data)
    assert res.observed == 10_000.0 and not res.passed


def test_write_slo_json(tmp_path: Path, mixed_run) -> None:  # type: ignore[no-untyped-def]
    data, _, _ = mixed_run
    results = evaluate(DEFAULT_SLO, data)
    path = write_slo_json(tmp_path, results, extra={"valid": True})
    doc = json.loads(path.read_text())
    assert path.name == "slo.json" and doc["passed"] is False and doc["valid"] is True
    assert [(t["metric"], t["expression"], t["passed"]) for t in doc["thresholds"]] == [
        (r.metric, r.expression, r.passed) for r in results
    ]
    assert doc["thresholds"][0]["observed"] == pytest.approx(2 / 38)


def test_abort_check(tmp_path: Path) -> None:
    slo = parse_thresholds_table(
        {
            "truncation_rate": [
                {"threshold": "rate<0.1", "abortOnFail": True, "delayAbortEval": "10s"}
            ],
            "itl_ms": [{"threshold": "p(99)<200", "abortOnFail": True}, "max<1"],
            "http_5xx_rate": [{"threshold": "rate<0.1", "abortOnFail": True}],
        }
    )
    streams = [stream_row("a", outcome="truncated"), stream_row("b")]
    data = load_run(write_run(tmp_path, streams, {"a": [300.0], "b": [10.0]}))
    early = abort_check(slo, data, elapsed_s=5.0)
    assert [r.threshold.name for r in early] == ["itl_ms p(99)<200"]  # not max<1: no abortOnFail
    late = abort_check(slo, data, elapsed_s=10.0)
    assert [r.threshold.name for r in late] == ["truncation_rate rate<0.1", "itl_ms p(99)<200"]
    # No data yet aborts nothing.
    empty = load_run(write_run(tmp_path / "empty", []))
    assert abort_check(slo, empty, elapsed_s=60.0) == []
