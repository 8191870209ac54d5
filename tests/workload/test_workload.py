"""Workloads: where prompts come from, each turn's max_tokens, conversations, request bodies."""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest

from streamslo.errors import BadInputError
from streamslo.options.lengths import LengthDist
from streamslo.options.run_options import DEFAULTS
from streamslo.workload.prompts import TextMeasure
from streamslo.workload.requests import RequestOptions, Workload, build_body, resolve_system_prompt


def _opts(**kw):
    return replace(DEFAULTS, **kw)


def test_synthetic_prompts_follow_the_length_distribution():
    w = Workload(_opts(prompt_tokens=LengthDist.parse("uniform:5,9"), seed=3))
    lengths = [len(w.next().turns[0].prompt.split()) for _ in range(200)]
    assert min(lengths) == 5 and max(lengths) == 9
    assert {t.max_tokens for _ in range(20) for t in w.next().turns} == {DEFAULTS.max_tokens}
    again = Workload(_opts(prompt_tokens=LengthDist.parse("uniform:5,9"), seed=3))
    assert (
        again.next()
        == Workload(_opts(prompt_tokens=LengthDist.parse("uniform:5,9"), seed=3)).next()
    )
    assert (
        w.describe()["prompt_tokens"]["spec"] == "uniform:5,9" and w.describe()["unit"] == "words"
    )


def test_output_lengths_precedence(tmp_path):
    f = tmp_path / "d.jsonl"
    f.write_text('{"prompt": "a", "output_tokens": 5}\n{"prompt": "b"}\n')
    hinted = Workload(_opts(dataset=str(f), max_tokens=33))
    by_prompt = {p.turns[0].prompt: p.turns[0].max_tokens for p in (hinted.next(), hinted.next())}
    assert by_prompt == {"a": 5, "b": 33}  # the dataset's hint, else --max-tokens
    drawn = Workload(_opts(dataset=str(f), output_tokens=LengthDist.parse("uniform:100,110")))
    assert all(100 <= drawn.next().turns[0].max_tokens <= 110 for _ in range(10))  # the flag wins
    d = hinted.describe()
    assert (
        d["source"] == "dataset"
        and d["dataset"]["name"] == "d"
        and len(d["dataset"]["sha256"]) == 64
    )


def test_conversations_take_their_turns_then_continue_with_other_entries(tmp_path):
    f = tmp_path / "sg.json"
    f.write_text(
        json.dumps(
            [
                {
                    "conversations": [
                        {"from": "human", "value": "a1"},
                        {"from": "gpt", "value": "x"},
                        {"from": "human", "value": "a2"},
                    ]
                },
                {
                    "conversations": [
                        {"from": "human", "value": "b1"},
                        {"from": "human", "value": "b2"},
                    ]
                },
            ]
        )
    )
    w = Workload(_opts(dataset=str(f), turns=3))
    plans = [w.next() for _ in range(2)]
    got = sorted(tuple(t.prompt for t in p.turns) for p in plans)
    assert got == [("a1", "a2", "b1"), ("b1", "b2", "a1")]
    assert all(len(p.turns) == 3 for p in plans)


def test_synthetic_conversations_have_every_turn():
    w = Workload(_opts(turns=4, prompt_tokens=LengthDist.fixed(3)))
    plan = w.next()
    assert len(plan.turns) == 4 and all(len(t.prompt.split()) == 3 for t in plan.turns)


def test_dataset_and_prompt_file_together_is_bad_input(tmp_path):
    with pytest.raises(BadInputError, match="not both"):
        Workload(_opts(dataset="x", prompt_file="y"))


def test_body_carries_the_system_prompt_history_and_the_turns_max_tokens():
    opts = RequestOptions(model="m", system_prompt="be brief")
    body = json.loads(
        build_body(opts, "third", history=[("first", "A1"), ("second", "A2")], max_tokens=9)
    )
    assert body["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "A1"},
        {"role": "user", "content": "second"},
        {"role": "assistant", "content": "A2"},
        {"role": "user", "content": "third"},
    ]
    assert body["max_tokens"] == 9
    comp = json.loads(
        build_body(replace(opts, endpoint="completions"), "q2", history=[("q1", "a1")])
    )
    assert comp["prompt"] == "be brief\n\nq1\n\na1\n\nq2" and comp["max_tokens"] == opts.max_tokens
    assert (
        opts.expectations(9).max_tokens == 9 and opts.expectations().max_tokens == opts.max_tokens
    )


def test_system_prompt_from_a_file(tmp_path):
    f = tmp_path / "sys.txt"
    f.write_text("You are terse.\n")
    assert resolve_system_prompt(f"@{f}") == "You are terse."
    assert (
        resolve_system_prompt("plain text") == "plain text" and resolve_system_prompt(None) is None
    )
    with pytest.raises(BadInputError, match="cannot read"):
        resolve_system_prompt(f"@{tmp_path / 'missing'}")


def test_a_local_tokenizer_sizes_prompts_in_tokens(tokenizer_dir):
    m = TextMeasure(tokenizer_dir)
    assert m.unit == "tokens"
    words = TextMeasure()
    rng = random.Random(0)
    for n in (1, 7, 50, 200):
        text = m.make(n, rng)
        assert m.count(text) == n  # exactly n tokens of this tokenizer
        if n > 1:
            assert words.count(text) < n  # the words are split into several tokens each
    w = Workload(
        _opts(tokenizer=str(tokenizer_dir / "tokenizer.json"), prompt_tokens=LengthDist.fixed(40))
    )
    assert m.count(w.next().turns[0].prompt) == 40 and w.describe()["unit"] == "tokens"


def test_a_bad_tokenizer_is_bad_input(tmp_path):
    with pytest.raises(BadInputError, match=r"no tokenizer\.json"):
        TextMeasure(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{}")
    with pytest.raises(BadInputError, match=r"not a tokenizers tokenizer\.json"):
        TextMeasure(tmp_path)
