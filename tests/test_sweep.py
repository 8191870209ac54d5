"""``streamslo sweep``: rates, the knee, ``max_passing_rate``, the charts' tick labels, and whole
sweeps against the bundled server (one results directory per rate, ``sweep.json``, exit codes)."""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from streamslo.commands.sweep import even_rates, parse_rates
from streamslo.figures.metrics import LatencyStats
from streamslo.reports.knee import LoadPoint, find_knee, keep_up_floor, sent_rate
from streamslo.reports.knee_charts import knee_figure, level_ticks
from streamslo.reports.sweep_report import SweepEntry, max_passing_rate, sweep_document

REPO = Path(__file__).resolve().parents[1]


def _stats(p99: float) -> LatencyStats:
    return LatencyStats.of(np.full(100, p99, dtype=float))


def _point(
    x: float,
    *,
    ttft: float = 50.0,
    itl: float = 20.0,
    trunc: float = 0.0,
    passed: bool | None = True,
    achieved: float | None = None,
    requests: int = 1000,
) -> LoadPoint:
    return LoadPoint(
        x=x,
        label=f"{x:g} req/s",
        requests=requests,
        duration_s=60.0,
        achieved_rate=x if achieved is None else achieved,
        tokens_per_s=10 * x,
        ttft_ms=_stats(ttft),
        itl_ms=_stats(itl),
        tpot_ms=_stats(itl),
        e2e_ms=_stats(10 * ttft),
        truncation_rate=trunc,
        error_rate=0.0,
        passed=passed,
        asked=True,
        failed=() if passed is not False else ("ttft_ms p(99)<500",),
    )


