"""Hand-built results directories (docs/results.md) for the report tests.

``write_run`` writes run.json, streams.csv and gaps.parquet from plain Python/numpy values, so
the tests can compute the expected numbers from the same arrays without any streamslo code (only
the column names come from the schema).
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from streamslo.results.columns import COLUMNS as _ALL

#: ``streams.csv``'s columns as results schema 2 wrote them (results/columns.py), less the ones
#: added since, which a reader of an older directory takes as empty.
COLUMNS = tuple(c.name for c in _ALL if c.schema <= 2)
START = 1_700_000_000.0


@dataclass
class Synth:
    """What was written, for computing expectations independently."""

    path: Path
    rows: list[dict[str, Any]]
    gaps: pd.DataFrame


def write_run(
    path: Path,
    *,
    n: int = 120,
    tokens: int = 20,
    gap_ms: float = 20.0,
    stall_every: int = 0,
    stall_ms: float = 600.0,
    truncate_every: int = 0,
    http5xx: int = 0,
    seed: int = 0,
    duration: float = 30.0,
    run: dict[str, Any] | None = None,
    server: dict[str, Any] | None = None,
) -> Synth:
    """Write a synthetic run of ``n`` streams (SSE and WS alternating)."""
    rng = np.random.default_rng(seed)
    path.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    gaps: list[tuple[str, int, float, float, bool]] = []
    for i in range(n):
        sid = f"s{i:05d}"
        proto = "sse" if i % 2 == 0 else "ws"
        started = START + (duration - 8) * i / n
        if i < http5xx:
            rows.append(
                dict(
                    stream_id=sid,
                    protocol=proto,
                    user_class="U",
                    started_at=started,
                    status=500,
                    outcome="http_5xx",
                    connect_ms=1.0,
                    error="500",
                )
            )
            continue
        ttft = float(rng.gamma(4.0, 25.0))
        g = rng.gamma(4.0, gap_ms / 4.0, size=tokens - 1)
        if stall_every and i % stall_every == 0:
            g[tokens // 2] += stall_ms
        truncated = bool(truncate_every and i % truncate_every == 1)
        opens = [False] * (tokens - 1)
        if truncated:
            opens[-1] = True
        t_rel = started - START + (ttft + np.cumsum(g)) / 1000.0
        for k in range(tokens - 1):
            gaps.append((sid, k + 1, float(g[k]), float(t_rel[k]), opens[k]))
        got = tokens - 1 if truncated else tokens
        rows.append(
            dict(
                stream_id=sid,
                protocol=proto,
                user_class="U",
                started_at=started,
                status=200 if proto == "sse" else 101,
                outcome="truncated" if truncated else "ok",
                connect_ms=1.0,
                ttft_ms=ttft,
                e2e_ms=ttft + float(g.sum()),
                tokens=got,
                expected_tokens=tokens,
                usage_completion_tokens=None if truncated else tokens,
                finish_reason=None if truncated else "length",
                max_gap_ms=float(g.max()),
                bytes=100 * got,
                error="reset" if truncated else None,
            )
        )
    with (path / "streams.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(COLUMNS)
        for r in rows:
            w.writerow(["" if r.get(c) is None else r.get(c) for c in COLUMNS])
    frame = pd.DataFrame(gaps, columns=["stream_id", "index", "gap_ms", "t", "open"])
    frame.to_parquet(path / "gaps.parquet", index=False)
    meta = {
        "tool_version": "0.1.0",
        "start": "2023-11-14T22:13:20Z",
        "end": "2023-11-14T22:13:50Z",
        "start_epoch": START,
        "end_epoch": START + duration,
        "target": "http://127.0.0.1:8000",
        "scenario": "default",
        "users": 50,
        "protocol": "mixed",
        "protocol_mix": None,
        "stall_timeout": 10.0,
        "max_tokens": tokens,
        "locust_version": "2.40",
        "server_mode": None,
        "server": None,
        "generator": {
            "peak_cpu_percent": 40.0,
            "cpu_busy_fraction": 0.0,
            "lag_p99_ms": 2.0,
            "processes": 1,
        },
        "valid": True,
        "invalid_reason": None,
    }
    meta.update(run or {})
    (path / "run.json").write_text(json.dumps(meta))
    if server is not None:
        sdir = path / "server"
        sdir.mkdir()
        for name, content in server.items():
            (sdir / name).write_text(content if isinstance(content, str) else json.dumps(content))
    return Synth(path, rows, frame)


def server_files() -> dict[str, Any]:
    """Bundled-server evidence: scrapes every 5 s, stalls.json and workers.json."""
    lines = "\n".join(
        json.dumps(
            {
                "t": float(t),
                "metrics": {
                    "streamslo_write_backlog_bytes": 1000.0 * t,
                    'streamslo_loop_stalls_total{cause="tokenizer"}': float(t),
                    'streamslo_worker_restarts_total{kind="abort"}': float(t // 10),
                    'streamslo_engine_step_seconds_bucket{le="0.01"}': 1.0,
                },
            }
        )
        for t in range(0, 31, 5)
    )
    stalls = {
        "stalls": 30,
        "by_cause": {"tokenizer": 30},
        "blocked_s": 18.4,
        "threshold_ms": 40.0,
        "recent": [
            {
                "at": START + 3,
                "ms": 612.5,
                "cause": "tokenizer",
                "frames": ["naive.py:12 setup", "tokenizer.py:40 load_vocab"],
            }
        ],
    }
    workers = {"pid": 10, "worker_restarts_total": 3, "worker_aborts_total": 3, "events": []}
    return {"metrics.jsonl": lines, "stalls.json": stalls, "workers.json": workers}


def write_naive(path: Path, **kw: Any) -> Synth:
    """A run with stalls, truncations and 5xx (the naive server), with server evidence."""
    args: dict[str, Any] = dict(
        stall_every=3,
        truncate_every=10,
        http5xx=4,
        seed=1,
        run={"server_mode": "naive"},
        server=server_files(),
    )
    args.update(kw)
    return write_run(path, **args)


def write_fixed(path: Path, **kw: Any) -> Synth:
    """A clean run (the fixed server)."""
    args: dict[str, Any] = dict(seed=2, run={"server_mode": "fixed"})
    args.update(kw)
    return write_run(path, **args)


@dataclass
class Built:
    """A report built once per test session from hand-built runs."""

    before: Synth
    after: Synth
    result: Any
    data: dict[str, Any]


@pytest.fixture(scope="session")
def compared(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """naive vs fixed, reported once (report.json parsed into ``data``)."""
    from streamslo.reports import build_report

    root = tmp_path_factory.mktemp("compared")
    before, after = write_naive(root / "naive"), write_fixed(root / "fixed")
    result = build_report(before.path, after.path, root / "out" / "report.html")
    return Built(before, after, result, json.loads(result.json.read_text()))
