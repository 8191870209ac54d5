"""[budget]: parsing (errors name the file and line), burn rates, alerts, replay, time_scale."""

from __future__ import annotations

import pytest

from streamslo.errors import SLOFileError
from streamslo.slo.budget import Budget, BurnTracker, burn_down, parse_budget, read_slo_file, replay
from streamslo.slo.thresholds import load_slo

GOOD = """\
[thresholds]
truncation_rate = ["rate<0.01"]

[budget]
objective = "truncation_rate"
target = 0.999
time_scale = 60
alerts = [{ long = "1h", short = "5m", factor = 14.4, abortOnFail = true },
          { long = "6h", short = "30m", factor = 6 }]
"""


def _write(tmp_path, text, name="slo.toml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_a_budget_parses_with_its_windows_scaled(tmp_path):
    slo, budget = read_slo_file(_write(tmp_path, GOOD))
    assert [t.metric for t in slo.thresholds] == ["truncation_rate"]
    assert budget.objective == "truncation_rate" and budget.target == 0.999
    fast, slow = budget.alerts
    assert (fast.long_s, fast.short_s, fast.factor, fast.abort_on_fail) == (60.0, 5.0, 14.4, True)
    assert (slow.long_s, slow.short_s, slow.abort_on_fail) == (360.0, 30.0, False)
    assert Budget.from_dict(budget.as_dict()) == budget
    assert len(load_slo(tmp_path / "slo.toml")) == 1  # verify still reads the file


def test_a_scenario_file_holds_a_budget_too(tmp_path):
    text = '[load]\nusers = 5\n\n[budget]\nobjective = "http_5xx_rate"\ntarget = 0.99\n'
    slo, budget = read_slo_file(_write(tmp_path, text, "scenario.toml"))
    assert slo is None
    assert [a.name for a in budget.alerts] == ["1h/5m×14.4", "6h/30m×6"]  # the workbook's defaults


@pytest.mark.parametrize(
    ("line", "text", "message"),
    [
        (5, GOOD.replace('objective = "truncation_rate"', 'objective = "itl_ms"'), "rate metric"),
        (6, GOOD.replace("target = 0.999", "target = 1.5"), "between 0 and 1"),
        (7, GOOD.replace("time_scale = 60", "time_scale = 0"), "time_scale"),
        (
            8,
            GOOD.replace('long = "1h", short = "5m"', 'long = "5m", short = "1h"'),
            "shorter than the long",
        ),
        (9, GOOD.replace("factor = 6 }", "factor = 6, page = true }"), "unknown key 'page'"),
        (8, GOOD.replace("abortOnFail = true", 'abortOnFail = "yes"'), "true or false"),
        (5, GOOD.replace("objective", "objectiv"), "unknown key 'objectiv'"),
    ],
)
def test_errors_name_the_file_and_line(tmp_path, line, text, message):
    p = _write(tmp_path, text)
    with pytest.raises(SLOFileError, match=message) as err:
        read_slo_file(p)
    assert err.value.path == str(p)
    assert err.value.line == line, str(err.value)


def _row(k: int, began: int, failed: int, w: float = 10.0) -> dict:
    return {
        "window_start": k * w,
        "window_s": w,
        "requests": began,
        "began": began,
        "ok": began - failed,
        "truncated": failed,
    }


def _budget(**kw) -> Budget:
    return parse_budget(
        {
            "objective": "truncation_rate",
            "target": 0.99,
            "alerts": [{"long": "60s", "short": "20s", "factor": 10, **kw}],
        }
    )


def test_an_alert_fires_when_both_windows_burn_faster_than_the_factor():
    tracker = BurnTracker(_budget(abortOnFail=True))
    fired = []
    for k in range(6):
        fired += tracker.add(_row(k, 100, 0))  # clean: burn 0
    assert fired == [] and tracker.burns["60s/20s×10"] == (0.0, 0.0)
    fired += tracker.add(_row(6, 100, 50))  # short: 50/200 = 25 % -> burn 25; long: 50/600 -> 8.3
    assert fired == []
    fired += tracker.add(_row(7, 100, 50))  # short 50 %, long 100/600 = 16.7 % -> burn 16.7 > 10
    assert len(fired) == 1
    alert = fired[0]
    assert alert.fired_at_epoch == 80.0 and alert.fired_at == "1970-01-01T00:01:20.000Z"
    assert alert.burn_short == pytest.approx(50.0) and alert.burn_long == pytest.approx(
        100 / 600 / 0.01, rel=1e-3
    )
    assert alert.abort_on_fail
    for k in range(8, 10):
        fired += tracker.add(_row(k, 100, 50))
    assert len(fired) == 1  # still the same episode: it fires once
    assert tracker.consumed == pytest.approx((200 / 1000) / 0.01)


def test_the_short_window_stops_an_alert_once_the_failures_stop():
    tracker = BurnTracker(_budget())
    for k, failed in enumerate([0, 0, 100, 100, 0, 0, 0, 100, 100]):
        tracker.add(_row(k, 100, failed))
    # Fires at the end of the first failing window (both spans burn 50 and 33 > 10), stops
    # once the short span is clean (window 5), fires again with the next failures.
    assert [a.fired_at_epoch for a in tracker.fired] == [30.0, 80.0]


def test_a_clean_run_fires_nothing_and_replay_gives_the_live_alerts():
    budget = _budget()
    clean = [_row(k, 100, 0) for k in range(20)]
    assert replay(budget, clean) == []
    bad = clean[:5] + [_row(k, 100, 80) for k in range(5, 10)]
    live = BurnTracker(budget)
    for r in bad:
        live.add(r)
    assert replay(budget, bad) == live.fired and live.fired
    down = burn_down(budget, bad)
    assert down[0] == (10.0, 1.0) and down[-1][1] < 0  # the budget is overspent


def test_no_eligible_stream_burns_nothing():
    tracker = BurnTracker(_budget())
    assert (
        tracker.add({"window_start": 0, "window_s": 10, "requests": 3, "began": 0, "http_5xx": 3})
        == []
    )
    assert tracker.consumed is None
