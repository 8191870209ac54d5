"""complete/killed: finalize marks a run complete last; ``streamslo finalize`` finalizes a killed
run honestly and idempotently; verify fails an unfinalized run; the report says so up front."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from streamslo.results.layout import SCHEMA_VERSION, Layout, load_run, read_json
from streamslo.results.writer import ResultsWriter
from streamslo.runfiles.finalize import finalize, finalize_killed
from streamslo.slo import thresholds
from tests.results.helpers import record

REPO = Path(__file__).resolve().parents[2]
T0 = 1_700_000_000.0


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streamslo", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )


def killed_run(directory: Path, n: int = 6) -> Path:
    """A run as a kill leaves it: rows and gaps flushed, run.json still ``complete: false``."""
    w = ResultsWriter(directory, run_start=T0, flush_interval=3600)
    for i in range(n):
        w.add(record(i, gaps=4, started_at=T0 + 1.0 + i))
        if i % 2:
            w.flush()
    w.flush(wait=True)
    return directory


def test_a_run_is_incomplete_until_finalized(tmp_path):
    out = killed_run(tmp_path / "run")
    assert load_run(out).complete is False
    summary, _ = finalize(out, {"end_epoch": T0 + 10})
    run = read_json(Layout(out).run_json)
    assert (
        run["complete"] is True
        and run["schema_version"] == SCHEMA_VERSION
        and "finalized_at" in run
    )
    assert summary["requests"] == 6 and load_run(out).complete


def test_complete_is_written_last(tmp_path, monkeypatch):
    out = killed_run(tmp_path / "run")

    def killed(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(thresholds, "write_slo_json", killed)
    with pytest.raises(KeyboardInterrupt):
        finalize(out, {})
    assert read_json(Layout(out).run_json)["complete"] is False  # a killed finalize claims nothing


def test_finalize_sums_the_writers_write_errors(tmp_path):
    out = killed_run(tmp_path / "run")
    layout = Layout(out)
    (layout.writers_dir / "a.json").write_text(
        json.dumps(
            {
                "tag": "a",
                "rows_written": 4,
                "rows_unwritten": 2,
                "gaps_unwritten": 8,
                "write_errors": 3,
                "last_error": "ENOSPC: No space left on device",
            }
        )
    )
    finalize(out, {})
    run = read_json(layout.run_json)
    assert run["write_errors"] >= 3 and run["rows_unwritten"] == 2 and run["gaps_unwritten"] == 8
    assert "ENOSPC" in run["writers"]["last_error"]


def test_streamslo_finalize_ends_a_killed_run_at_its_last_record(tmp_path):
    out = killed_run(tmp_path / "run")
    r = _cli("finalize", str(out))
    assert r.returncode == 0, r.stderr
    run = read_json(Layout(out).run_json)
    assert run["complete"] is True and run["killed"] is True
    last_end = T0 + 1.0 + 5 + record(0, gaps=4).e2e_s  # the latest stream's end, not "now"
    assert run["end_epoch"] == pytest.approx(last_end, abs=1e-3)
    assert run["start_epoch"] == T0
    summary = read_json(Layout(out).summary_json)
    assert summary["duration_s"] == pytest.approx(last_end - T0, abs=1e-3)
    assert summary["requests"] == 6
    assert len(list(Layout(out).gaps_dir.iterdir())) == 1  # merged
    assert "KILLED RUN" in r.stdout and "finalized (complete: true, killed: true" in r.stdout
    # Idempotent: a second finalize changes nothing.
    again = _cli("finalize", str(out))
    assert again.returncode == 0 and "already complete" in again.stderr
    assert read_json(Layout(out).run_json) == run


def test_finalize_killed_without_run_json_uses_the_run_start_marker(tmp_path):
    out = killed_run(tmp_path / "run")
    Layout(out).run_json.unlink()
    Layout(out).run_start_marker.write_text(repr(T0 - 5))
    _, _, done = finalize_killed(out)
    run = read_json(Layout(out).run_json)
    assert done and run["start_epoch"] == T0 - 5 and run["killed"] is True


def test_streamslo_finalize_of_a_non_results_directory_exits_2(tmp_path):
    r = _cli("finalize", str(tmp_path / "nope"))
    assert r.returncode == 2 and "not a results directory" in r.stderr


def test_verify_fails_an_unfinalized_run_unless_allowed(tmp_path):
    out = killed_run(tmp_path / "run")
    r = _cli("verify", str(out))
    assert r.returncode == 99, r.stdout + r.stderr
    assert "FAIL  test_run_is_complete: " in r.stdout  # verify prints verdicts, not pytest's lines
    assert "was not finalized (run.json complete: false)" in r.stdout
    assert f"streamslo finalize {out}" in r.stdout
    allowed = _cli("verify", str(out), "--allow-incomplete")
    assert allowed.returncode == 0, allowed.stdout
    assert "SKIP  test_run_is_complete: " in allowed.stdout and "NOT finalized" in allowed.stdout
    assert _cli("finalize", str(out)).returncode == 0
    done = _cli("verify", str(out))
    assert done.returncode == 0, done.stdout
    assert "killed" in done.stdout  # still said, once finalized


def test_verify_says_how_many_rows_were_damaged(tmp_path):
    out = killed_run(tmp_path / "run")
    with open(Layout(out).streams_csv, "a") as f:
        f.write("s-99,sse,SSE\n")  # a row cut short
    finalize(out, {})
    r = _cli("verify", str(out))
    assert "1 damaged rows skipped (records 8)" in r.stdout
    assert read_json(Layout(out).run_json)["skipped_rows"] == 1


def test_the_report_says_up_front_that_a_run_is_incomplete(tmp_path):
    from streamslo.reports.build import build_report

    out = killed_run(tmp_path / "run")
    result = build_report(None, out, tmp_path / "report.html")
    first = result.report.invalid[0]
    assert "INCOMPLETE RUN" in first and "streamslo finalize" in first
    assert result.summary.lstrip().startswith("!! The run (")
    html = result.html.read_text()
    assert html.index("INCOMPLETE RUN") < html.index("<table")
    assert "INCOMPLETE RUN" in result.markdown.read_text().split("\n\n")[1]
