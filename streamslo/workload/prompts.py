"""How long a text is, and synthetic text of a given length: in words, or in tokens of a local
tokenizer (``--tokenizer PATH``: a ``tokenizer.json`` file or a Hugging Face tokenizer folder
holding one; read with the ``tokenizers`` package, nothing downloaded).

Without a tokenizer a length is a count of words, which is close to a count of tokens for the
bundled server (a word tokenizer) and about 0.75x the tokens of a BPE model on English text.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from streamslo.errors import BadInputError

__all__ = ["WORDS", "TextMeasure"]

#: The words synthetic prompts are made of (seeded choices).
WORDS = (
    "explain",
    "quantum",
    "entanglement",
    "stream",
    "token",
    "latency",
    "server",
    "client",
    "batch",
    "queue",
    "socket",
    "buffer",
    "kernel",
    "worker",
    "timeout",
    "event",
    "loop",
    "model",
    "layer",
    "cache",
    "attention",
    "prompt",
    "answer",
    "question",
    "history",
    "science",
    "river",
    "mountain",
    "engine",
    "signal",
    "vector",
    "matrix",
    "gradient",
)


def _load_tokenizer(path: str | Path) -> Any:
    p = Path(path)
    file = p / "tokenizer.json" if p.is_dir() else p
    if not file.is_file():
        raise BadInputError(f"{p}: no tokenizer.json (give the file, or a folder that holds it)")
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise BadInputError(
            "--tokenizer needs the 'tokenizers' package: pip install 'streamslo[workloads]'"
        ) from None
    try:
        return Tokenizer.from_file(str(file))
    except Exception as exc:  # the Rust side raises plain Exception for a bad file
        raise BadInputError(f"{file}: not a tokenizers tokenizer.json ({exc})") from None


class TextMeasure:
    """Counts and makes text in one unit: ``words``, or ``tokens`` of a tokenizer.

    Args:
        tokenizer: a ``tokenizer.json`` path or a folder holding it; None counts words.

    Raises:
        BadInputError: the tokenizer cannot be read (or the package is missing).
    """

    def __init__(self, tokenizer: str | Path | None = None) -> None:
        self._tok = None if tokenizer is None else _load_tokenizer(tokenizer)
        self.unit = "words" if self._tok is None else "tokens"
        """``words`` or ``tokens``."""

    def count(self, text: str) -> int:
        """The length of ``text`` in this unit."""
        if self._tok is None:
            return len(text.split())
        return len(self._tok.encode(text, add_special_tokens=False).ids)

    def make(self, n: int, rng: random.Random) -> str:
        """Seeded synthetic text of ``n`` units (words; tokens: the first ``n`` tokens of random
        words, decoded, so the server's count is ``n`` give or take a merge at the cut)."""
        if self._tok is None:
            return " ".join(rng.choice(WORDS) for _ in range(max(1, n)))
        words = [rng.choice(WORDS) for _ in range(max(1, n))]
        ids: list[int] = self._tok.encode(" ".join(words), add_special_tokens=False).ids
        while len(ids) < n:  # a tokenizer that merges words: add more
            words += [rng.choice(WORDS) for _ in range(n - len(ids))]
            ids = self._tok.encode(" ".join(words), add_special_tokens=False).ids
        text: str = self._tok.decode(ids[:n])
        return text
