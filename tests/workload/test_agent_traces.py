"""Public agent traces read as sessions: an OpenTelemetry GenAI export (a planner with two
sub-agents and a join) and a SWE-agent trajectory (a chain with tool times)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from streamslo.errors import BadInputError
from streamslo.workload.sessions import read_sessions

DATA = Path(__file__).parent / "data"


def test_otel_agents_become_a_fan_out_and_a_join():
    sessions = read_sessions(DATA / "otel_genai_agents.json")
    planner, other = sessions
    steps = {s.id: s for s in planner.steps}
    assert list(steps) == ["c1", "ca", "cb", "c2"]  # model calls only, by start
    assert steps["c1"].parents == () and planner.at_s == 0.0
    assert steps["ca"].parents == ("c1",) and steps["cb"].parents == ("c1",)
    assert steps["ca"].wait_s == pytest.approx(0.6) and steps["cb"].wait_s == pytest.approx(0.7)
    # The planner's next call joins both sub-agents; its wait runs from the later one's end.
    assert set(steps["c2"].parents) == {"c1", "ca", "cb"}
    assert steps["c2"].wait_s == pytest.approx(0.3)
    # New input: the call's input less its first parent's context (input and output).
    assert steps["ca"].input_tokens == 500 - 440 and steps["c2"].output_tokens == 60
    assert planner.depth("c2") == 3
    # A second trace, a chain of the root agent; it arrives 4 s after the first.
    assert other.at_s == pytest.approx(4.0) and other.steps[1].parents == ("x1",)
    assert other.steps[1].wait_s == pytest.approx(0.5)


def test_a_swe_agent_trajectory_is_a_chain_with_tool_times(tmp_path):
    (session,) = read_sessions(DATA / "swe_agent_fix.traj")
    assert session.id == "swe_agent_fix" and len(session.steps) == 3
    one, two, three = session.steps
    assert one.parents == () and two.parents == ("1",) and three.parents == ("2",)
    assert one.input_tokens == 7  # the task's words
    assert two.wait_s == 0.25 and three.wait_s == 0.1  # the tool's time before each
    assert two.input_tokens == 4  # the observation it got back
    assert all(s.tool for s in session.steps)
    # A directory of trajectories: a session each; mini-SWE-agent's messages too.
    mini = {
        "trajectory_format": "mini-swe-agent-1.1",
        "info": {},
        "messages": [
            {"role": "system", "content": "be terse"},
            {"role": "user", "content": "list files"},
            {"role": "assistant", "content": "ls -la"},
            {"role": "user", "content": "a b c"},
            {"role": "assistant", "content": "done"},
        ],
    }
    (tmp_path / "m.traj.json").write_text(json.dumps(mini))
    (tmp_path / "s.traj").write_text((DATA / "swe_agent_fix.traj").read_text())
    got = read_sessions(tmp_path)
    assert [s.id for s in got] == ["m", "s"]
    assert [st.input_tokens for st in got[0].steps] == [4, 3]


def test_a_broken_trace_is_named(tmp_path):
    bad = tmp_path / "t.json"
    bad.write_text(
        json.dumps(
            {
                "resourceSpans": [
                    {
                        "scopeSpans": [
                            {
                                "spans": [
                                    {
                                        "traceId": "t",
                                        "spanId": "s",
                                        "attributes": [
                                            {
                                                "key": "gen_ai.operation.name",
                                                "value": {"stringValue": "chat"},
                                            }
                                        ],
                                    }
                                ]
                            }
                        ]
                    }
                ]
            }
        )
    )
    with pytest.raises(BadInputError, match=r"t\.json:1: model span s needs startTimeUnixNano"):
        read_sessions(bad)
    (tmp_path / "x.traj").write_text("[1, 2]")
    with pytest.raises(BadInputError, match=r"x\.traj: not a trajectory"):
        read_sessions(tmp_path / "x.traj")
