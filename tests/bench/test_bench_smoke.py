"""Each benchmark script runs end to end with tiny parameters, writes its JSON with real figures,
and renders its section of ``bench/RESULTS.md`` (``bench/run_all.py --render-only``).

The runs that start servers and Locust (stream users, accuracy, burst, memory, scale-out: about
100 s together) run when ``STREAMSLO_BENCH_SMOKE=1`` (``tox -e bench``, the nightly workflow),
to keep the default suite short and independent of the machine's load, as does the 250-stream
burst test (``test_burst.py``). Every committed result renders always.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.bench.conftest import BENCH, bench_module, bench_run, run_bench

pytestmark = pytest.mark.load

RESULTS = BENCH / "results"


@pytest.mark.parametrize(
    "name",
    [
        "stream_users",
        "accuracy",
        "burst",
        "memory",
        "scaleout",
        "scaleout_shared",
        "relay",
        "replay",
        "dialects",
        "flood",
        "history",
    ],
)
def test_committed_results_render(name: str) -> None:
    """The JSON of bench/results (what RESULTS.md shows) still renders with today's code."""
    data = json.loads((RESULTS / f"{name}.json").read_text(encoding="utf-8"))
    module = {"scaleout_shared": "scaleout"}.get(name, name)  # (a second layout of one bench)
    assert data.get("command", f"python bench/bench_{module}.py").startswith(
        f"python bench/bench_{module}.py"
    )
    _rendered(f"bench_{module}", data)


def _rendered(module: str, data: dict[str, Any]) -> str:
    text: str = bench_module(module).render(data)
    assert "| ---" in text, text  # a Markdown table
    return text


@bench_run
def test_stream_users(tmp_path: Path) -> None:
    data = run_bench(
        "bench_stream_users",
        tmp_path / "su.json",
        "--levels",
        "6",
        "--seconds",
        "4",
        "--warmup",
        "0",
        "--clients",
        "streamslo per-stream,asyncio raw",
    )
    cells = {c["client"]: c for c in data["cells"]}
    assert set(cells) == {"streamslo per-stream", "asyncio raw"}
    for c in cells.values():
        assert c["tokens_received"] > 0 and c["lateness_p99_ms"] is not None, c
    assert cells["streamslo per-stream"]["unmatched"] == 0
    assert "streamslo per-stream" in _rendered("bench_stream_users", data)


@bench_run
def test_stream_users_baseline(tmp_path: Path) -> None:
    """--baseline REV: the streamslo row again on REV's code, in the same run."""
    data = run_bench(
        "bench_stream_users",
        tmp_path / "su.json",
        "--levels",
        "6",
        "--seconds",
        "4",
        "--warmup",
        "0",
        "--clients",
        "streamslo per-stream",
        "--baseline",
        "HEAD",
    )
    cells = {c["client"]: c for c in data["cells"]}
    assert set(cells) == {"streamslo per-stream", "streamslo per-stream @HEAD"}
    for c in cells.values():
        assert c["tokens_received"] > 0 and c["unmatched"] == 0, c


@bench_run
def test_flood(tmp_path: Path) -> None:
    """The flood bench: every event of each response counted, streamslo against the raw
    reader, and its section renders."""
    data = run_bench(
        "bench_flood",
        tmp_path / "fl.json",
        "--streams",
        "2",
        "--seconds",
        "3",
        "--warmup",
        "0.5",
        "--clients",
        "streamslo SSE,asyncio raw",
    )
    cells = {c["client"]: c for c in data["cells"]}
    assert set(cells) == {"streamslo SSE", "asyncio raw"}
    for c in cells.values():
        assert c["events"] >= 1000 and c["events_per_s"] > 0, c
    assert "streamslo SSE" in _rendered("bench_flood", data)


