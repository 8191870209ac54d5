"""Prompt datasets read from local files: ShareGPT JSON, JSON Lines, a Hugging Face dataset folder.

``--dataset PATH`` (``docs/workloads.md``), format detected from the content or named with
``--dataset-format``:

- ``sharegpt``: a JSON array of ``{"conversations": [{"from": "human", "value": ...},
  {"from": "gpt", "value": ...}, ...]}`` (``role``/``content`` and ``user``/``assistant`` are
  read too). Each human turn is a user message; the reply after it gives the output length hint.
- ``jsonl``: one JSON object a line with ``prompt`` (or ``text``) and an optional
  ``output_tokens``; a line with ``conversations`` or ``messages`` is a conversation as above.
- ``hf``: a local Hugging Face dataset folder (a hub snapshot or ``save_to_disk`` output): its
  ``.parquet``, ``.arrow`` and ``.jsonl`` data files, read with pyarrow, with the columns above.
  Nothing is downloaded: the ``datasets`` package is not needed.

Every entry becomes a :class:`Conversation`: its user turns, each with the length of the reply
that followed it in the data (None when unknown). :class:`DatasetInfo` names the data and its
sha256, for ``run.json``. Reading is strict: a file that is not the format says where.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streamslo.errors import BadInputError

__all__ = [
    "DATASET_FORMATS",
    "Conversation",
    "Dataset",
    "DatasetInfo",
    "detect_format",
    "load_dataset",
    "word_count",
]

#: ``--dataset-format`` values (``auto`` detects).
DATASET_FORMATS = ("auto", "sharegpt", "jsonl", "hf")
#: Data files of a Hugging Face dataset folder, by suffix.
_HF_SUFFIXES = (".parquet", ".arrow", ".jsonl", ".json")
#: JSON files of a dataset folder that hold metadata, not rows.
_HF_METADATA = frozenset(
    {"dataset_info.json", "state.json", "dataset_dict.json", "dataset_infos.json"}
)
_USER_ROLES = frozenset({"human", "user"})
_REPLY_ROLES = frozenset({"gpt", "assistant", "chatgpt", "bard", "bing", "model"})
_PROMPT_KEYS = ("prompt", "text", "question", "instruction")


def word_count(text: str) -> int:
    """Words in ``text`` (the length unit when no tokenizer is given)."""
    return len(text.split())


@dataclass(frozen=True)
class Conversation:
    """One entry of a dataset: the user turns, and the reply length after each."""

    turns: tuple[str, ...]
    """The user messages, in order (at least one)."""
    output_hints: tuple[int | None, ...]
    """Per turn: the length of the reply that followed in the data (tokens, or words), or None."""


@dataclass(frozen=True)
class DatasetInfo:
    """What ``run.json`` keeps about the data: enough to know it was the same data."""

    name: str
    path: str
    format: str
    sha256: str
    """Of the file; of a folder, over its data files' names and digests in order."""
    entries: int

    def as_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "path": self.path,
            "format": self.format,
            "sha256": self.sha256,
            "entries": self.entries,
        }


@dataclass(frozen=True)
class Dataset:
    """A loaded dataset."""

    info: DatasetInfo
    conversations: tuple[Conversation, ...]


# ------------------------------------------------------------------------------ entries
def _text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, list):  # OpenAI content parts
        parts = [p.get("text") for p in value if isinstance(p, Mapping)]
        return "".join(p for p in parts if isinstance(p, str)) or None
    return None


def _conversation(messages: Any, measure: Callable[[str], int]) -> Conversation | None:
    """A conversation from ShareGPT turns or OpenAI messages; None without a user turn."""
    if not isinstance(messages, list):
        return None
    turns: list[str] = []
    hints: list[int | None] = []
    for m in messages:
        if not isinstance(m, Mapping):
            continue
        role = str(m.get("from", m.get("role", ""))).lower()
        text = _text(m.get("value", m.get("content")))
        if text is None or not text.strip():
            continue
        if role in _USER_ROLES:
            turns.append(text)
            hints.append(None)
        elif role in _REPLY_ROLES and turns and hints[-1] is None:
            hints[-1] = max(1, measure(text))
    return Conversation(tuple(turns), tuple(hints)) if turns else None


def _row(row: Mapping[str, Any], measure: Callable[[str], int]) -> Conversation | None:
    """One JSON object / table row: a conversation, or a prompt with an optional length."""
    for key in ("conversations", "conversation", "messages"):
        if key in row:
            return _conversation(row[key], measure)
    for key in _PROMPT_KEYS:
        text = row.get(key)
        if isinstance(text, str) and text.strip():
            hint = row.get("output_tokens", row.get("output_len"))
            ok = isinstance(hint, int) and not isinstance(hint, bool) and hint >= 1
            return Conversation((text,), (hint if ok else None,))
    return None


def _collect(rows: Iterable[tuple[str, Any]], measure: Callable[[str], int]) -> list[Conversation]:
    """Conversations from (where, row) pairs; a row that holds none is an error naming it."""
    out: list[Conversation] = []
    for where, row in rows:
        conv = _row(row, measure) if isinstance(row, Mapping) else None
        if conv is None:
            raise BadInputError(
                f"{where}: no prompt in this entry (expected 'conversations' or 'messages' with a "
                f"user turn, or a string {' / '.join(repr(k) for k in _PROMPT_KEYS)})"
            )
        out.append(conv)
    return out


