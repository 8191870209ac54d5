"""The bundled server's prefix cache: which leading blocks of a prompt it has seen before.

As vLLM's automatic prefix caching: a prompt's token ids are cut into blocks of ``block``
ids; each full block is keyed by a hash of its ids chained with the key of the block before
it, so a block matches only when everything before it matched too. A request's cached tokens
are its leading blocks found in the cache (times the block size); then every full block of
the prompt is put in (least recently used go first past ``capacity``). The model's own
compute is unchanged (the tiny model prefills the whole prompt in well under a millisecond);
what a hit saves is the simulated prefill cost of the tokens it covers
(``ServerConfig.prefill_us_per_token``). Loop thread only; no I/O.
"""

from __future__ import annotations

from collections import OrderedDict

__all__ = ["PrefixCache"]


class PrefixCache:
    """Block-hash prefix cache with LRU eviction.

    Args:
        block: token ids per block.
        capacity: blocks kept (0: nothing is ever cached).
    """

    def __init__(self, block: int, capacity: int) -> None:
        self.block = block
        self.capacity = capacity
        self._blocks: OrderedDict[int, None] = OrderedDict()
        self.queries = 0
        """Prompt tokens looked up (vLLM's ``prefix_cache_queries``)."""
        self.hits = 0
        """Prompt tokens found cached (vLLM's ``prefix_cache_hits``)."""

    def lookup(self, ids: list[int]) -> int:
        """The number of ``ids`` served from the cache; then remember every full block."""
        b = self.block
        keys: list[int] = []
        parent = 0
        for i in range(0, len(ids) - len(ids) % b, b):
            parent = hash((parent, tuple(ids[i : i + b])))
            keys.append(parent)
        cached = 0
        for key in keys:
            if key not in self._blocks:
                break
            cached += b
        if cached and cached >= len(ids):
            cached -= b  # the last block is computed anyway: its logits give the first token
        for key in keys:
            if key in self._blocks:
                self._blocks.move_to_end(key)
            elif self.capacity > 0:
                self._blocks[key] = None
                if len(self._blocks) > self.capacity:
                    self._blocks.popitem(last=False)
        self.queries += len(ids)
        self.hits += cached
        return cached
