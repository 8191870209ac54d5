"""Trace formats: detection, fields, offsets, bad lines, and reading from disk as it goes."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import pytest

from streamslo.errors import BadInputError
from streamslo.workload.trace import describe_trace, detect_format, iter_trace

DATA = Path(__file__).resolve().parent / "data"
EXCERPT = DATA / "mooncake_excerpt.jsonl"


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_mooncake_offsets_lengths_and_hash_ids(tmp_path):
    p = _write(
        tmp_path,
        "t.jsonl",
        "\n".join(
            json.dumps(x)
            for x in [
                {"timestamp": 1000, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]},
                {"timestamp": 1250, "input_length": 100, "output_length": 7, "hash_ids": [1]},
                {"timestamp": 4000, "input_length": 9, "output_length": 1, "hash_ids": []},
            ]
        )
        + "\n\n",
    )
    assert detect_format(p) == "mooncake"
    reqs = list(iter_trace(p))
    # Offsets count from the first request, in seconds (the timestamps are milliseconds).
    assert [r.offset_s for r in reqs] == [0.0, 0.25, 3.0]
    assert [(r.input_tokens, r.output_tokens, r.hash_ids) for r in reqs] == [
        (600, 5, (1, 2)),
        (100, 7, (1,)),
        (9, 1, ()),
    ]
    assert [r.index for r in reqs] == [0, 1, 2]


def test_plain_jsonl_and_csv_time_columns(tmp_path):
    j = _write(
        tmp_path,
        "t.jsonl",
        '{"time": 10.5, "prompt_tokens": 3, "max_tokens": 4}\n'
        '{"time": 11.0, "input_tokens": 5, "output_tokens": 6}\n',
    )
    assert detect_format(j) == "jsonl"
    assert [(r.offset_s, r.input_tokens, r.output_tokens) for r in iter_trace(j)] == [
        (0.0, 3, 4),
        (0.5, 5, 6),
    ]
    c = _write(
        tmp_path,
        "t.csv",
        "timestamp,input_length,output_length,hash_ids\n500,10,2,1 2\n2500,20,3,\n",
    )
    assert detect_format(c) == "csv"
    reqs = list(iter_trace(c))
    assert [(r.offset_s, r.input_tokens, r.output_tokens, r.hash_ids) for r in reqs] == [
        (0.0, 10, 2, (1, 2)),
        (2.0, 20, 3, ()),
    ]


def test_burstgpt_columns_and_failed_rows_skipped(tmp_path):
    p = _write(
        tmp_path,
        "burst.csv",
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        "5,ChatGPT,472,18,490,Conversation log\n"
        "45,ChatGPT,1087,0,1087,Conversation log\n"
        "118,GPT-4,417,276,693,API log\n",
    )
    assert detect_format(p) == "burstgpt"
    reqs = list(iter_trace(p))
    assert [(r.index, r.offset_s, r.input_tokens, r.output_tokens) for r in reqs] == [
        (0, 0.0, 472, 18),
        (1, 113.0, 417, 276),
    ]
    info = describe_trace(p)
    assert (info.requests, info.skipped, info.span_s, info.format) == (2, 1, 113.0, "burstgpt")


def test_bad_lines_name_the_file_and_line(tmp_path):
    p = _write(
        tmp_path,
        "t.jsonl",
        '{"timestamp": 0, "input_length": 5, "output_length": 2, "hash_ids": []}\n'
        '{"timestamp": 1, "input_length": "many", "output_length": 2, "hash_ids": []}\n',
    )
    with pytest.raises(BadInputError, match=r"t\.jsonl:2: input_length must be a whole number"):
        list(iter_trace(p))
    q = _write(tmp_path, "q.jsonl", '{"timestamp": 0, "input_length": 5}\n')
    with pytest.raises(BadInputError, match=r"q\.jsonl:1: no output length field"):
        describe_trace(q)
    with pytest.raises(BadInputError, match="--trace-format must be one of"):
        detect_format(p, "parquet")
    with pytest.raises(BadInputError, match="cannot read the trace"):
        describe_trace(tmp_path / "missing.jsonl")


def test_describe_records_the_hash_and_span_of_the_excerpt():
    info = describe_trace(EXCERPT)
    assert info.sha256 == hashlib.sha256(EXCERPT.read_bytes()).hexdigest()
    assert info.format == "mooncake" and info.requests == len(EXCERPT.read_text().splitlines())
    # The excerpt is two minutes long and has bursts: some second holds 10+ arrivals.
    assert 110 <= info.span_s <= 120
    offsets = [r.offset_s for r in iter_trace(EXCERPT)]
    per_second = [0] * 121
    for t in offsets:
        per_second[int(t)] += 1
    assert max(per_second) >= 10 and sorted(per_second)[60] <= 4


def test_iterating_reads_as_it_goes(tmp_path):
    """The first request comes before a bad line far down the file is read: the trace is
    streamed, not loaded whole."""
    good = json.dumps({"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [0]})
    p = _write(tmp_path, "big.jsonl", (good + "\n") * 20000 + "not json\n")
    it = iter_trace(p)
    assert next(it).index == 0
    with pytest.raises(BadInputError, match=r"big\.jsonl:20001: not valid JSON"):
        for _ in it:
            pass


def test_trace_scenarios_parse_and_name_their_mistakes(tmp_path):
    from streamslo.workload.scenarios import ScenarioFileError, parse_scenarios

    (sc,) = parse_scenarios(
        {
            "r": {
                "executor": "trace",
                "trace": str(EXCERPT),
                "speed": 2,
                "late": "drop",
                "maxLag": "10ms",
                "maxVUs": 40,
            }
        },
        "s.toml",
    )
    assert (sc.trace_speed, sc.trace_late, sc.trace_max_lag, sc.max_vus) == (2.0, "drop", 0.01, 40)
    assert sc.duration == pytest.approx(describe_trace(EXCERPT).span_s / 2)
    with pytest.raises(ScenarioFileError, match=r"\[scenarios.r\]: trace is required"):
        parse_scenarios({"r": {"executor": "trace"}}, "s.toml")
    with pytest.raises(ScenarioFileError, match="expected send or drop"):
        parse_scenarios(
            {"r": {"executor": "trace", "trace": str(EXCERPT), "late": "later"}}, "s.toml"
        )
    with pytest.raises(ScenarioFileError, match="'rate' does not apply to trace"):
        parse_scenarios({"r": {"executor": "trace", "trace": str(EXCERPT), "rate": 3}}, "s.toml")
    with pytest.raises(ScenarioFileError, match="cannot read the trace"):
        parse_scenarios(
            {"r": {"executor": "trace", "trace": str(tmp_path / "nope.jsonl")}}, "s.toml"
        )


def _config(*argv: str):
    import argparse

    from streamslo.commands.run import add_arguments
    from streamslo.run.execute import config_from_args

    p = argparse.ArgumentParser(exit_on_error=False)
    add_arguments(p)
    return config_from_args(
        p.parse_args(["--host", "http://127.0.0.1:9", "--out", "/tmp/x", *argv])
    )


def test_a_trace_run_lasts_the_trace_and_sets_the_arrivals_alone():
    span = describe_trace(EXCERPT).span_s
    cfg = _config("--trace", str(EXCERPT), "--trace-speed", "4", "--processes", "3")
    assert cfg.duration == math.ceil(span / 4 + 1.0) and cfg.users == 3
    assert _config("--trace", str(EXCERPT), "--duration", "7").duration == 7
    with pytest.raises(BadInputError, match="--trace sets the arrivals; remove request_rate"):
        _config("--trace", str(EXCERPT), "--request-rate", "5")
    with pytest.raises(BadInputError, match="cannot read the trace"):
        _config("--trace", "/nonexistent/trace.jsonl")