# ------------------------------------------------------------------- rates and the knee
def test_parse_rates_sorts_and_rejects_bad_lists() -> None:
    assert parse_rates("4, 1,2,2") == (1.0, 2.0, 4.0)
    for bad in ("", "1,x", "0,2", "-1"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_rates(bad)


def test_even_rates_reach_the_saturating_rate() -> None:
    assert even_rates(2.58, 21.1, 3) == (8.75, 14.9, 21.1)
    assert even_rates(5.0, 5.0, 4) == (5.0,)  # nothing between: the one rate


def test_sent_rate_is_gaps_over_the_span_of_starts() -> None:
    # 5 starts over 2 s: 4 gaps, 2 req/s, whatever the run's start-up and drain.
    assert sent_rate(np.array([10.0, 10.5, 11.0, 11.5, 12.0])) == pytest.approx(2.0)
    assert sent_rate(np.array([3.0])) is None


def test_keeping_up_allows_poisson_noise_for_few_requests() -> None:
    assert keep_up_floor(10.0, 10_000) == pytest.approx(9.0)  # 90 % with many requests
    assert keep_up_floor(10.0, 25) == pytest.approx(4.0)  # 1 - 3/5 with 25


def test_the_knee_is_the_last_level_before_the_service_turns() -> None:
    held = [_point(1), _point(2, ttft=80), _point(4, ttft=90)]
    assert find_knee(held).broke_at is None and find_knee(held).x == 4
    ttft = [*held, _point(8, ttft=101)]  # over twice the lowest level's 50 ms
    knee = find_knee(ttft)
    assert (knee.x, knee.broke_at) == (4, "8 req/s") and "TTFT p99" in knee.reason
    small = [_point(1, ttft=10), _point(2, ttft=45)]  # 4.5x, but only 35 ms more: noise
    assert find_knee(small).broke_at is None
    trunc = [_point(1), _point(2, trunc=0.02)]
    assert find_knee(trunc).x == 1 and "truncation" in find_knee(trunc).reason
    behind = [_point(1), _point(2, achieved=1.5)]  # 1000 requests: 1.5 < 90 % of 2
    assert "were sent" in find_knee(behind).reason
    slo = [_point(1), _point(2, passed=False)]
    assert "SLO failed" in find_knee(slo).reason
    lowest = [_point(1, passed=False), _point(2)]
    assert find_knee(lowest).x is None and "lowest level" in find_knee(lowest).reason


def test_max_passing_rate_needs_every_lower_rate_to_pass() -> None:
    def entries(*passed: bool) -> list[SweepEntry]:
        return [
            SweepEntry("rate", float(2**i), f"rate-{2**i}", 0, _point(2**i, passed=p))
            for i, p in enumerate(passed)
        ]

    assert max_passing_rate(entries(True, True, False, True)) == 2.0  # 8 req/s passing is luck
    assert max_passing_rate(entries(False, True)) is None
    doc = sweep_document(entries(True, True, True), {"target": "t"})
    assert doc["max_passing_rate"] == 4.0 and len(doc["entries"]) == 3
    assert doc["entries"][2]["ttft_ms"]["p99"] == pytest.approx(50.0)
    json.dumps(doc, allow_nan=False)


# ------------------------------------------------------------------------------- charts
def test_level_ticks_keep_their_distance_and_the_top() -> None:
    levels = [1, 1.1, 2, 2.2, 4, 8, 8.5, 16, 17]
    ticks = level_ticks(levels, log=True, min_gap=0.12)
    assert ticks[-1] == 17 and ticks[0] == 1
    assert all(np.log10(b) - np.log10(a) >= 0.12 for a, b in itertools.pairwise(ticks))


def _labels_overlap(fig: object) -> list[str]:
    canvas = FigureCanvasAgg(fig)  # type: ignore[arg-type]
    canvas.draw()
    renderer = canvas.get_renderer()
    clashes = []
    for ax in fig.axes:  # type: ignore[attr-defined]
        for axis in (ax.xaxis, ax.yaxis):
            labels = [
                t for t in axis.get_ticklabels(which="both") if t.get_visible() and t.get_text()
            ]
            boxes = [t.get_window_extent(renderer) for t in labels]
            for i in range(len(boxes)):
                for j in range(i + 1, len(boxes)):
                    if boxes[i].overlaps(boxes[j]):
                        clashes.append(f"{labels[i].get_text()} / {labels[j].get_text()}")
    return clashes


@pytest.mark.parametrize("log_x", [True, False])
@pytest.mark.parametrize("spread", [1.2, 8.0, 300.0, 1e5])
def test_log_scale_tick_labels_do_not_overlap(spread: float, log_x: bool) -> None:
    # Latencies from 20 ms up to 20 ms x spread, over close and far load levels.
    levels = (
        [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64]
        if log_x
        else [0.52, 1.1, 8.75, 14.9, 21.1, 21.4, 33.3]
    )
    pts = [
        _point(x, ttft=20 * spread ** (i / 11), itl=20 + i, trunc=i / 100)
        for i, x in enumerate(levels)
    ]
    fig = knee_figure(
        {"naive": pts, "fixed": [_point(x) for x in levels]},
        title="t",
        xlabel="users",
        knees={"naive": find_knee(pts)},
        bounds={"ttft_ms": 500.0, "itl_ms": 200.0},
        log_x=log_x,
        throughput=True,
    )
    assert fig is not None
    labels = [t.get_text() for ax in fig.axes for t in ax.yaxis.get_ticklabels() if t.get_text()]
    assert labels, "the log axes are labelled"
    assert _labels_overlap(fig) == []


# -------------------------------------------------- whole sweeps against the bundled server
@pytest.fixture(scope="module")
def bundled_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from streamslo.server.bundled import BundledServer

    server = BundledServer(["--mode", "fixed"], tmp_path_factory.mktemp("srv") / "server.log")
    try:
        server.wait_ready()
        yield server.url
    finally:
        server.stop()


def _sweep(url: str, out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [
        sys.executable,
        "-m",
        "streamslo",
        "sweep",
        "--host",
        url,
        "--out",
        str(out),
        "--duration",
        "5",
        "--max-tokens",
        "8",
        "--drain",
        "5",
        "--allow-invalid",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180, cwd=REPO)


def _slo_of_any_load(tmp_path: Path) -> Path:
    """An SLO of what the bundled server gets right at any load (no stream cut, no 5xx): the
    default one's ITL p99 < 200 ms is a quiet machine's figure (a loaded one failed every rate),
    and these tests check the sweep, not the server's latency."""
    slo = tmp_path / "slo.toml"
    slo.write_text(
        '[thresholds]\ntruncation_rate = ["rate<0.001"]\nhttp_5xx_rate = ["rate<0.001"]\n'
    )
    return slo


@pytest.mark.load
def test_a_sweep_of_given_rates_writes_one_directory_per_rate(
    bundled_url: str, tmp_path: Path
) -> None:
    out = tmp_path / "sweep"
    slo = _slo_of_any_load(tmp_path)
    r = _sweep(bundled_url, out, "--rates", "9,3", "--goodput", "e2el:60000", "--slo", str(slo))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    doc = json.loads((out / "sweep.json").read_text())
    assert [e["asked_rate"] for e in doc["entries"]] == [3.0, 9.0]
    assert doc["complete"] is True and doc["mode"] == "rates" and doc["max_passing_rate"] == 9.0
    for e in doc["entries"]:
        s = pd.read_csv(out / e["dir"] / "streams.csv")
        assert e["requests"] == int((s["outcome"] != "cancelled").sum()) > 0
        assert (
            json.loads((out / e["dir"] / "run.json").read_text())["request_rate"] == e["asked_rate"]
        )
        assert e["passed"] is True and e["truncation_rate"] == 0.0 and e["ttft_ms"]["p99"] > 0
        summary = json.loads((out / e["dir"] / "summary.json").read_text())
        assert (
            e["goodput_fraction"] == summary["goodput_fraction"] == 1.0
        )  # every stream within a minute
        assert (
            e["goodput_per_s"] == pytest.approx(summary["goodput_per_s"]) and e["goodput_per_s"] > 0
        )
    # Open loop: the higher rate sent more requests (about 3x; Poisson over 5 s).
    assert doc["entries"][1]["requests"] > doc["entries"][0]["requests"]
    html = (out / "sweep.html").read_text()
    assert "data:image/png;base64," in html and "Highest rate that met the SLO: 9 req/s" in html
    assert "| 9 req/s |" in (out / "sweep.md").read_text()
    assert "the highest rate that met the SLO: 9 req/s" in r.stdout


@pytest.mark.load
def test_a_sweep_that_no_rate_passes_exits_99(bundled_url: str, tmp_path: Path) -> None:
    slo = tmp_path / "slo.toml"
    slo.write_text('[thresholds]\nttft_ms = ["p(99)<0.01"]\n')  # no server answers in 10 us
    out = tmp_path / "sweep"
    r = _sweep(bundled_url, out, "--rates", "2", "--slo", str(slo))
    assert r.returncode == 99, r.stdout[-2000:] + r.stderr[-2000:]
    doc = json.loads((out / "sweep.json").read_text())
    assert doc["max_passing_rate"] is None and doc["entries"][0]["passed"] is False
    assert doc["entries"][0]["failed"] == ["ttft_ms p(99)<0.01"]
    assert "no rate met the SLO" in r.stderr


@pytest.mark.load
def test_find_max_measures_then_sweeps_up_to_the_saturating_rate(
    bundled_url: str, tmp_path: Path
) -> None:
    out = tmp_path / "sweep"
    slo = _slo_of_any_load(tmp_path)
    r = _sweep(bundled_url, out, "--find-max", "--users", "4", "--steps", "2", "--slo", str(slo))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    doc = json.loads((out / "sweep.json").read_text())
    kinds = [e["kind"] for e in doc["entries"]]
    assert kinds == ["synchronous", "throughput", "rate", "rate"]
    sync, sat = doc["synchronous_rate"], doc["max_throughput_rate"]
    assert 0 < sync < sat  # four streams at once send more than one at a time
    assert doc["rates"][-1] == pytest.approx(sat, rel=0.01) and doc["rates"][0] > sync
    assert (out / "synchronous" / "streams.csv").exists() and (
        out / "throughput" / "streams.csv"
    ).exists()
    sync_streams = pd.read_csv(out / "synchronous" / "streams.csv").sort_values("started_at")
    ends = sync_streams["started_at"] + sync_streams["e2e_ms"] / 1000
    assert (
        sync_streams["started_at"].to_numpy()[1:] >= ends.to_numpy()[:-1] - 0.001
    ).all()  # one at a time


def test_sweep_rejects_a_set_request_rate_and_a_non_empty_out(tmp_path: Path) -> None:
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "streamslo",
            "sweep",
            "--host",
            "http://127.0.0.1:9",
            "--out",
            str(tmp_path / "a"),
            "--request-rate",
            "3",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert r.returncode == 2 and "--request-rate" in r.stderr
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "keep").write_text("x")
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "streamslo",
            "sweep",
            "--host",
            "http://127.0.0.1:9",
            "--out",
            str(tmp_path / "b"),
            "--rates",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert r.returncode == 2 and "not empty" in r.stderr
    scenario = tmp_path / "s.toml"
    scenario.write_text('[scenarios.chat]\nexecutor = "constant-vus"\nvus = 2\nduration = "10s"\n')
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "streamslo",
            "sweep",
            "--host",
            "http://127.0.0.1:9",
            "--out",
            str(tmp_path / "c"),
            "--scenario",
            str(scenario),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert r.returncode == 2 and "[scenarios.*]" in r.stderr


@pytest.mark.load
def test_a_stop_signal_ends_the_sweep_with_the_runs_so_far(
    bundled_url: str, tmp_path: Path
) -> None:
    import signal
    import time

    out = tmp_path / "sweep"
    cmd = [
        sys.executable,
        "-m",
        "streamslo",
        "sweep",
        "--host",
        bundled_url,
        "--out",
        str(out),
        "--rates",
        "4,8",
        "--duration",
        "60",
        "--max-tokens",
        "8",
        "--drain",
        "5",
        "--allow-invalid",
    ]
    proc = subprocess.Popen(
        cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    csv = out / "rate-4" / "streams.csv"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and proc.poll() is None:
        if csv.exists() and len(csv.read_text().splitlines()) > 2:
            break
        time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert "sweep: interrupted" in err
    doc = json.loads((out / "sweep.json").read_text())
    assert doc["complete"] is False and [e["asked_rate"] for e in doc["entries"]] == [4.0]
    assert doc["entries"][0]["requests"] > 0
    assert json.loads((out / "rate-4" / "run.json").read_text())["interrupted"] is True
    assert not (out / "rate-8").exists()  # no further run started