def test_token_cpu(tmp_path: Path) -> None:
    """The Sans-I/O CPU bench: old and new side by side (timings only: no valgrind here)."""
    data = run_bench(
        "bench_token_cpu",
        tmp_path / "tc.json",
        "--baseline",
        "HEAD",
        "--streams",
        "3",
        "--repeats",
        "1",
        "--protocols",
        "sse,ws",
        "--shapes",
        "emitter,tgi",
        "--no-valgrind",
    )
    assert {(r["protocol"], r["shape"], r["code"]) for r in data["rows"]} == {
        (proto, shape, code)
        for proto in ("sse", "ws")
        for shape in ("emitter", "tgi")
        for code in ("HEAD", "current")
    }
    assert all(r["us_per_token_median"] > 0 for r in data["rows"])


@bench_run
def test_accuracy(tmp_path: Path) -> None:
    data = run_bench(
        "bench_accuracy",
        tmp_path / "acc.json",
        "--levels",
        "4",
        "--protocols",
        "sse,ws",
        "--seconds",
        "4",
        "--warmup",
        "0",
        "--period-ms",
        "10",
        "--ttft-ms",
        "30",
        "--nice",
        "0",
    )
    for c in data["cells"]:
        assert c["streams"] > 0 and c["itl_vs_writes"]["n"] > 0, c
        # The error is the generator's, not the schedule's: a few ms at most on an idle-ish core.
        assert c["itl_vs_writes"]["p50"] < 5.0, c
    _rendered("bench_accuracy", data)


@bench_run
def test_burst(tmp_path: Path) -> None:
    data = run_bench(
        "bench_burst",
        tmp_path / "burst.json",
        "--streams",
        "6",
        "--tokens",
        "6",
        "--protocols",
        "sse",
        "--seconds",
        "6",
        "--overhead",
    )
    pair = data["pairs"][0]
    assert pair["independent"]["ok"] == 6 and pair["suite"]["ok"] == 6, pair
    ov = data["overhead"]
    assert ov["raw"]["tokens_per_s"] > 0 and ov["overhead"] > 0
    assert "Serving overhead" in _rendered("bench_burst", data)


@bench_run
def test_dialects(tmp_path: Path) -> None:
    data = run_bench(
        "bench_dialects",
        tmp_path / "dialects.json",
        "--duration",
        "4",
        "--rounds",
        "1",
        "--users",
        "4",
        "--max-tokens",
        "8",
        "--warmup-run",
        "1",
        "--warmup",
        "0.5",
        "--reasoning-duration",
        "4",
        "--reasoning-users",
        "2,4",
    )
    assert set(data["reasoning"]) == {
        f"{api} @ {n}"
        for api in ("openai-chat", "openai-responses", "anthropic-messages")
        for n in (2, 4)
    }
    for rows in (data["rows"], data["reasoning"]):
        for api, row in rows.items():
            assert row["ok_rate"] == 1.0 and row["tokens_equal_usage"] == row["ok"], (api, row)
    assert set(data["rows"]) == {
        "openai-chat",
        "openai-completions",
        "openai-responses",
        "anthropic-messages",
    }
    assert "ttfo p50 - TTFT p50" in _rendered("bench_dialects", data)


@bench_run
def test_memory(tmp_path: Path) -> None:
    data = run_bench(
        "bench_memory",
        tmp_path / "mem.json",
        "--levels",
        "2,8",
        "--server-levels",
        "1,4",
        "--protocols",
        "sse",
        "--seconds",
        "7",
        "--period-ms",
        "50",
    )
    assert [c["streams_open"] for c in data["generator"]] == [2, 8]
    assert [c["streams_open"] for c in data["server"]] == [1, 4]
    assert all(c["rss_bytes"] for c in data["generator"] + data["server"])
    assert "per open stream" in _rendered("bench_memory", data)


