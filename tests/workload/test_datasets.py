"""Datasets from local files: ShareGPT, JSON Lines, a Hugging Face folder (parquet, arrow,
jsonl); detection, hints, hashes, and errors that name the place."""

from __future__ import annotations

import hashlib
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from streamslo.errors import BadInputError
from streamslo.workload.datasets import detect_format, load_dataset

SHAREGPT = [
    {
        "id": "a",
        "conversations": [
            {"from": "human", "value": "what is a stream"},
            {"from": "gpt", "value": "one two three four five"},
            {"from": "human", "value": "and a token"},
            {"from": "gpt", "value": "six seven"},
        ],
    },
    {
        "id": "b",
        "conversations": [{"from": "system", "value": "be nice"}, {"from": "human", "value": "hi"}],
    },
]


def test_sharegpt_takes_human_turns_and_reply_lengths(tmp_path):
    f = tmp_path / "sg.json"
    f.write_text(json.dumps(SHAREGPT))
    ds = load_dataset(f)
    assert ds.info.format == "sharegpt" and ds.info.entries == 2 and ds.info.name == "sg"
    assert ds.info.sha256 == hashlib.sha256(f.read_bytes()).hexdigest()
    first, second = ds.conversations
    assert first.turns == ("what is a stream", "and a token") and first.output_hints == (5, 2)
    assert second.turns == ("hi",) and second.output_hints == (None,)


def test_jsonl_prompts_with_lengths_and_chat_messages(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text(
        '{"prompt": "alpha", "output_tokens": 7}\n\n{"text": "beta"}\n'
        '{"messages": [{"role": "user", "content": "gamma"}, {"role": "assistant", "content": "x y z"}]}\n'
    )
    ds = load_dataset(f)
    assert detect_format(f) == "jsonl"
    assert [c.turns for c in ds.conversations] == [("alpha",), ("beta",), ("gamma",)]
    assert [c.output_hints for c in ds.conversations] == [(7,), (None,), (3,)]


def test_a_reply_is_measured_by_the_callers_unit(tmp_path):
    f = tmp_path / "sg.json"
    f.write_text(json.dumps(SHAREGPT))
    ds = load_dataset(f, measure=len)  # characters, say: the unit is the caller's
    assert ds.conversations[0].output_hints == (len("one two three four five"), len("six seven"))


def test_a_hugging_face_folder_reads_parquet_arrow_and_jsonl(tmp_path):
    root = tmp_path / "hf"
    (root / "data").mkdir(parents=True)
    pq.write_table(
        pa.table({"prompt": ["p1", "p2"], "output_tokens": [3, 4]}),
        root / "data" / "train-0.parquet",
    )
    table = pa.table(
        {"conversations": [[{"from": "human", "value": "c1"}, {"from": "gpt", "value": "a b"}]]}
    )
    with (
        pa.OSFile(str(root / "data" / "train-1.arrow"), "wb") as sink,
        pa.ipc.new_stream(sink, table.schema) as w,
    ):
        w.write_table(table)  # save_to_disk's format: the IPC stream
    (root / "data" / "train-2.jsonl").write_text('{"prompt": "j1"}\n')
    (root / "dataset_info.json").write_text("{}")  # metadata, not rows
    ds = load_dataset(root)
    assert ds.info.format == "hf" and ds.info.entries == 4
    assert [c.turns[0] for c in ds.conversations] == ["p1", "p2", "c1", "j1"]
    assert [c.output_hints[0] for c in ds.conversations] == [3, 4, 2, None]
    again = load_dataset(root, "hf")
    assert again.info.sha256 == ds.info.sha256
    (root / "data" / "train-2.jsonl").write_text('{"prompt": "j2"}\n')
    assert load_dataset(root).info.sha256 != ds.info.sha256


@pytest.mark.parametrize(
    ("content", "fmt", "match"),
    [
        ('{"prompt": "ok"}\n{"nope": 1}\n', "auto", r"p\.data:2: no prompt"),
        ('{"prompt": "ok"}\nnot json\n', "auto", r"p\.data:2: not valid JSON"),
        ('[{"conversations": []}]', "auto", r"entry 0: no prompt"),
        ("[1, 2", "sharegpt", "not valid JSON"),
        ('{"prompt": "x"}', "parquet", "must be one of"),
    ],
)
def test_errors_name_the_file_and_place(tmp_path, content, fmt, match):
    f = tmp_path / "p.data"
    f.write_text(content)
    with pytest.raises(BadInputError, match=match):
        load_dataset(f, fmt)


def test_missing_paths_and_empty_folders(tmp_path):
    with pytest.raises(BadInputError, match="no such dataset"):
        load_dataset(tmp_path / "nope.json")
    (tmp_path / "empty").mkdir()
    with pytest.raises(BadInputError, match="no data files"):
        load_dataset(tmp_path / "empty")
    (tmp_path / "f.jsonl").write_text("\n")
    with pytest.raises(BadInputError, match="no entries"):
        load_dataset(tmp_path / "f.jsonl")
