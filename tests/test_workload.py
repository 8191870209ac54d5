"""Request bodies, prompts and the user mix (no Locust in this process)."""

from __future__ import annotations

import json

import pytest

from streamslo.errors import BadInputError
from streamslo.stream.truth import ForcedLength
from streamslo.workload.requests import PromptSource, RequestOptions, build_body, user_weights


def test_default_body_asks_for_what_silent_truncation_needs():
    body = json.loads(build_body(RequestOptions(model="m", max_tokens=7), "hi"))
    assert body == {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "max_tokens": 7,
        "temperature": 0.0,
        "seed": 0,
        "ignore_eos": True,
        "stream_options": {"include_usage": True},
    }


def test_switches_and_endpoints():
    body = json.loads(
        build_body(
            RequestOptions(endpoint="completions", forced=ForcedLength.NONE, include_usage=False),
            "p",
        )
    )
    assert (
        body["prompt"] == "p"
        and "ignore_eos" not in body
        and "stream_options" not in body
        and "model" not in body
    )
    assert RequestOptions(endpoint="stream").path == "/v1/stream"
    with pytest.raises(BadInputError):
        RequestOptions(endpoint="nope")
    with pytest.raises(BadInputError):
        RequestOptions(max_tokens=0)


def test_prompt_file_lines_and_jsonl(tmp_path):
    f = tmp_path / "p.txt"
    f.write_text('plain one\n\n{"prompt": "from json"}\n')
    src = PromptSource.from_file(f, seed=1)
    assert {src.next(), src.next()} == {"plain one", "from json"}
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"x": 1}\n')
    with pytest.raises(BadInputError, match=r"bad.jsonl:1"):
        PromptSource.from_file(bad)
    with pytest.raises(BadInputError, match="cannot read"):
        PromptSource.from_file(tmp_path / "missing.txt")


def test_synthetic_prompts_are_seeded():
    a = [PromptSource.synthetic(8, seed=5).next() for _ in range(3)]
    b = [PromptSource.synthetic(8, seed=5).next() for _ in range(3)]
    assert a == b and len(a[0].split()) == 8


@pytest.mark.parametrize(
    ("protocol", "slow", "expected"),
    [
        ("sse", 0.0, {"SSEStreamUser": 1000}),
        ("ws", 0.1, {"WebSocketStreamUser": 900, "SlowWebSocketStreamUser": 100}),
        ("mixed", 0.0, {"SSEStreamUser": 500, "WebSocketStreamUser": 500}),
        ("mixed", 1.0, {"SlowSSEStreamUser": 500, "SlowWebSocketStreamUser": 500}),
    ],
)
def test_user_mix(protocol, slow, expected):
    assert user_weights(protocol, slow) == expected
