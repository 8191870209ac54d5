"""The ``[scenarios.*]`` parser: every executor, its k6 option names and units, and every
mistake named with its file and line."""

from __future__ import annotations

import tomllib

import pytest

from streamslo.options.lengths import LengthDist
from streamslo.options.stages import Stage
from streamslo.workload.scenarios import (
    Scenario,
    ScenarioFileError,
    arrival_offsets,
    dropped_totals,
    from_wire,
    parse_scenarios,
    process_share,
    to_wire,
)

ALL = """\
[scenarios.steady]
executor = "constant-vus"
vus = 4
duration = "1m"

[scenarios.ramp]
executor = "ramping-vus"
startVUs = 2
stages = [{ duration = "30s", target = 10 }, { duration = "10s", target = 0 }]
gracefulRampDown = "5s"
startTime = "1m"

[scenarios.chat]
executor = "constant-arrival-rate"
rate = 30
timeUnit = "1m"
duration = "2m"
preAllocatedVUs = 5
maxVUs = 20
protocol = { sse = 0.8, ws = 0.2 }
slowReaders = 0.1
promptTokens = "uniform:100,200"
outputTokens = 64

[scenarios.surge]
executor = "ramping-arrival-rate"
startRate = 5
preAllocatedVUs = 10
stages = [{ duration = "10s", target = 20 }]
gracefulStop = "3s"
protocol = "ws"
"""


def parse(text: str, source: str = "s.toml") -> tuple[Scenario, ...]:
    return parse_scenarios(tomllib.loads(text)["scenarios"], source, text)


def test_every_executor_parses_with_k6_names_and_units():
    steady, ramp, chat, surge = parse(ALL)
    assert (steady.executor, steady.vus, steady.duration, steady.line) == (
        "constant-vus",
        4,
        60.0,
        1,
    )
    assert not steady.arrival_rate and steady.protocol is None and steady.graceful_stop == 30.0
    assert (
        ramp.stages == (Stage(30.0, 10), Stage(10.0, 0)) and ramp.vus == 2 and ramp.duration == 40.0
    )
    assert (ramp.start_time, ramp.end, ramp.graceful_ramp_down) == (60.0, 100.0, 5.0)
    # 30 per minute is half an arrival a second; maxVUs defaults to nothing less than given.
    assert chat.arrival_rate and chat.rate == pytest.approx(0.5) and chat.time_unit == 60.0
    assert (chat.pre_allocated_vus, chat.max_vus, chat.duration) == (5, 20, 120.0)
    assert chat.protocol == (("sse", 0.8), ("ws", 0.2)) and chat.slow_readers == 0.1
    assert chat.prompt_tokens == LengthDist.parse(
        "uniform:100,200"
    ) and chat.output_tokens == LengthDist.fixed(64)
    assert surge.rate == 5.0 and surge.rate_stages == ((10.0, 20.0),) and surge.max_vus == 10
    assert surge.protocol == (("ws", 1.0),) and surge.graceful_stop == 3.0 and surge.line == 25


def test_wire_round_trip_keeps_every_scenario():
    table = tomllib.loads(ALL)["scenarios"]
    assert from_wire(to_wire(table)) == tuple(
        sc.__class__(**{**sc.__dict__, "line": None}) for sc in parse(ALL)
    )