# ------------------------------------------------------------------------------ formats
def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInputError(f"{path}: cannot read the dataset ({exc})") from None


def _sharegpt(path: Path, measure: Callable[[str], int]) -> list[Conversation]:
    try:
        doc = json.loads(_read_text(path))
    except ValueError as exc:
        raise BadInputError(f"{path}: not valid JSON ({exc})") from None
    if isinstance(doc, Mapping):  # {"data": [...]} wrappers
        doc = next((v for v in doc.values() if isinstance(v, list)), None)
    if not isinstance(doc, list):
        raise BadInputError(f"{path}: a ShareGPT dataset is a JSON array of conversations")
    return _collect(((f"{path}: entry {i}", e) for i, e in enumerate(doc)), measure)


def _jsonl_rows(path: Path) -> Iterator[tuple[str, Any]]:
    for no, line in enumerate(_read_text(path).splitlines(), 1):
        if not line.strip():
            continue
        try:
            yield f"{path}:{no}", json.loads(line)
        except ValueError:
            raise BadInputError(f"{path}:{no}: not valid JSON") from None


def _arrow_rows(path: Path) -> Iterator[tuple[str, Any]]:
    import pyarrow as pa
    import pyarrow.ipc as ipc
    import pyarrow.parquet as pq

    try:
        if path.suffix == ".parquet":
            table = pq.read_table(path)
        else:  # save_to_disk writes the IPC stream format; accept the file format too
            try:
                with pa.memory_map(str(path)) as src:
                    table = ipc.open_stream(src).read_all()
            except pa.ArrowInvalid:
                with pa.memory_map(str(path)) as src:
                    table = ipc.open_file(src).read_all()
    except (OSError, pa.ArrowException) as exc:
        raise BadInputError(f"{path}: cannot read the data file ({exc})") from None
    for i, row in enumerate(table.to_pylist()):
        yield f"{path}: row {i}", row


def _hf_files(folder: Path) -> list[Path]:
    files = sorted(
        p
        for p in folder.rglob("*")
        if p.is_file()
        and p.suffix in _HF_SUFFIXES
        and p.name not in _HF_METADATA
        and not any(part.startswith(".") for part in p.relative_to(folder).parts)
    )
    if not files:
        raise BadInputError(
            f"{folder}: no data files (.parquet, .arrow, .jsonl) in the dataset folder"
        )
    return files


def _hf(folder: Path, measure: Callable[[str], int]) -> list[Conversation]:
    out: list[Conversation] = []
    for f in _hf_files(folder):
        if f.suffix in (".parquet", ".arrow"):
            out += _collect(_arrow_rows(f), measure)
        elif f.suffix == ".jsonl":
            out += _collect(_jsonl_rows(f), measure)
        else:
            out += _sharegpt(f, measure)
    return out


def detect_format(path: Path) -> str:
    """``hf`` for a folder, ``sharegpt`` for a file that starts with ``[`` (or a JSON object
    holding a list), else ``jsonl``."""
    if path.is_dir():
        return "hf"
    with open(path, "rb") as f:
        head = f.read(4096).lstrip()
    if head.startswith(b"["):
        return "sharegpt"
    if head.startswith(b"{") and path.suffix == ".json":
        return "sharegpt"
    return "jsonl"


def _sha256(path: Path) -> str:
    if path.is_dir():
        h = hashlib.sha256()
        for f in _hf_files(path):
            h.update(str(f.relative_to(path)).encode() + b"\0" + _sha256(f).encode() + b"\n")
        return h.hexdigest()
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def load_dataset(
    path: str | Path, fmt: str = "auto", measure: Callable[[str], int] = word_count
) -> Dataset:
    """Read a dataset.

    Args:
        path: a file, or a Hugging Face dataset folder.
        fmt: one of :data:`DATASET_FORMATS`.
        measure: the length of a reply (tokens with a tokenizer, else words).

    Raises:
        BadInputError: a missing path, an unknown format, a file that is not the format, or no
            entries (the message names the file, and the line or entry).
    """
    p = Path(path)
    if fmt not in DATASET_FORMATS:
        raise BadInputError(
            f"--dataset-format must be one of {', '.join(DATASET_FORMATS)}, not {fmt!r}"
        )
    if not p.exists():
        raise BadInputError(f"{p}: no such dataset file or folder")
    kind = detect_format(p) if fmt == "auto" else fmt
    if kind == "hf" and not p.is_dir():
        raise BadInputError(f"{p}: --dataset-format hf takes a dataset folder")
    if kind != "hf" and p.is_dir():
        raise BadInputError(f"{p}: a folder is a Hugging Face dataset (--dataset-format hf)")
    if kind == "sharegpt":
        convs = _sharegpt(p, measure)
    elif kind == "jsonl":
        convs = _collect(_jsonl_rows(p), measure)
    else:
        convs = _hf(p, measure)
    if not convs:
        raise BadInputError(f"{p}: the dataset holds no entries")
    name = p.name if p.is_dir() else p.stem
    info = DatasetInfo(name=name, path=str(p), format=kind, sha256=_sha256(p), entries=len(convs))
    return Dataset(info, tuple(convs))
