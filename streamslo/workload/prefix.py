"""Prompts that share prefixes, so a server's prefix cache sees the reuse production sees.

Two sources (``docs/workloads.md``):

- **prefix groups** (``--prefix-groups N --prefix-tokens DIST``): N shared prefixes (a system
  prompt, a document), each drawn once from the seed; every request picks a group with equal
  probability and sends that group's prefix, then its own prompt;
- **a trace's hash ids** (Mooncake): each id names one block of ``--trace-block-tokens`` prompt
  units; equal ids give equal text, so two requests that share their first k ids share their
  first k blocks of text. A request's last block may be partial (its input length is not a
  whole number of blocks): that block's text is the first part of the id's full text, so a
  partial block still matches the full one as far as it goes.

Text is built in the run's unit (words, or tokens of ``--tokenizer``) from a seed and the id
alone: the same id gives the same text in every process and every run with that seed. Built
texts are kept (up to :data:`CACHE_BLOCKS`), so a block is built once. Pure; no I/O.
"""

from __future__ import annotations

import random
from collections import OrderedDict

from streamslo.options.lengths import LengthDist
from streamslo.workload.prompts import TextMeasure
from streamslo.workload.trace import TraceRequest

__all__ = ["CACHE_BLOCKS", "PrefixGroups", "TracePrompts"]

#: Block texts kept in memory (least recently used go first; rebuilt identically if needed).
CACHE_BLOCKS = 4096


def _rng(kind: str, *keys: int) -> random.Random:
    """A generator seeded by ``kind`` and ``keys`` alone, the same in every process (a text
    seed goes through SHA-512; ``hash()`` of a string would differ per process)."""
    return random.Random(":".join([kind, *map(str, keys)]))


class TracePrompts:
    """The prompt of each trace request: its hash-id blocks, then unique text to its length.

    Args:
        measure: the unit (words or tokenizer tokens).
        seed: the run's seed.
        block_tokens: units per hash id (``--trace-block-tokens``).
    """

    def __init__(self, measure: TextMeasure, seed: int, block_tokens: int) -> None:
        if block_tokens < 1:
            raise ValueError(f"--trace-block-tokens must be at least 1, not {block_tokens}")
        self.measure = measure
        self.seed = seed
        self.block_tokens = block_tokens
        self._blocks: OrderedDict[int, str] = OrderedDict()
        self.built = 0
        """Block texts built so far (a block met again comes from memory)."""

    def block(self, hash_id: int) -> str:
        """The full text of block ``hash_id`` (``block_tokens`` units)."""
        text = self._blocks.get(hash_id)
        if text is not None:
            self._blocks.move_to_end(hash_id)
            return text
        rng = _rng("block", self.seed, hash_id)
        text = self.measure.make(self.block_tokens, rng)
        self.built += 1
        self._blocks[hash_id] = text
        if len(self._blocks) > CACHE_BLOCKS:
            self._blocks.popitem(last=False)
        return text

    def _partial(self, hash_id: int, n: int) -> str:
        """The first ``n`` units of block ``hash_id`` (words: exact; tokens: re-made, as the
        same seeded draw gives the same words first)."""
        if n >= self.block_tokens:
            return self.block(hash_id)
        if self.measure.unit == "words":
            return " ".join(self.block(hash_id).split()[:n])
        return self.measure.make(n, _rng("block", self.seed, hash_id))

    def prompt(self, req: TraceRequest) -> str:
        """The text of ``req``'s prompt, ``req.input_tokens`` units long."""
        n, b = req.input_tokens, self.block_tokens
        if not req.hash_ids:
            rng = _rng("unique", self.seed, req.index)
            return self.measure.make(n, rng)
        parts: list[str] = []
        left = n
        for hid in req.hash_ids:
            if left <= 0:
                break
            parts.append(self._partial(hid, min(b, left)))
            left -= b
        if left > 0:  # more input than the blocks cover: unique text for the rest
            rng = _rng("unique", self.seed, req.index)
            parts.append(self.measure.make(left, rng))
        return " ".join(parts)


class PrefixGroups:
    """``--prefix-groups N``: N shared prefixes, one drawn per request (equal shares).

    Args:
        groups: how many prefixes (at least 1).
        length: each prefix's length distribution (drawn once per group).
        measure: the unit.
        seed: the run's seed.
    """

    def __init__(self, groups: int, length: LengthDist, measure: TextMeasure, seed: int) -> None:
        if groups < 1:
            raise ValueError(f"--prefix-groups must be at least 1, not {groups}")
        self.texts = [
            measure.make(length.sample(_rng("group-length", seed, g)), _rng("group", seed, g))
            for g in range(groups)
        ]
        self._rng = _rng("group-pick", seed)

    def pick(self) -> tuple[int, str]:
        """The next request's group and its prefix."""
        g = self._rng.randrange(len(self.texts))
        return g, self.texts[g]
