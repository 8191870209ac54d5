"""One error-grouping rule everywhere (docs/report.md, "Failures"): the same failed streams read
as the same groups, with the same shown texts and counts, in Locust's Failures tab (a local
runner and a master merging two workers), summary.json's ``top_errors``, the terminal summary
and the report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from streamslo.reports import build_report
from streamslo.results.layout import Layout, read_json
from streamslo.results.summary_table import format_summary
from streamslo.results.writer import ResultsWriter
from streamslo.runfiles.finalize import finalize
from streamslo.stream.cause import Cause
from streamslo.stream.timing import StreamRecord
from tests.results.helpers import record

REPO = Path(__file__).resolve().parents[2]

#: (outcome, cause, exact text, streams): what the planted run's failures said.
PLANTED = [
    ("silent_truncation", Cause.POSITIONS_MISSING, "61 token positions arrived of 64", 5),
    ("silent_truncation", Cause.POSITIONS_MISSING, "63 token positions arrived of 64", 4),
    ("silent_truncation", Cause.POSITIONS_MISSING, "62 token positions arrived of 64", 1),
    ("silent_truncation", Cause.COUNTED_SHORT, "61 token positions arrived of 64", 2),
    ("truncated", Cause.CUT, "connection reset after 4 of 48 tokens", 3),
    ("truncated", Cause.CUT, "connection reset after 3 of 48 tokens", 3),
    ("http_5xx", Cause.HTTP_STATUS, "HTTP 503: overloaded", 2),
    ("http_5xx", Cause.HTTP_STATUS, "HTTP 500: worker died", 1),
]
#: The groups the rule makes of them: (outcome, cause, shown text, streams, distinct texts).
GROUPS = {
    ("silent_truncation", "positions_missing", "61 token positions arrived of 64", 10, 3),
    ("silent_truncation", "counted_short", "61 token positions arrived of 64", 2, 1),
    ("truncated", "cut", "connection reset after 3 of 48 tokens", 6, 2),  # a tie: text order
    ("http_5xx", "http_status", "HTTP 503: overloaded", 2, 1),
    ("http_5xx", "http_status", "HTTP 500: worker died", 1, 1),
}


def _records() -> list[StreamRecord]:
    out = [record(i, started_at=1000.0 + i / 10) for i in range(20)]
    n = 100
    for outcome, cause, text, count in PLANTED:
        for _ in range(count):
            rec = record(n, outcome=outcome, error=text, started_at=1000.0 + n / 100)
            rec.cause = cause
            if outcome == "http_5xx":
                rec.status, rec.ttft_s, rec.tokens, rec.gap_s, rec.gap_t = 503, None, 0, [], []
            out.append(rec)
            n += 1
    return out


# In a subprocess: Locust imports gevent and patches the process, which the tests must not.
# Locust's own statistics and its own worker-to-master listeners throughout.
_LOCUST = """
import json, sys
from types import SimpleNamespace
import locust.stats as ls
from locust.event import Events
from streamslo.loadgen.listeners import LocustStats
from streamslo.loadgen.locust_stats import WorkerTexts, count_streams_only
from streamslo.stream.cause import Cause
from tests.reports.test_one_grouping_rule import _records

def env():
    e = SimpleNamespace(stats=ls.RequestStats(), events=Events())
    count_streams_only(e)
    def on_request(request_type, name, response_time, response_length, exception=None, **_):
        e.stats.log_request(request_type, name, response_time, response_length)
        if exception:
            e.stats.log_error(request_type, name, exception)  # as Locust's runner
    e.events.request.add_listener(on_request)
    return e

def rows(stats):
    out = []
    for err in stats.errors.values():
        d = err.to_dict()
        head, text = d["error"].split(": ", 1)
        outcome, cause = head.split(" (")
        out.append([outcome, cause.rstrip(")"), text, d["occurrences"]])
    return out

records = _records()
local = env()
listener = LocustStats(local.events.request.fire, "per-stream")
for rec in records:
    listener(rec)
seen = {"local": rows(local.stats)}
# two workers, each its own half, reporting to a master twice as the run goes
workers, master = [env(), env()], env()
for w in workers:
    ls.setup_distributed_stats_event_listeners(w.events, w.stats)
ls.setup_distributed_stats_event_listeners(master.events, master.stats)
master.events.worker_report.add_listener(WorkerTexts(master.stats))  # after Locust's own
for part in (slice(0, len(records) // 2), slice(len(records) // 2, None)):
    for i, w in enumerate(workers):
        fire = LocustStats(w.events.request.fire, "per-stream")
        for rec in records[part][i::2]:
            fire(rec)
        data = {}
        w.events.report_to_master.fire(client_id=f"w{i}", data=data)
        master.events.worker_report.fire(client_id=f"w{i}", data=data)
seen["master"] = rows(master.stats)
print(json.dumps(seen))
"""


@pytest.fixture(scope="module")
def locust_rows() -> dict[str, set[tuple[str, str, str, int]]]:
    r = subprocess.run(
        [sys.executable, "-c", _LOCUST], capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert r.returncode == 0, r.stderr
    return {k: {tuple(row) for row in v} for k, v in json.loads(r.stdout).items()}


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("groups") / "run"
    writer = ResultsWriter(d, 1000.0, flush_interval=1e9)
    for rec in _records():
        writer.add(rec)
    writer.flush(wait=True)
    finalize(d, {"start_epoch": 1000.0, "end_epoch": 1005.0})
    return d


def test_locusts_failures_tab_shows_the_groups(locust_rows) -> None:
    assert locust_rows["local"] == {(o, c, t, n) for o, c, t, n, _ in GROUPS}


def test_a_master_shows_the_groups_its_workers_report(locust_rows) -> None:
    """Two workers, each reporting its own most frequent text as the run goes; the master's
    row holds the group's whole count and the text its workers reported most."""
    rows = locust_rows["master"]
    assert {(o, c, n) for o, c, _, n in rows} == {(o, c, n) for o, c, _, n, _ in GROUPS}
    texts = {(o, c): t for o, c, t, _ in rows}
    assert texts[("silent_truncation", "positions_missing")] == "61 token positions arrived of 64"


def test_summary_json_terminal_and_report_show_the_same_groups(planted: Path, tmp_path: Path):
    summary = read_json(Layout(planted).summary_json)
    got = {
        (o, e["cause"], e["error"], e["count"], e["texts"])
        for o, items in summary["top_errors"].items()
        for e in items
    }
    assert got == GROUPS

    text = format_summary(summary, [], read_json(Layout(planted).run_json))
    for outcome, cause, shown, count, texts in GROUPS:
        similar = f" (and {texts - 1} similar text{'s' if texts > 2 else ''})" if texts > 1 else ""
        line = [
            ln
            for ln in text.splitlines()
            if ln.strip().startswith(f"{outcome} ({cause})") and shown in ln
        ]
        assert len(line) == 1, (outcome, cause, text)
        assert f"{count:>8,}  {shown}{similar}" in line[0]

    res = build_report(None, planted, tmp_path / "report.html", resamples=20)
    report = json.loads(res.json.read_text())
    shown = {
        (g["outcome"], e["cause"], e["error"], e["count"], e["texts"])
        for g in report["failures"]
        for e in g["errors"]
    }
    assert shown == GROUPS
    md = res.markdown.read_text()
    assert "61 token positions arrived of 64 (and 2 similar texts)" in md
    assert "connection reset after 3 of 48 tokens (and 1 similar text)" in md
