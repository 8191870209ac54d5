"""How each request forces its length: the fields every means puts in the body, the options
that name them, and the end-of-sequence ids of a local model folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from streamslo.errors import BadInputError
from streamslo.options.run_options import RunOptions
from streamslo.options.values import ForcingValue, IntList
from streamslo.stream.truth import ForcedLength
from streamslo.workload.requests import (
    RequestOptions,
    build_body,
    eos_ids_from_tokenizer,
    resolve_forced,
)


def body(**kw: object) -> dict[str, object]:
    return json.loads(build_body(RequestOptions(model="m", **kw), "hi", max_tokens=12))  # type: ignore[arg-type]


def test_each_means_puts_its_fields_in_the_body():
    assert body()["ignore_eos"] is True
    assert body(forced=(ForcedLength.MIN_TOKENS,))["min_tokens"] == 12
    # transformers serve reads a JSON string (an object is a 500 there)
    assert body(forced="min_new_tokens")["generation_config"] == '{"min_new_tokens":12}'
    # floats: transformers serve refuses integer biases
    assert body(forced="logit_bias", eos_token_ids=(2, 7))["logit_bias"] == {
        "2": -100.0,
        "7": -100.0,
    }
    none = body(forced=())
    assert not {"ignore_eos", "min_tokens", "generation_config", "logit_bias"} & set(none)
    both = body(forced=(ForcedLength.IGNORE_EOS, ForcedLength.MIN_TOKENS))
    assert both["ignore_eos"] is True and both["min_tokens"] == 12
    with pytest.raises(BadInputError, match="needs the model's end-of-sequence token ids"):
        RequestOptions(forced="logit_bias")


def test_the_options_resolve_to_the_means():
    assert resolve_forced("auto", True) == (ForcedLength.IGNORE_EOS,)
    assert resolve_forced("auto", False) == ()
    assert resolve_forced("min_tokens", False) == (ForcedLength.MIN_TOKENS,)
    with pytest.raises(BadInputError, match="contradicts --no-ignore-eos"):
        resolve_forced("ignore_eos", False)
    assert ForcingValue().parse("min_tokens,ignore_eos") == "min_tokens+ignore_eos"
    assert ForcingValue().parse("auto") == "auto" and ForcingValue().parse("none") == "none"
    with pytest.raises(ValueError, match="is no forced length"):
        ForcingValue().parse("always")
    assert IntList().parse("2, 32000") == (2, 32000) and IntList().parse(2) == (2,)
    assert IntList().parse([1, 2]) == (1, 2) and IntList().wire((1, 2)) == "1,2"
    with pytest.raises(ValueError):
        IntList().parse("-1")
    req = RequestOptions.of(RunOptions(forced_length="logit_bias", eos_token_id=(5,)))
    assert req.forced == (ForcedLength.LOGIT_BIAS,) and req.eos_token_ids == (5,)


def test_end_of_sequence_ids_from_a_model_folder(tmp_path: Path):
    (tmp_path / "generation_config.json").write_text('{"eos_token_id": [128001, 128009]}')
    assert eos_ids_from_tokenizer(tmp_path) == (128001, 128009)
    other = tmp_path / "other"
    other.mkdir()
    (other / "tokenizer_config.json").write_text('{"eos_token": {"content": "</s>"}}')
    (other / "tokenizer.json").write_text(
        json.dumps({"added_tokens": [{"id": 2, "content": "</s>"}], "model": {"vocab": {}}})
    )
    assert eos_ids_from_tokenizer(other / "tokenizer.json") == (2,)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(BadInputError, match="no end-of-sequence token id"):
        eos_ids_from_tokenizer(empty)
    # --tokenizer gives them to a logit_bias forced length
    req = RequestOptions.of(RunOptions(forced_length="logit_bias", tokenizer=str(tmp_path)))
    assert req.eos_token_ids == (128001, 128009)
