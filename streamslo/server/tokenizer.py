"""A small deterministic word tokenizer: no downloads, the vocabulary is made from a seed.

Ids: ``0`` is ``<eos>``, ``1`` is ``<unk>``, then the 95 printable ASCII characters (the
fallback for words not in the vocabulary), then seeded pseudo-words. Every non-special token
decodes to non-empty text, so every content chunk carries text (a chunk without text is no token). Words decode with a
leading space, characters without, so the output reads as text.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

__all__ = ["EOS_ID", "UNK_ID", "Tokenizer"]

EOS_ID = 0
UNK_ID = 1
_SYLLABLES = [c + v for c in "bdfghklmnprstvz" for v in "aeiou"]


class Tokenizer:
    """Word-level tokenizer with a printable-character fallback.

    Attributes:
        vocab: id -> token text (``vocab[i]`` is what id ``i`` decodes to).
    """

    def __init__(self, vocab: list[str]) -> None:
        self.vocab = vocab
        # Words are stored with their leading space; encode looks them up without it.
        self._word_ids = {t[1:]: i for i, t in enumerate(vocab) if t.startswith(" ")}
        self._char_ids = {t: i for i, t in enumerate(vocab) if len(t) == 1}

    @classmethod
    def from_seed(cls, seed: int, size: int = 1024) -> Tokenizer:
        """Build a vocabulary of ``size`` ids deterministically from ``seed``."""
        rng = random.Random(seed)
        vocab = ["<eos>", "<unk>"] + [chr(c) for c in range(32, 127)]
        seen: set[str] = set()
        while len(vocab) < size:
            word = "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(1, 3)))
            if word not in seen:
                seen.add(word)
                vocab.append(" " + word)
        return cls(vocab)

    @property
    def size(self) -> int:
        """Number of ids."""
        return len(self.vocab)

    def encode(self, text: str) -> list[int]:
        """Text -> ids: known words as one id, other words character by character."""
        ids: list[int] = []
        for word in text.split():
            wid = self._word_ids.get(word.lower())
            if wid is not None:
                ids.append(wid)
                continue
            ids.append(self._char_ids[" "])
            ids.extend(self._char_ids.get(ch, UNK_ID) for ch in word)
        return ids

    def decode_one(self, token_id: int) -> str:
        """The text of one id (``""`` for ``<eos>``)."""
        return "" if token_id == EOS_ID else self.vocab[token_id]

    def save(self, path: Path, padding_entries: int = 0) -> None:
        """Write the vocabulary as JSON. ``padding_entries`` adds a merges-like table, so that
        loading the file costs what a real tokenizer file costs (the per-request-setup fault)."""
        merges = {f"m{i:06d}": i for i in range(padding_entries)}
        path.write_text(json.dumps({"vocab": self.vocab, "merges": merges}))

    @classmethod
    def load(cls, path: Path) -> Tokenizer:
        """Read a file written by :meth:`save`, inverting the merges table like a real loader."""
        data = json.loads(path.read_text())
        _inverse = {v: k for k, v in data["merges"].items()}  # the work real loaders do
        del _inverse
        return cls(list(data["vocab"]))