@bench_run
@pytest.mark.parametrize("layout", ["split", "shared"])
def test_scaleout(tmp_path: Path, layout: str) -> None:
    data = run_bench(
        "bench_scaleout",
        tmp_path / "so.json",
        "--layout",
        layout,
        "--levels",
        "6",
        "--processes",
        "1,2",
        "--seconds",
        "4",
        "--warmup",
        "0",
    )
    for c in data["cells"]:
        assert "error" not in c and c["layout"] == layout, c
        assert c["records"] > 0 and c["lateness_p99_ms"] is not None, c
        # --processes 1: one plain Locust process; 2: a master and two workers.
        assert c["workers_seen"] == (0 if c["processes"] == 1 else 2), c
        assert c["master_cpu_s"] > 0
        assert (c["master_ms_per_record"] is not None) == (c["processes"] == 2), c
        if layout == "shared":  # two emitters on one port: each stream tied to its writer
            assert c["unmatched"] == 0 and c["streams_measured"] > 0, c
    assert data["relay_ingest_us"] > 0
    text = _rendered("bench_scaleout", data)
    assert ("whole system on P cores" in text) == (layout == "shared")


def test_capacity_is_the_last_level_held_before_the_first_failure() -> None:
    bench_scaleout = bench_module("bench_scaleout")

    def cell(p: int, users: int, p99: float | None) -> dict[str, Any]:
        return {"processes": p, "users": users, "lateness_p99_ms": p99}

    cells = [
        cell(1, 500, 0.1),
        cell(1, 400, 0.1),
        cell(1, 600, 20.0),
        cell(1, 700, 0.1),  # held again past a failure: not counted
        cell(2, 500, 30.0),
        cell(3, 100, 0.1),
        cell(3, 200, None),  # measured nothing: a failure
    ]
    assert bench_scaleout.capacities(cells) == {1: 500, 2: None, 3: 100}


def test_relay(tmp_path: Path) -> None:
    data = run_bench(
        "bench_relay",
        tmp_path / "relay.json",
        "--records",
        "40",
        "--batch",
        "20",
        "--repeats",
        "1",
        "--skip-locust",
    )
    assert data["encodings"][0]["encoding"].startswith("csv rows")
    _rendered("bench_relay", data)


def test_run_all_rewrites_only_marked_sections(tmp_path: Path) -> None:
    run_all = bench_module("run_all")
    results = tmp_path / "results"
    results.mkdir()
    run_bench(
        "bench_relay",
        results / "relay.json",
        "--records",
        "20",
        "--batch",
        "10",
        "--repeats",
        "1",
        "--skip-locust",
    )
    md = tmp_path / "RESULTS.md"
    md.write_text(
        "# R\n\nhand text\n\n<!-- bench:relay -->\nold table\n<!-- /bench:relay -->\n\nafter\n"
    )
    assert run_all.main(["--render-only", "--results", str(results), "--md", str(md)]) == 0
    text = md.read_text()
    assert "old table" not in text and "hand text" in text and text.rstrip().endswith("after")
    assert text.count("<!-- bench:relay -->") == 1 and "csv rows + gap columns" in text
    # A bench with JSON but no markers gets a new section at the end; one without JSON none.
    (results / "memory.json").write_text('{"command": "x", "generator": [], "server": []}')
    run_all.main(["--render-only", "--results", str(results), "--md", str(md)])
    assert (
        "<!-- bench:memory -->" in md.read_text() and "<!-- bench:burst -->" not in md.read_text()
    )
    assert (BENCH / "run_all.py").exists()


@bench_run
def test_history(tmp_path: Path) -> None:
    data = run_bench(
        "bench_history",
        tmp_path / "history.json",
        "--runs",
        "20",
        "--histories",
        "2",
        "--workers",
        "1",
    )
    assert data["stores"][0]["store"].startswith("SQLite") and data["stores"][0]["trend_ms_p50"] > 0
    v = data["verdicts"]
    assert v["judged_nights"] == 2 * 7 and v["planted"]["planted_night_flagged"] == 2
    assert "| B. noise only" in _rendered("bench_history", data)
