"""The run-options table: every place an option is given is derived from it, and agrees."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest

from streamslo.commands import run as run_command
from streamslo.commands import soak
from streamslo.errors import BadInputError
from streamslo.options import run_options
from streamslo.options.lengths import LengthDist, SecondsDist
from streamslo.options.redact import HEADERS_ENV, Headers
from streamslo.options.run_options import (
    DEFAULTS,
    OPTIONS,
    RunOptions,
    cli_values,
    locust_argv,
    markdown_reference,
    scenario_values,
)
from streamslo.options.values import Duration, Switch, TextList
from streamslo.run import execute as runner
from streamslo.run.locust_cmd import locust_command
from streamslo.workload.requests import ENDPOINT_PATHS, RequestOptions

REPO = Path(__file__).resolve().parents[1]
BY_NAME = {o.name: o for o in OPTIONS}


def _run_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(exit_on_error=False)
    run_command.add_arguments(p)
    return p


def _config(*argv: str) -> runner.RunConfig:
    return runner.config_from_args(
        _run_parser().parse_args(["--host", "http://127.0.0.1:9", "--out", "/tmp/x", *argv])
    )


def test_one_row_per_field_and_no_name_twice():
    assert [o.name for o in OPTIONS] == [f.name for f in fields(RunOptions)]
    for attr in ("flag", "scenario_key", "locust_flag"):
        values = [getattr(o, attr) for o in OPTIONS if getattr(o, attr)]
        assert len(values) == len(set(values)), attr


def test_secrets_and_local_paths_stay_out_of_the_web_ui():
    hidden = {o.locust_dest for o in OPTIONS if o.locust_flag and not o.in_web_ui}
    assert hidden == {
        "results_dir",
        "prompt_file",
        "api_key_env",
        "header",
        "header_file",
        "processes_hint",
        "slo",
        # local files to read: a dataset, a tokenizer, a system prompt's @FILE, a template
        "dataset",
        "tokenizer",
        "system_prompt",
        "ws_request_template",
        "trace",
        "sessions",
        # set by streamslo run from a scenario file's [scenarios.*], not by hand
        "scenarios_json",
        # set by streamslo run: the load's length from its first request
        "load_time",
        # set by streamslo run: the reference replies it recorded before the load
        "reference_replies",
    }
    for o in OPTIONS:
        if o.secret:
            assert not o.in_web_ui and not o.forwarded, o.name


def test_every_duration_takes_units_on_the_command_line_and_in_a_scenario():
    durations = [o for o in OPTIONS if isinstance(o.type, Duration)]
    assert {o.name for o in durations} >= {
        "duration",
        "stall_timeout",
        "request_timeout",
        "drain",
        "warmup",
        "think_time",
    }
    for o in durations:
        if o.cli:
            assert (
                cli_values(_run_parser().parse_args(["--out", "/tmp/x", o.flag, "5m"]))[o.name]
                == 300.0
            )
        if o.scenario_key:
            assert scenario_values({o.scenario_key: "1m30s"}, "s.toml")[o.name] == 90.0
            assert scenario_values({o.scenario_key: 2}, "s.toml")[o.name] == 2.0
        if o.locust_flag:
            assert o.from_wire("250ms") == 0.25


def test_a_bad_value_on_the_command_line_is_a_usage_error():
    with pytest.raises(argparse.ArgumentError, match="must be at least 1"):
        _run_parser().parse_args(["--users", "0"])
    with pytest.raises(argparse.ArgumentError, match="not a duration"):
        _run_parser().parse_args(["--stall-timeout", "soon"])


def test_only_what_the_command_line_set_overrides_the_scenario(tmp_path):
    scenario = tmp_path / "s.toml"
    scenario.write_text(
        '[load]\nusers = 7\nmax-tokens = 9\nstall_timeout = "2s"\nignore_eos = false\n'
        'headers = ["X-Team: a"]\nstages = [{duration = "1s", target = 2}, {duration = "2s", target = 0}]\n'
    )
    cfg = _config("--scenario", str(scenario), "--users", "3")
    assert (cfg.users, cfg.max_tokens, cfg.stall_timeout, cfg.ignore_eos) == (3, 9, 2.0, False)
    assert cfg.header == ("X-Team: a",) and cfg.stages == "1s:2,2s:0"
    assert cfg.request_timeout == DEFAULTS.request_timeout == 300.0
    assert cfg.scenario == str(scenario)


def test_a_scenario_key_that_is_not_an_option_names_the_file_and_line(tmp_path):
    scenario = tmp_path / "s.toml"
    scenario.write_text("[load]\nmax_tokenz = 3\n")
    with pytest.raises(BadInputError, match=r"s\.toml:2: unknown \[load\] key 'max_tokenz'"):
        _config("--scenario", str(scenario))
    with pytest.raises(BadInputError, match=r"s\.toml: \[load\] users: must be at least 1"):
        scenario_values({"users": 0}, "s.toml")
    with pytest.raises(BadInputError, match=r"\[load\] insecure: expected true or false"):
        scenario_values({"insecure": "yes"}, "s.toml")
    with pytest.raises(BadInputError, match=r"unknown \[load\] key 'out'"):
        scenario_values({"out": "elsewhere"}, "s.toml")  # output stays on the command line


def test_host_and_out_are_required():
    with pytest.raises(BadInputError, match="--host"):
        runner.config_from_args(_run_parser().parse_args(["--out", "/tmp/x"]))
    # --out is required by the parser itself, so that --help shows it as required
    with pytest.raises((SystemExit, argparse.ArgumentError)):
        _run_parser().parse_args(["--host", "http://h"])
    assert "--out DIR" in _run_parser().format_usage().replace("[--out DIR]", "")


def test_the_locust_command_carries_no_secret(tmp_path, monkeypatch):
    monkeypatch.setenv("H4_KEY", "sk-live-0123456789")
    monkeypatch.setenv("H4_TENANT", "tenant-secret-42")
    hfile = tmp_path / "headers"
    hfile.write_text("# team credentials\nX-Api-Key: file-secret-777\n\n")
    cfg = _config(
        "--api-key-env",
        "H4_KEY",
        "--header",
        "X-Tenant-Token: ${H4_TENANT}",
        "--header",
        "X-Plain: plain-value",
        "--header-file",
        str(hfile),
        "--max-tokens",
        "5",
    )
    cmd = locust_command(cfg, Path("locustfile.py"))
    line = " ".join(cmd)
    for value in (
        "sk-live-0123456789",
        "tenant-secret-42",
        "file-secret-777",
        "plain-value",
        "H4_KEY",
        str(hfile),
    ):
        assert value not in line
    for flag in ("--header", "--api-key-env", "--header-file"):
        assert flag not in cmd
    assert cmd[cmd.index("--results-dir") + 1] == "/tmp/x"
    assert cmd[cmd.index("--max-tokens") + 1] == "5"
    passed = Headers.from_env(cfg.locust_environment()[HEADERS_ENV]).as_dict()
    assert passed == {
        "X-Api-Key": "file-secret-777",
        "X-Tenant-Token": "tenant-secret-42",
        "X-Plain": "plain-value",
        "Authorization": "Bearer sk-live-0123456789",
    }
    assert "sk-live" not in repr(cfg) and "tenant-secret" not in repr(cfg)


def test_a_bad_header_fails_before_the_run_without_echoing_values(monkeypatch):
    monkeypatch.delenv("H4_MISSING", raising=False)
    with pytest.raises(BadInputError, match="H4_MISSING is not set"):
        _config("--header", "X-Token: ${H4_MISSING}")
    with pytest.raises(BadInputError, match="'Name: value'"):
        _config("--header", "no colon here")


def test_defaults_are_written_once():
    req = RequestOptions()
    assert (req.max_tokens, req.endpoint, req.ignore_eos, req.include_usage, req.done_marker) == (
        DEFAULTS.max_tokens,
        DEFAULTS.endpoint,
        DEFAULTS.ignore_eos,
        DEFAULTS.usage,
        DEFAULTS.done_marker,
    )
    assert set(BY_NAME["endpoint"].type.choices) == set(ENDPOINT_PATHS)  # type: ignore[attr-defined]
    assert locust_argv(DEFAULTS) == []  # Locust's parser has the very same defaults


def test_soak_takes_the_run_options():
    p = argparse.ArgumentParser(exit_on_error=False)
    soak.add_arguments(p)
    args = p.parse_args(
        ["--scenario", "s.toml", "--max-tokens", "5", "--warmup", "10s", "--header", "A: b"]
    )
    assert cli_values(args) == {
        "scenario": "s.toml",
        "max_tokens": 5,
        "warmup": 10.0,
        "header": ("A: b",),
    }
    with pytest.raises(SystemExit):  # argparse exits for a missing required option
        p.parse_args(["--max-tokens", "5"])


def test_the_cli_reference_is_generated_from_the_table():
    doc = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    block = doc[doc.index(run_options.BEGIN) : doc.index(run_options.END) + len(run_options.END)]
    assert block == markdown_reference(), (
        "docs/cli.md is stale: python -m streamslo.options.run_options docs/cli.md"
    )
    for o in OPTIONS:
        if o.cli:
            assert f"`{o.flag}`" in block


_LOCUST_ROUNDTRIP = """
import json, sys
from locust import argument_parser
from streamslo.options.run_options import from_locust, register_locust_arguments
parser = argument_parser.get_empty_argument_parser()
argument_parser.setup_parser_arguments(parser)
register_locust_arguments(parser)
values = from_locust(parser.parse_args(sys.argv[1:]))
print(json.dumps({k: (list(v) if isinstance(v, tuple) else str(v) if k == "out" else v) for k, v in values.items()},
                 default=lambda v: v.spec()))  # a length distribution: its text form
