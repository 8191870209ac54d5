"""Length distributions: the compact syntax, seeded draws, the bounds they keep."""

from __future__ import annotations

import random
import statistics

import pytest

from streamslo.options.lengths import LengthDist, LengthSpec


@pytest.mark.parametrize(
    ("text", "kind", "lo", "hi"),
    [
        ("256", "fixed", 256, 256),
        (64, "fixed", 64, 64),
        ("uniform:10,20", "uniform", 10, 20),
        ("normal:100,10", "normal", 1, None),
        ("normal:100,10,80,120", "normal", 80, 120),
    ],
)
def test_the_forms_parse_and_print_back(text, kind, lo, hi):
    d = LengthDist.parse(text)
    assert (d.kind, d.minimum, d.maximum) == (kind, lo, hi)
    assert LengthDist.parse(d.spec()) == d


@pytest.mark.parametrize(
    "bad",
    [
        "0",
        "-3",
        "uniform:5",
        "uniform:9,3",
        "normal:1",
        "gamma:1,2",
        "1.5",
        "abc",
        True,
        "normal:10,-1",
    ],
)
def test_bad_forms_say_what_is_accepted(bad):
    with pytest.raises(ValueError, match="length"):
        LengthDist.parse(bad)


def test_draws_are_seeded_and_stay_in_bounds():
    d = LengthDist.parse("normal:100,30,60,130")
    a = [d.sample(random.Random(7)) for _ in range(3)]
    assert a == [d.sample(random.Random(7)) for _ in range(3)]
    rng = random.Random(1)
    xs = [d.sample(rng) for _ in range(5000)]
    assert min(xs) == 60 and max(xs) == 130  # clipped at both ends (30 stdev reaches both)
    u = LengthDist.parse("uniform:3,5")
    rng = random.Random(2)
    assert {u.sample(rng) for _ in range(200)} == {3, 4, 5}
    n = LengthDist.parse("normal:200,10")
    rng = random.Random(3)
    ys = [n.sample(rng) for _ in range(4000)]
    assert abs(statistics.mean(ys) - 200) < 1.0 and abs(statistics.stdev(ys) - 10) < 0.5


def test_the_option_type_reads_text_and_toml_values():
    t = LengthSpec(optional=True)
    assert t.parse("") is None and t.parse(None) is None
    assert t.parse(12) == LengthDist.fixed(12)
    assert t.wire(LengthDist.parse("uniform:1,2")) == "uniform:1,2" and t.wire(None) == ""
