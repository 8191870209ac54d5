"""The bundled server's prefix cache: chained block hashes, leading blocks only, LRU."""

from __future__ import annotations

from streamslo.server.prefix_cache import PrefixCache


def test_leading_blocks_hit_and_counts_add_up():
    c = PrefixCache(block=4, capacity=100)
    doc = list(range(100, 112))  # three blocks
    assert c.lookup([*doc, 1, 2]) == 0  # first sight: a miss, its full blocks remembered
    assert c.lookup([*doc, 7, 8, 9]) == 12  # the same three blocks lead: 12 tokens cached
    assert c.lookup([*doc[:8], 5, 5, 5, 5]) == 8  # two leading blocks, then a new one
    # A block matches only after the same blocks before it (chained keys).
    assert c.lookup([0, 0, 0, 0, *doc[4:8]]) == 0
    assert (c.queries, c.hits) == (14 + 15 + 12 + 8, 20)


def test_a_whole_cached_prompt_still_computes_its_last_block_and_lru_evicts():
    c = PrefixCache(block=2, capacity=2)
    assert c.lookup([1, 2, 3, 4]) == 0
    assert c.lookup([1, 2, 3, 4]) == 2  # the last block is computed anyway
    c.lookup([9, 9, 8, 8])  # two new blocks push the old ones out
    assert c.lookup([1, 2, 3, 4, 5]) == 0
    assert PrefixCache(block=2, capacity=0).lookup([1, 2, 1, 2]) == 0
