"""The report's session view: a swim lane of broken sessions first, and TTFT and the cache hit
rate by step depth, from a run whose sessions are known; and the session figures behind it."""

from __future__ import annotations

import json

import pytest

from streamslo.figures.metrics import rate_value, trend_samples
from streamslo.figures.session_figures import session_summary
from streamslo.reports.build import build_report
from streamslo.results.layout import load_run
from streamslo.verify.testing import stream_row, write_run


def _step(
    sid, step, depth, start, e2e, ok=True, wait=None, steps=3, prompt=100, cached=50, parents=None
):
    return stream_row(
        f"{sid}-{step}",
        session_id=sid,
        step_id=step,
        depth=depth,
        session_steps=steps,
        started_at=1_700_000_000.0 + start,
        e2e_ms=e2e,
        ttft_ms=10.0 * depth,
        wait_ms=wait,
        outcome="ok" if ok else "truncated",
        usage_prompt_tokens=prompt,
        cached_tokens=cached,
        parent_ids=parents,
    )


ROWS = [
    # whole: 3 steps, 0 .. 2.5 s
    *[
        _step("w", "a", 1, 0.0, 500, prompt=100, cached=90),
        _step("w", "b", 2, 1.0, 500, wait=500, prompt=300, cached=100, parents="a"),
        _step("w", "c", 3, 2.0, 500, wait=500, prompt=600, cached=300, parents="b"),
    ],
    # broken at its second step; the third never sent
    *[_step("x", "a", 1, 0.0, 400), _step("x", "b", 2, 0.6, 300, ok=False, wait=200)],
    # cut by the run's end between steps: neither whole nor broken
    _step("y", "a", 1, 5.0, 400),
    # a step the run stopped: not a failure
    *[
        _step("z", "a", 1, 0.0, 400, steps=2),
        stream_row(
            "z-b", session_id="z", step_id="b", depth=2, session_steps=2, outcome="cancelled"
        ),
    ],
]


def test_session_figures(tmp_path):
    d = write_run(tmp_path / "run", ROWS, run={"valid": True, "start_epoch": 1_700_000_000.0})
    data = load_run(d)
    summary = session_summary(data.streams)
    assert summary is not None and summary["sessions"] == 2 and summary["whole"] == 1
    assert rate_value(data, "session_success_rate") == (1, 2)
    assert sorted(trend_samples(data, "session_e2e_ms")) == pytest.approx([900.0, 2500.0], abs=0.01)
    assert summary["tool_share"] == (500 + 500 + 200) / (1200 + 1500 + 700)


def test_the_report_draws_broken_sessions_first(tmp_path):
    d = write_run(tmp_path / "run", ROWS, run={"valid": True, "start_epoch": 1_700_000_000.0})
    res = build_report(None, d, tmp_path / "rep" / "index.html")
    page = res.html.read_text()
    assert "Agentic sessions" in page and page.count('<svg class="lane"') == 1
    assert page.index(">x (broken)<") < page.index(">w<")
    doc = json.loads(res.json.read_text())["sessions"][0]
    assert [s["session"] for s in doc["lane"]] == ["x", "w"]
    assert [st["ok"] for st in doc["lane"][0]["steps"]] == [True, False]
    by_depth = {row[0]: row for row in doc["by_depth"][1:]}
    # depth 3: one step, 300 of 600 prompt tokens cached
    assert by_depth["3"][6] == "50.0%" and by_depth["1"][1] == "4"
    # The ceiling: what its first parent had seen (300 prompt + 10 reply tokens of 600).
    assert by_depth["3"][7] == "51.7%" and by_depth["1"][7] == "—"
    assert "Sessions by step depth" in res.markdown.read_text()


def test_the_sessions_summary_is_near_the_top_of_every_output(tmp_path):
    """Sessions, whole, success rate and session e2e right after the verdicts: on the page, in
    the Markdown and in the terminal summary, the same numbers as summary.json's."""
    d = write_run(tmp_path / "run", ROWS, run={"valid": True, "start_epoch": 1_700_000_000.0})
    res = build_report(None, d, tmp_path / "rep" / "index.html")
    ss = session_summary(load_run(d).streams)
    assert ss is not None
    (model,) = json.loads(res.json.read_text())["session_summary"]
    assert (model["sessions"], model["whole"]) == (ss["sessions"], ss["whole"]) == (2, 1)
    assert model["success_rate"] == ss["success_rate"] == 0.5
    assert model["e2e_p99_ms"] == pytest.approx(ss["e2e_ms"]["p99"])
    page = res.html.read_text()
    head = "<h2>Agentic sessions: the sessions judged whole</h2>"
    assert page.index("<h2>SLO verdicts</h2>") < page.index(head) < page.index("Failure rates")
    row = f"{ss['e2e_ms']['p50']:,.1f}"
    for text in (page, res.markdown.read_text(), res.summary):
        assert "50.00 %" in text and row in text, text[:2000]
    md = res.markdown.read_text()
    assert md.index("### Agentic sessions") < md.index("### Failure rates")


def test_synthetic_sessions_get_readable_names():
    from streamslo.reports.session_view import session_names

    names = session_names(["671-8e2546-s23", "671-8e2546-s24", "702-0a1b2c-s24", "agent-run-7"])
    assert names == {
        "671-8e2546-s23": "s23",
        "671-8e2546-s24": "s24 of process 671",
        "702-0a1b2c-s24": "s24 of process 702",
        "agent-run-7": "agent-run-7",  # a file's or trace's own id stays
    }
