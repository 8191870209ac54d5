"""The peer row's bookkeeping (bench/_vllm_peer.py): vLLM's per-request timings become receive
epochs, and each request gets its emitter stream's write epochs, paired in start order."""

from __future__ import annotations

import pytest

from tests.bench.conftest import bench_module


def test_timings_become_receive_epochs() -> None:
    peer = bench_module("_vllm_peer")
    result = {
        "start_times": [10.0, 10.5],
        "ttfts": [0.05, 0.0],
        "itls": [[0.02, 0.03], []],
        "errors": ["", "Never received a valid chunk"],
    }
    rows = peer.to_dump(result, offset=1000.0)
    assert rows[0]["t0"] == 1010.0 and rows[0]["done"] is True
    assert rows[0]["recv"] == pytest.approx([1010.05, 1010.07, 1010.10])
    assert rows[1] == {"t0": 1010.5, "done": False, "recv": []}


def test_requests_are_paired_with_emitter_streams_in_start_order() -> None:
    peer = bench_module("_vllm_peer")
    emitted = [
        {"t_req": 99.0, "w": [99.1]},  # vLLM's single test prompt, before the measured ones
        {"t_req": 100.003, "w": [100.1, 100.2, 100.3]},
        {"t_req": 100.002, "w": [100.12, 100.22]},  # sent second, arrived first: a cut stream
        {"t_req": 100.5, "w": []},  # never written to
    ]
    rows = [
        {"t0": 100.0, "done": True, "recv": [100.13, 100.23, 100.33]},
        {"t0": 100.001, "done": True, "recv": [100.11, 100.21, 100.31]},
        {"t0": 101.0, "done": True, "recv": [101.1]},
    ]
    assert peer.join_emitter(rows, emitted) == 1
    # paired by order: the first request with the first stream to arrive after it was sent
    assert rows[0]["emit"] == [100.12, 100.22] and rows[0]["done"] is False
    assert rows[0]["recv"] == [100.13, 100.23]
    assert rows[1]["emit"] == [100.1, 100.2, 100.3] and rows[1]["done"] is True
    assert rows[2]["emit"] == [] and rows[2]["done"] is False
