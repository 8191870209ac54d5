"""``summary.json`` ``top_errors`` and the instant-failure cause, over a written results
directory."""

from __future__ import annotations

from pathlib import Path

from streamslo.figures.metrics import instant_failure_cause, top_errors
from streamslo.results.layout import load_run
from streamslo.verify.testing import stream_row, write_run


def test_top_errors_ranks_groups_per_outcome_and_keeps_five(tmp_path: Path) -> None:
    rows = [stream_row("ok1")]
    for i in range(7):  # seven texts, the i-th seen i + 1 times
        rows += [
            stream_row(
                f"c{i}-{k}",
                outcome="connect_error",
                status=None,
                ttft_ms=None,
                e2e_ms=None,
                tokens=0,
                error=f"refused by host-{'abcdefg'[i]}",
            )
            for k in range(i + 1)
        ]
    # texts that differ only in their numbers are one group, shown as the most frequent
    rows += [
        stream_row(f"t{k}", outcome="truncated", error=f"connection closed after {n} tokens")
        for k, n in enumerate((3, 5, 5))
    ]
    rows += [stream_row("x1", outcome="cancelled", error="stopped by the load test")]
    rows += [stream_row("h1", outcome="client_cancelled", error="hung up after 3 tokens")]
    data = load_run(write_run(tmp_path / "run", rows))
    top = top_errors(data)
    assert list(top) == ["truncated", "connect_error"]  # the documented outcome order
    assert top["truncated"] == [
        {"error": "connection closed after 5 tokens", "count": 3, "cause": "cut", "texts": 2}
    ]
    assert [e["error"] for e in top["connect_error"]] == [f"refused by host-{c}" for c in "gfedc"]
    assert [e["count"] for e in top["connect_error"]] == [7, 6, 5, 4, 3]
    assert "cancelled" not in top and "ok" not in top and "client_cancelled" not in top
    assert top_errors(data, limit=1)["connect_error"] == [
        {"error": "refused by host-g", "count": 7, "cause": "no_connection", "texts": 1}
    ]


def test_the_instant_failure_cause_needs_nearly_every_request_to_fail_before_a_byte(
    tmp_path: Path,
) -> None:
    refused = [
        stream_row(
            f"c{k}",
            outcome="connect_error",
            status=None,
            ttft_ms=None,
            e2e_ms=None,
            tokens=0,
            error="ConnectionRefusedError: [Errno 111] Connection refused",
        )
        for k in range(95)
    ]
    ok = [stream_row(f"o{k}") for k in range(5)]
    cause = instant_failure_cause(load_run(write_run(tmp_path / "a", refused + ok)))
    assert cause == (
        "95 of 100 requests failed before any byte: ConnectionRefusedError: [Errno 111] "
        "Connection refused — the load generator was busy failing and retrying, not slow"
    )
    more_ok = [stream_row(f"p{k}") for k in range(20)]
    assert (
        instant_failure_cause(load_run(write_run(tmp_path / "b", refused + ok + more_ok))) is None
    )
