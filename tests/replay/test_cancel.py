"""Clients that hang up: the delay forms, the seeded plan, the tracker's outcome and timing, and
``client_cancelled`` out of every rate."""

from __future__ import annotations

import json

import pytest

from streamslo.figures.metrics import summarize
from streamslo.figures.replay import replay_figures
from streamslo.options.cancel import CancelAfter, CancelPlan
from streamslo.results.columns import stream_row as csv_row
from streamslo.results.layout import load_run
from streamslo.stream.outcome import FAILURE_OUTCOMES, OUTCOMES
from streamslo.stream.timing import StreamExpectations, StreamRecord
from streamslo.stream.tracker import StreamTracker
from streamslo.verify.testing import stream_row, write_run
from tests.stream.feed import Feed


def chunk(
    content: str | None = None, finish: str | None = None, usage: dict | None = None
) -> bytes:
    obj: dict = {
        "choices": [
            {"index": 0, "delta": {"content": content} if content else {}, "finish_reason": finish}
        ]
    }
    if usage is not None:
        obj["usage"] = usage
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


@pytest.mark.parametrize(
    ("text", "unit", "low", "high", "spec"),
    [
        ("2s", "s", 2.0, 2.0, "2s"),
        ("500ms", "s", 0.5, 0.5, "500ms"),
        ("1.5", "s", 1.5, 1.5, "1.5s"),
        ("20tok", "tok", 20, 20, "20tok"),
        ("uniform:1s,3s", "s", 1.0, 3.0, "uniform:1s,3s"),
        ("uniform:10tok,40tok", "tok", 10, 40, "uniform:10tok,40tok"),
    ],
)
def test_cancel_after_forms(text, unit, low, high, spec):
    c = CancelAfter.parse(text)
    assert (c.unit, c.low, c.high, c.spec()) == (unit, low, high, spec)
    assert CancelAfter.parse(c.spec()) == c


@pytest.mark.parametrize(
    "bad", ["0s", "-1s", "2.5tok", "uniform:1s,5tok", "uniform:3s,1s", "normal:1,2", "soon"]
)
def test_bad_cancel_after_is_rejected(bad):
    with pytest.raises(ValueError, match="cancel delay"):
        CancelAfter.parse(bad)


def test_plan_cancels_its_share_and_repeats():
    plan = CancelPlan(0.2, "uniform:10tok,20tok", seed=5)
    picks = [plan.draw() for _ in range(5000)]
    cancelled = [p for p in picks if p != (None, None)]
    assert 0.18 <= len(cancelled) / len(picks) <= 0.22
    assert all(s is None and 10 <= n <= 20 for s, n in cancelled)
    again = CancelPlan(0.2, "uniform:10tok,20tok", seed=5)
    assert [again.draw() for _ in range(5000)] == picks
    assert all(p == (None, None) for p in (CancelPlan(0.0, "2s", 1).draw() for _ in range(100)))


def _tracker(expect: StreamExpectations) -> tuple[StreamRecord, StreamTracker]:
    rec = StreamRecord("s", "sse", "T", 1000.0, 10.0)
    tr = Feed(StreamTracker(rec, expect))
    tr.on_connected(10.001)
    tr.on_response(10.002, 200, "text/event-stream")
    return rec, tr


def test_hang_up_after_n_tokens_is_timed_to_the_hang_up():
    rec, tr = _tracker(StreamExpectations(max_tokens=10, cancel_after_tokens=3))
    for i, t in enumerate((10.1, 10.2, 10.3, 10.4)):
        tr.on_sse_bytes(t, chunk(f"t{i}"))
    assert rec.outcome == "client_cancelled" and tr.finished and not tr.wants_bytes
    assert rec.tokens == 3 and rec.e2e_s == pytest.approx(0.3) and rec.ttft_s == pytest.approx(0.1)
    assert rec.gap_s == pytest.approx([0.1, 0.1]) and not rec.open_gap  # no open gap: not a failure
    assert "3 tokens" in rec.error


def test_hang_up_after_a_time_and_a_stream_that_ends_first():
    rec, tr = _tracker(StreamExpectations(max_tokens=10, cancel_after_s=0.5))
    assert tr.deadline(300.0) == pytest.approx(10.5)  # the transport reads until the hang-up
    tr.on_sse_bytes(10.1, chunk("a"))
    tr.on_deadline(10.5, 300.0)  # the watchdog ended the read at the hang-up time
    assert rec.outcome == "client_cancelled" and rec.e2e_s == pytest.approx(0.5)
    # AIPerf's semantics: a stream that ends before its delay ends normally.
    rec2, tr2 = _tracker(StreamExpectations(max_tokens=1, cancel_after_s=0.5))
    tr2.on_sse_bytes(
        10.1, chunk("a") + chunk(None, "length", {"completion_tokens": 1}) + b"data: [DONE]\n\n"
    )
    tr2.on_eof(10.2, True)
    assert rec2.outcome == "ok"
    # A real request timeout shorter than the hang-up stays a timeout.
    rec3, tr3 = _tracker(StreamExpectations(max_tokens=10, cancel_after_s=50.0))
    assert tr3.deadline(5.0) == pytest.approx(15.0)
    tr3.on_deadline(15.0, 5.0)
    assert rec3.outcome == "timeout"


def test_cached_tokens_come_from_usage():
    rec, tr = _tracker(StreamExpectations(max_tokens=1))
    usage = {
        "prompt_tokens": 40,
        "completion_tokens": 1,
        "prompt_tokens_details": {"cached_tokens": 32},
    }
    tr.on_sse_bytes(10.1, chunk("a") + chunk(None, "length", usage) + b"data: [DONE]\n\n")
    assert rec.outcome == "ok" and rec.cached_tokens == 32 and csv_row(rec)["cached_tokens"] == 32


def test_client_cancelled_moves_no_rate(tmp_path):
    """Adding client hang-ups to a run leaves every rate and latency where it was."""
    base = [stream_row(f"s{i}", ttft_ms=50.0 + i) for i in range(8)]
    base += [
        stream_row("bad", outcome="truncated", ttft_ms=70.0),
        stream_row("five", outcome="http_5xx", status=503, ttft_ms=None),
    ]
    hung = [
        stream_row(f"c{i}", outcome="client_cancelled", ttft_ms=999.0, e2e_ms=120.0)
        for i in range(3)
    ]
    a = summarize(load_run(write_run(tmp_path / "a", base)))
    b_data = load_run(
        write_run(
            tmp_path / "b", base + hung, run={"valid": True, "workload": {"cancel": {"rate": 0.2}}}
        )
    )
    b = summarize(b_data)
    for key in ("truncation_rate", "http_5xx_rate", "error_rate"):
        assert a[key] == b[key] and a[key] is not None
    assert a["ttft_ms"] == b["ttft_ms"]
    assert b["outcomes"]["client_cancelled"] == 3 and b["requests"] == a["requests"] + 3
    assert "client_cancelled" in OUTCOMES and "client_cancelled" not in FAILURE_OUTCOMES
    assert replay_figures(b_data)["client_cancelled"] == {"count": 3, "fraction": 3 / 13}
