"""What ``bench/bench_http_reader.py`` found, as facts that do not depend on the machine: ours
and h11 read the same body from the same reads, and ours stops every hostile input at a cap
(h11 leaves interim heads and long chunk sizes open). Its timings are in bench/RESULTS.md."""

from __future__ import annotations

from typing import Any

import pytest

from tests.bench.conftest import bench_module


@pytest.fixture(scope="module")
def bench() -> Any:
    return bench_module("bench_http_reader")


def test_both_read_the_same_body(bench: Any) -> None:
    reads = bench.realistic_reads()
    ours, h11 = bench.run_ours(reads), bench.run_h11(reads)
    assert ours.result == h11.result == "complete"
    assert ours.body_bytes == h11.body_bytes > 2000 * 100
    one_byte = bench.byte_reads(b"".join(reads[:40]))  # the head and some chunks, a byte a read
    assert bench.run_ours(one_byte).body_bytes == bench.run_h11(one_byte).body_bytes


def test_ours_stops_every_hostile_input_at_a_cap(bench: Any) -> None:
    cases = bench.hostile_cases(1 << 20)
    for label, reads in cases.items():
        if not label.startswith(("oversized", "huge", "endless", "interim")):
            continue
        outcome = bench.run_ours(reads)
        assert outcome.result.startswith("HTTPProtocolError"), (label, outcome)
        assert outcome.consumed <= 2 * 65536 + 1024, (label, outcome)
        assert bench.peak_memory(bench.run_ours, reads) < 1 << 20, label
    # what h11 leaves open: an endless run of interim heads, a chunk size past 16 hex digits
    assert bench.run_h11(cases["interim flood (103 heads forever)"]).result == "incomplete"
    assert bench.run_h11(cases["chunk size 17 hex digits"]).result == "incomplete"
    assert bench.run_ours(cases["chunk size 17 hex digits"]).result.startswith("HTTPProtocolError")
