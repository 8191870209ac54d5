"""The freed check's verdicts, and the replay figures of summary.json and the report, from
hand-made results directories (no servers)."""

from __future__ import annotations

import pytest

from streamslo.figures.replay import replay_figures
from streamslo.reports.load import load_report_runs
from streamslo.reports.replay import arrival_table, replay_markdown, replay_tables
from streamslo.results.layout import load_run
from streamslo.run.freed import FreedCheck, in_flight
from streamslo.verify.testing import stream_row, write_run
from streamslo.workload.trace import describe_trace


def test_in_flight_gauges_are_found_and_summed_over_labels():
    assert in_flight(
        {
            'vllm:num_requests_running{model_name="a"}': 2.0,
            'vllm:num_requests_running{model_name="b"}': 3.0,
        }
    ) == ("vllm:num_requests_running", 5.0)
    assert in_flight({"streamslo_requests_running": 1.0, "vllm:num_requests_running": 9.0}) == (
        "streamslo_requests_running",
        1.0,
    )
    assert in_flight({"other": 1.0}) is None


def test_the_freed_check_waits_for_the_baseline_within_its_bound():
    values = iter([2.0, 7.0, 5.0, 2.0])
    check = FreedCheck(
        "http://x/metrics", scrape=lambda _url: {"streamslo_requests_running": next(values)}
    )
    check.before()
    verdict = check.after(bound_s=5.0, poll_s=0.0)
    assert verdict["passed"] is True and verdict["baseline"] == 2.0 and verdict["last"] == 2.0
    stuck = FreedCheck("http://x/metrics", scrape=lambda _url: {"streamslo_requests_running": 0.0})
    stuck.before()
    stuck._scrape = lambda _url: {"streamslo_requests_running": 4.0}
    verdict = stuck.after(bound_s=0.05, poll_s=0.01)
    assert verdict["passed"] is False and verdict["last"] == 4.0
    assert "did not free the streams" in verdict["reason"]
    none = FreedCheck("http://x/metrics", scrape=lambda _url: {"unrelated": 1.0})
    none.before()
    assert none.after(bound_s=0.0)["passed"] is None


def test_prefix_figures_split_ttft_by_hit(tmp_path):
    rows = [
        stream_row("h1", ttft_ms=20.0, cached_tokens=96, usage_prompt_tokens=100),
        stream_row("h2", ttft_ms=30.0, cached_tokens=48, usage_prompt_tokens=100),
        stream_row("m1", ttft_ms=90.0, cached_tokens=0, usage_prompt_tokens=100),
        stream_row("x", ttft_ms=None, outcome="http_5xx", status=503),
    ]
    pc = replay_figures(load_run(write_run(tmp_path, rows)))["prefix_cache"]
    assert pc["hit_rate"] == pytest.approx(144 / 300) and (pc["streams"], pc["streams_hit"]) == (
        3,
        2,
    )
    assert pc["ttft_ms_hit"]["p50"] == 25.0 and pc["ttft_ms_hit"]["count"] == 2
    assert pc["ttft_ms_miss"]["p50"] == 90.0 and pc["ttft_ms_miss"]["count"] == 1
    assert "prefix_cache" not in replay_figures(
        load_run(write_run(tmp_path / "plain", [stream_row("a")]))
    )


def test_arrival_table_counts_asked_from_the_trace_and_sent_per_bin(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        "".join(
            f'{{"timestamp": {ms}, "input_length": 4, "output_length": 2, "hash_ids": []}}\n'
            for ms in (0, 500, 1000, 1500, 2500, 2600)
        )
    )
    info = describe_trace(trace)
    t0 = 1_700_000_000.0
    # Five of the six sent (one dropped), each 1 ms late.
    rows = [
        stream_row(f"s{i}", scheduled_at=t0 + off, started_at=t0 + off + 0.001, schedule_lag_ms=1.0)
        for i, off in enumerate((0.0, 0.5, 1.0, 1.5, 2.5))
    ]
    run = {"valid": True, "workload": {"trace": {**info.as_dict(), "speed": 1.0}}}
    d = write_run(tmp_path / "run", rows, run=run)
    (loaded,) = load_report_runs(None, d)
    table = arrival_table(loaded)
    assert table is not None and table[0][2] == "asked (trace)"
    assert [(r[2], r[3]) for r in table[1:]] == [("2", "2"), ("2", "2"), ("2", "1")]
    assert all(r[5] == "1.00" for r in table[1:])
    md = replay_markdown(replay_tables([loaded]))
    assert "### Arrivals asked vs sent: run" in md and "| 2 | 3 | 2 | 1 |" in md


def test_a_moved_trace_falls_back_to_the_scheduled_streams(tmp_path):
    rows = [
        stream_row("s0", scheduled_at=1.0e9, started_at=1.0e9),
        stream_row("s1", scheduled_at=1.0e9 + 3, started_at=1.0e9 + 3),
    ]
    run = {
        "valid": True,
        "workload": {"trace": {"path": str(tmp_path / "gone.jsonl"), "sha256": "x"}},
    }
    d = write_run(tmp_path / "run", rows, run=run)
    table = arrival_table(load_report_runs(None, d)[0])
    assert table is not None and table[0][2] == "asked (scheduled)"
    assert sum(int(r[2]) for r in table[1:]) == 2
