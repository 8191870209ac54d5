"""Shared prefixes: equal hash ids give equal text, built once and reproducibly."""

from __future__ import annotations

from streamslo.options.lengths import LengthDist
from streamslo.workload.prefix import PrefixGroups, TracePrompts
from streamslo.workload.prompts import TextMeasure
from streamslo.workload.trace import TraceRequest


def test_equal_hash_ids_give_equal_text_and_lengths_hold():
    tp = TracePrompts(TextMeasure(), seed=7, block_tokens=8)
    a = tp.prompt(TraceRequest(0, 0.0, 20, 1, (1, 2, 3)))
    b = tp.prompt(TraceRequest(1, 0.0, 16, 1, (1, 2)))
    c = tp.prompt(TraceRequest(2, 0.0, 16, 1, (1, 9)))
    assert len(a.split()) == 20 and len(b.split()) == 16
    assert a.startswith(b + " ")  # the same first two blocks
    assert c.split()[:8] == b.split()[:8] and c.split()[8:] != b.split()[8:]
    # A partial last block is the start of that block's full text.
    d = tp.prompt(TraceRequest(3, 0.0, 19, 1, (1, 2, 3)))
    assert a.startswith(d)
    # Block 1 was built once, then reused.
    assert tp.built == 4  # blocks 1, 2, 3 and 9


def test_prompts_are_reproducible_and_seeded():
    req = TraceRequest(5, 0.0, 30, 1, (4, 5))
    assert TracePrompts(TextMeasure(), 1, 16).prompt(req) == TracePrompts(
        TextMeasure(), 1, 16
    ).prompt(req)
    assert TracePrompts(TextMeasure(), 1, 16).prompt(req) != TracePrompts(
        TextMeasure(), 2, 16
    ).prompt(req)
    # Without hash ids every request is unique text of its length.
    tp = TracePrompts(TextMeasure(), 1, 16)
    x, y = tp.prompt(TraceRequest(0, 0.0, 12, 1)), tp.prompt(TraceRequest(1, 0.0, 12, 1))
    assert x != y and len(x.split()) == len(y.split()) == 12


def test_prefix_groups_share_text_with_equal_shares():
    groups = PrefixGroups(4, LengthDist.fixed(50), TextMeasure(), seed=3)
    assert len(set(groups.texts)) == 4 and all(len(t.split()) == 50 for t in groups.texts)
    picks = [groups.pick()[0] for _ in range(4000)]
    assert all(850 <= picks.count(g) <= 1150 for g in range(4))
    again = PrefixGroups(4, LengthDist.fixed(50), TextMeasure(), seed=3)
    assert again.texts == groups.texts
