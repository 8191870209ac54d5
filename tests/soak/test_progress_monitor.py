"""The progress line (live and plain), and the generator monitor's bounded memory."""

from __future__ import annotations

import io
import json
import subprocess
import sys

from streamslo.run.progress import Progress, ProgressState, fmt_duration, progress_line
from tests.soak.conftest import REPO


def test_the_line_says_elapsed_eta_streams_rates_and_alerts():
    st = ProgressState(
        elapsed_s=720,
        planned_s=3600,
        streams=84210,
        active=300.4,
        truncation_rate=0.0012,
        http_5xx_rate=0.0,
        itl_p99_ms=51.23,
        alerts=1,
        last_alert="1h/5m×14.4",
    )
    assert progress_line(st) == (
        "12m00s/1h00m00s ETA 48m00s | streams 84,210 (300 open) | last window: "
        "trunc 0.12% 5xx 0.00% ITL p99 51.2 ms | alerts 1 (last: 1h/5m×14.4)"
    )
    assert fmt_duration(3723) == "1h02m03s" and fmt_duration(7) == "7s"
    assert "streams — " in progress_line(ProgressState(1, 10))
    assert "connect errors" not in progress_line(st)  # none: nothing to show
    dead = progress_line(ProgressState(30, 60, streams=44_200, active=0.0, connect_errors=44_108))
    assert "streams 44,200 (0 open) | connect errors 44,108 | last window" in dead


def test_past_the_planned_load_the_line_says_the_run_drains_not_eta_zero():
    """A sessions run asked for 30 s finishes its sessions in flight within --drain: at 43 s
    the line says how long it has drained, never ``43s/30s ETA 0s``."""
    st = ProgressState(43, 30, streams=412, active=12, drain_s=30)
    line = progress_line(st)
    assert line.startswith("43s, load ended at 30s, draining 13s of at most 30s")
    assert "ETA" not in line and "(12 open)" in line
    unknown = progress_line(ProgressState(43, 30))  # --drain not handed over: no bound said
    assert unknown.startswith("43s, load ended at 30s, draining 13s (streams in flight")
    before = progress_line(ProgressState(10, 30, drain_s=30))
    assert before.startswith("10s/30s ETA 20s + drain (at most 30s) |")


def test_plain_lines_come_every_interval_and_once_at_the_end():
    out = io.StringIO()
    p = Progress("plain", 30.0, stream=out)
    for t in range(0, 95, 5):
        p.update(ProgressState(elapsed_s=t, planned_s=90, streams=t))
    p.close()
    lines = out.getvalue().splitlines()
    assert [ln.split()[1] for ln in lines] == [
        "0s/1m30s",
        "30s/1m30s",
        "1m00s/1m30s",
        "1m30s/1m30s",
    ]


def test_auto_is_plain_off_a_terminal_and_live_redraws_on_one():
    assert Progress("auto", stream=io.StringIO()).mode == "plain"

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    tty = Tty()
    p = Progress("auto", stream=tty)
    assert p.mode == "live"
    p.update(ProgressState(elapsed_s=1, planned_s=10, streams=5))
    p.update(ProgressState(elapsed_s=2, planned_s=10, streams=9))
    p.close()
    text = tty.getvalue()
    assert "streams 9" in text and "\x1b[" in text  # redrawn in place with terminal controls
    off = io.StringIO()
    Progress("off", stream=off).update(ProgressState(1, 10))
    assert off.getvalue() == ""


_MONITOR = """
import json, numpy as np
from streamslo.loadgen.monitor import GeneratorMonitor
m = GeneratorMonitor(None, "t")
rng = np.random.default_rng(0)
lags = rng.lognormal(0, 1, 72_000)  # an hour of lag samples at 20/s
for v in lags.tolist():
    m.add_lag(v)
for i in range(3600):
    m.add_second(95.0 if i % 10 == 0 else 20.0, 100e6 + 1000.0 * i)
f = m.figures()
print(json.dumps({"f": f, "buckets": len(m.lag.to_wire()["c"]), "worst": len(m._worst),
                  "p99": float(np.percentile(lags, 99)), "max": float(lags.max())}))
"""


def test_the_monitor_keeps_no_list_of_samples():
    # In a subprocess: the monitor imports gevent, which the test process must not.
    r = subprocess.run(
        [sys.executable, "-c", _MONITOR], capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    f = d["f"]
    assert f["lag_samples"] == 72_000 and f["cpu_samples"] == 3600
    assert abs(f["lag_p99_ms"] / d["p99"] - 1) <= 0.01 and f["lag_max_ms"] == d["max"]
    assert f["cpu_busy_fraction"] == 0.1 and f["peak_cpu_percent"] == 95.0
    assert d["buckets"] < 1000 and d["worst"] == 3  # bounded, whatever the run's length
    assert f["rss_end_mb"] > f["rss_start_mb"]


def test_a_runs_watch_hands_its_drain_to_the_line(tmp_path):
    """``streamslo run`` builds the watch from its configuration: past the planned load the
    line names --drain's bound (the watch is handed the run's --drain)."""
    from streamslo.cli import build_parser
    from streamslo.run.child import _new_watch
    from streamslo.run.config import config_from_args
    from streamslo.slo.thresholds import DEFAULT_SLO

    args = build_parser("run").parse_args(
        ["run", "--host", "http://127.0.0.1:1", "--out", str(tmp_path), "--drain", "25s"]
    )
    cfg = config_from_args(args)
    watch = _new_watch(cfg, DEFAULT_SLO, tmp_path)
    assert watch.state(43.0).drain_s == 25.0