"""


def _non_default(o: run_options.RunOption) -> object:
    if isinstance(o.type, Switch):
        return not o.default
    if isinstance(o.type, TextList):
        return ("A: b",)
    special = {
        "out": Path("/tmp/r"),
        "protocol": "mixed",
        "endpoint": "completions",
        "model": "m1",
        "stages": "1s:2,2s:0",
        "shape": "spike",
        "itl_events": "per-gap",
        "prompt_file": "p.txt",
        "slow_readers": 0.25,
        "slo_source": "slo.toml",
        "dataset": "d.jsonl",
        "dataset_format": "jsonl",
        "prompt_tokens": LengthDist.parse("uniform:3,9"),
        "output_tokens": LengthDist.parse("normal:20,5,1,40"),
        "tokenizer": "tok.json",
        "system_prompt": "be brief",
        "ws_request_template": "t.json",
        "ws_chunk_path": "data.chunk",
        "ws_done_message": '{"type": "done"}',
        "trace": "t.jsonl",
        "trace_format": "burstgpt",
        "trace_late": "drop",
        "cancel_rate": 0.25,
        "cancel_after": "uniform:10tok,20tok",
        "prefix_tokens": LengthDist.parse("uniform:30,90"),
        "api": "openai-responses",
        "path": "/v2/gen",
        "token_ids": "off",
        "forced_length": "min_tokens",
        "eos_token_id": (2, 32000),
        "reference_replies": '{"ab12": "hello"}',
        "sessions": "synthetic",
        "tool_time": SecondsDist.parse("uniform:0.1,0.4"),
        "on_broken_step": "continue",
        "session_format": "otel",
        "session_arrivals": "rate",
        "session_tools": "none",
    }
    if o.name in special:
        return special[o.name]
    if isinstance(o.type, Duration):
        return 0.25
    return type(o.default)(3)


def test_what_streamslo_run_passes_is_what_locust_reads_back():
    """Every forwarded option at a non-default value survives the trip through Locust's real
    parser (run in a subprocess: importing locust patches this interpreter with gevent)."""
    forwarded = [o for o in OPTIONS if o.forwarded]
    cfg = runner.RunConfig(
        host="http://127.0.0.1:9",
        out=Path("/tmp/r"),
        **{o.name: _non_default(o) for o in forwarded if o.name != "out"},
    )
    argv = locust_argv(cfg)
    r = subprocess.run(
        [sys.executable, "-c", _LOCUST_ROUNDTRIP, *argv],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert r.returncode == 0, r.stderr
    back = json.loads(r.stdout)
    for o in forwarded:
        want = getattr(cfg, o.name)
        want = (
            str(want) if isinstance(want, Path) else list(want) if isinstance(want, tuple) else want
        )
        want = want.spec() if isinstance(want, (LengthDist, SecondsDist)) else want
        assert back[o.name] == want, o.name