@pytest.mark.parametrize(
    ("body", "line", "needle"),
    [
        ('executor = "shared-iterations"\n', 2, "unknown executor 'shared-iterations'"),
        ('vus = 3\nduration = "10s"\n', 1, "executor is required"),
        ('executor = "constant-vus"\nvus = 2\n', 1, "duration is required"),
        ('executor = "constant-vus"\nduration = "ten"\n', 3, "duration"),
        (
            'executor = "constant-vus"\nduration = "5s"\nrate = 3\n',
            4,
            "belongs to constant-arrival-rate",
        ),
        ('executor = "constant-vus"\nduration = "5s"\nvu = 3\n', 4, "did you mean 'vus'"),
        ('executor = "constant-vus"\nduration = "5s"\nvus = 1.5\n', 4, "whole number"),
        ('executor = "ramping-vus"\n', 1, "stages is required"),
        ('executor = "ramping-vus"\nstages = [{ duration = "5s" }]\n', 3, "stage 1"),
        ('executor = "ramping-vus"\nstages = [{ duration = "5s", target = -1 }]\n', 3, "target"),
        (
            'executor = "constant-arrival-rate"\nrate = 5\nduration = "5s"\n',
            1,
            "preAllocatedVUs is required",
        ),
        (
            'executor = "constant-arrival-rate"\nrate = 0\nduration = "5s"\npreAllocatedVUs = 1\n',
            3,
            "more than 0",
        ),
        (
            'executor = "constant-arrival-rate"\nrate = 5\nduration = "5s"\npreAllocatedVUs = 4\nmaxVUs = 2\n',
            6,
            "at least preAllocatedVUs",
        ),
        (
            'executor = "ramping-arrival-rate"\npreAllocatedVUs = 1\nstages = []\n',
            4,
            "non-empty list",
        ),
        (
            'executor = "ramping-arrival-rate"\npreAllocatedVUs = 1\ntimeUnit = "0s"\nstages = [{ duration = "1s", target = 1 }]\n',
            4,
            "timeUnit",
        ),
        ('executor = "constant-vus"\nduration = "5s"\nprotocol = "http"\n', 4, "protocol"),
        (
            'executor = "constant-vus"\nduration = "5s"\nprotocol = { sse = 1, grpc = 1 }\n',
            4,
            "unknown protocol 'grpc'",
        ),
        (
            'executor = "constant-vus"\nduration = "5s"\nprotocol = { sse = 0, ws = 0 }\n',
            4,
            "not all 0",
        ),
        ('executor = "constant-vus"\nduration = "5s"\nslowReaders = 2\n', 4, "between 0 and 1"),
        (
            'executor = "constant-vus"\nduration = "5s"\noutputTokens = "gauss:3"\n',
            4,
            "length distribution",
        ),
    ],
)
def test_every_mistake_names_file_and_line(body, line, needle):
    text = "# a comment first\n[scenarios.x]\n" + body
    with pytest.raises(ScenarioFileError) as exc:
        parse(text, "bad.toml")
    msg = str(exc.value)
    assert msg.startswith(f"bad.toml:{line + 1}: [scenarios.x]"), msg
    assert needle in msg, msg
    assert exc.value.line == line + 1


def test_empty_or_misnamed_scenarios_are_refused():
    with pytest.raises(ScenarioFileError, match="at least one"):
        parse_scenarios({}, "e.toml")
    with pytest.raises(ScenarioFileError, match="bad scenario name"):
        parse_scenarios({"a b": {"executor": "constant-vus", "duration": "1s"}}, "e.toml")


def test_ramping_arrivals_follow_the_integral_of_the_rate():
    (sc,) = parse(
        '[scenarios.r]\nexecutor = "ramping-arrival-rate"\nstartRate = 0\npreAllocatedVUs = 1\n'
        'stages = [{ duration = "10s", target = 20 }, { duration = "5s", target = 20 }, { duration = "5s", target = 0 }]\n'
    )
    times = list(arrival_offsets(sc))
    # Integral: 10 s ramp 0->20 = 100; 5 s at 20 = 100; 5 s down to 0 = 50.
    assert len(times) == 250
    assert times == sorted(times) and times[0] >= 0 and times[-1] < 20.0
    for t, owed in [(5.0, 25), (10.0, 100), (12.5, 150), (15.0, 200)]:
        assert sum(x < t for x in times) == pytest.approx(owed, abs=1)


def test_constant_arrivals_are_evenly_spaced():
    (sc,) = parse(
        '[scenarios.c]\nexecutor = "constant-arrival-rate"\nrate = 4\nduration = "2s"\npreAllocatedVUs = 1\n'
    )
    assert list(arrival_offsets(sc)) == pytest.approx([0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75])


def test_ramping_vus_interpolate_and_end():
    (sc,) = parse(
        '[scenarios.v]\nexecutor = "ramping-vus"\nstartVUs = 0\nstages = [{ duration = "10s", target = 10 }, { duration = "5s", target = 10 }]\n'
    )
    assert [sc.vus_at(t) for t in (0, 5, 9.99, 12)] == [0, 5, 10, 10]
    assert sc.vus_at(15.0) is None and sc.peak_vus() == 10


def test_process_shares_add_up():
    for total in range(0, 12):
        assert sum(process_share(total, i, 4) for i in range(4)) == total


def test_dropped_totals_sum_processes():
    procs = [{"dropped_iterations": {"a": 2, "b": 1}}, {"dropped_iterations": {"a": 3}}, {}]
    assert dropped_totals(procs) == {
        "dropped_iterations": 6,
        "dropped_iterations_by_scenario": {"a": 5, "b": 1},
    }


def test_shipped_scenario_files_use_scenarios():
    from streamslo.workload.scenario_file import read_scenario
    from tests.loadgen.helpers import REPO

    for name, minutes in (("nightly.toml", 60.0), ("soak-short.toml", 70 / 60)):
        scenario = read_scenario(REPO / "locustfiles" / "scenarios" / name)
        values, slo = scenario.values, scenario.slo
        (sc,) = from_wire(values["scenarios"])
        assert sc.executor == "ramping-vus" and sc.duration == pytest.approx(minutes * 60)
        assert (
            sc.protocol == (("sse", 0.5), ("ws", 0.5))
            and "stages" not in values
            and slo is not None
        )
