"""The report's "Load levels" (a ramped run's figures per concurrency level) and "TTFT by turn"
sections, checked against numbers computed here from the rows that were written."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from streamslo.reports import build_report
from streamslo.reports.knee import first_user_s, level_points, stage_levels
from streamslo.reports.load import load_report_runs
from streamslo.reports.turns import turns_json
from streamslo.results.layout import load_run
from tests.reports.conftest import write_run

# Two held levels: 2 streams for 10 s (1 s ramp), then 4 for 10 s.
STAGES = "1s:2,9s:2,1s:4,9s:4"


def _ramped(tmp_path: Path) -> list[dict[str, object]]:
    # 100 streams, one every 0.25 s from the first: stream i starts 0.25 * i s in.
    return write_run(tmp_path / "run", n=100, duration=33.0, seed=3).rows


def test_stage_levels_are_the_held_stages() -> None:
    assert stage_levels(STAGES) == [(2, 1.0, 10.0), (4, 11.0, 20.0)]
    assert stage_levels("") == [] and stage_levels("nonsense") == []


def test_the_first_user_starts_when_the_ramp_rounds_to_one() -> None:
    # The shape is asked once a second; a linear ramp from 0 rounds to 1 user at that second.
    assert first_user_s(STAGES) == 1.0  # 0 users at 0 s, 2 at 1 s
    assert first_user_s("10s:4,5s:4") == 2.0  # 0.4 rounds to 0 at 1 s, 0.8 to 1 at 2 s
    assert first_user_s("0.5s:1,5s:1") == 0.5


def test_level_points_take_the_streams_each_level_held(tmp_path: Path) -> None:
    rows = _ramped(tmp_path)
    pts = level_points(load_run(tmp_path / "run"), STAGES, settle_s=1.0)
    assert [p.x for p in pts] == [2, 4]
    # The first stream started when the ramp reached one user, 1 s into the stages, so stream i
    # starts 1 + 0.25 i s in. Level 2 holds from 1 s, settled from 2 s: [2, 10) = i 4..35; level
    # 4: [12, 20) = i 44..75.
    for p, (lo, hi) in zip(pts, [(4, 36), (44, 76)], strict=True):
        ttft = np.array([rows[i]["ttft_ms"] for i in range(lo, hi)], dtype=float)
        assert p.requests == hi - lo
        assert p.ttft_ms.p99 == np.percentile(ttft, 99)
        assert p.duration_s == 8.0


def test_a_level_no_stream_started_in_takes_the_streams_in_flight_through_it(
    tmp_path: Path,
) -> None:
    """A slow server's streams can outlast a level: none starts while it holds. The level keeps
    its point, made of the streams in flight through it (the compare ramp's 2-stream level
    went missing so under a loaded suite)."""
    _ramped(tmp_path)
    path = tmp_path / "run" / "streams.csv"
    s = pd.read_csv(path)
    since = s["started_at"] - s["started_at"].min() + 1.0  # the stages' clock
    hole = (since >= 11.0) & (since < 20.0)  # level 4: nothing starts while it holds
    s = s[~hole].copy()
    long = s.index[(since[~hole] >= 8.0) & (since[~hole] < 10.0)]
    s.loc[long, "e2e_ms"] = 15_000.0  # these run through level 4's hold
    s.to_csv(path, index=False)
    pts = level_points(load_run(tmp_path / "run"), STAGES)
    assert [p.x for p in pts] == [2, 4]
    kept_since = since[~hole]
    through = (kept_since < 20.0) & (kept_since + s["e2e_ms"] / 1000.0 > 11.0)
    assert pts[1].requests == int(through.sum()) >= len(long) > 0


def test_turns_table_by_turn(tmp_path: Path) -> None:
    rows = _ramped(tmp_path)
    path = tmp_path / "run" / "streams.csv"
    s = pd.read_csv(path)
    s["turn"] = [1 + i % 3 for i in range(len(s))]
    s.to_csv(path, index=False)
    table = turns_json(load_report_runs(None, tmp_path / "run"))
    assert [e["turn"] for e in table] == [1, 2, 3]
    for e in table:
        ttft = np.array(
            [r["ttft_ms"] for i, r in enumerate(rows) if i % 3 == e["turn"] - 1], dtype=float
        )
        assert e["streams"] == len(ttft)
        assert e["ttft_ms"]["p50"] == np.percentile(ttft, 50)
        assert e["ttft_ms"]["p99"] == np.percentile(ttft, 99)


def test_single_turn_runs_have_no_turn_table(tmp_path: Path) -> None:
    _ramped(tmp_path)
    assert turns_json(load_report_runs(None, tmp_path / "run")) == []


def test_the_report_shows_levels_and_turns(tmp_path: Path) -> None:
    _ramped(tmp_path)
    path = tmp_path / "run" / "streams.csv"
    s = pd.read_csv(path)
    s["turn"] = [1 + i % 2 for i in range(len(s))]
    s.to_csv(path, index=False)
    result = build_report(None, tmp_path / "run", tmp_path / "out" / "report.html", stages=STAGES)
    doc = json.loads(result.json.read_text())
    assert [p["x"] for p in doc["levels"][0]["levels"]] == [2, 4]
    assert [e["turn"] for e in doc["turns"]] == [1, 2]
    page = result.html.read_text()
    assert "<h2>Load levels</h2>" in page and "<h2>TTFT by turn</h2>" in page
    md = result.markdown.read_text()
    assert "### Load levels" in md and "### TTFT by turn" in md
    # Without stages, a plain report has neither levels nor (single-turn) turns.
    plain = build_report(None, tmp_path / "run", tmp_path / "plain" / "report.html")
    assert json.loads(plain.json.read_text())["levels"] == []
