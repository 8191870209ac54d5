"""A small local tokenizer (``tokenizer.json``) made here: no download, as a user's own file."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Hugging Face tokenizer folder whose BPE splits words into several tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from streamslo.workload.prompts import WORDS

    # GPT-2's kind: byte-level BPE, with its decoder (decoded text re-encodes the same).
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    # A vocabulary too small to hold every word whole: most words become several tokens.
    trainer = trainers.BpeTrainer(
        vocab_size=290, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator([" ".join(WORDS)] * 20, trainer)
    folder = tmp_path_factory.mktemp("tok")
    tok.save(str(folder / "tokenizer.json"))
    return folder
