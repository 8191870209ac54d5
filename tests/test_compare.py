"""The README's main job, ``streamslo compare``, end to end on small embedded-style settings."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def run_compare(out: Path, duration: int) -> subprocess.CompletedProcess[str]:
    """``streamslo compare`` (both bundled servers, 10 users) for ``duration`` seconds each."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "streamslo",
            "compare",
            "--out",
            str(out),
            "--users",
            "10",
            "--duration",
            str(duration),
            "--drain",
            "5",
            "--allow-invalid",
        ],
        capture_output=True,
        text=True,
        timeout=400,
        cwd=REPO,
    )


@pytest.mark.load
def test_compare_naive_breaks_fixed_meets_slo(tmp_path):
    out = tmp_path / "cmp"
    # 16 s a run, as the README's demo: four levels, the lower ones 2.7 s each. Under a loaded
    # suite the fixed server's 2-stream streams outlasted that level and none started in it
    # (levels [1, 5, 10]); such a level takes the streams in flight through it (knee.py).
    r = run_compare(out, 16)
    fixed_run = json.loads((out / "fixed" / "run.json").read_text())
    fixed_slo = json.loads((out / "fixed" / "slo.json").read_text())
    assert r.returncode in (0, 99), r.stdout[-3000:] + r.stderr[-3000:]
    if fixed_run.get("valid") is False:
        # On a loaded machine the load generator lagged: compare must then say so (the fixed
        # run's latencies measure the generator) rather than blame the server silently.
        assert "INVALID" in r.stdout, r.stdout[-3000:]
    for name in (
        "naive/streams.csv",
        "fixed/streams.csv",
        "report.html",
        "report.md",
        "report.json",
    ):
        assert (out / name).exists(), name
    naive = json.loads((out / "naive" / "summary.json").read_text())
    fixed = json.loads((out / "fixed" / "summary.json").read_text())
    # The naive server breaks the incidents' SLO by a wide margin; the fixed one cuts no stream.
    broken = [
        (naive["truncation_rate"] or 0) >= 0.002,
        (naive["http_5xx_rate"] or 0) >= 0.002,
        (naive["itl_ms"]["p99"] or 0) >= 400,
        # On a heavily loaded machine its blocked loop may answer no stream at all before the
        # stall timeout (every stream stalled, none began: no truncation rate, no gaps).
        (naive["error_rate"] or 0) >= 0.5,
    ]
    assert any(broken), naive
    assert fixed["truncation_rate"] == 0.0 and fixed["http_5xx_rate"] == 0.0
    naive_run = json.loads((out / "naive" / "run.json").read_text())
    assert naive_run["server_mode"] == "naive"
    # Its cut streams say "stop" under ignore_eos, which the bundled server is known to honour:
    # silent truncations, never advice to drop the forced length that shows them.
    assert naive_run["forced_length"] == "ignore_eos"
    for hint in naive.get("server_hints") or ():
        assert "--forced-length none" not in hint and "--no-ignore-eos" not in hint, hint
    silent = naive["outcomes"]["silent_truncation"]
    if silent:
        assert naive["truth"]["silent_stop"].startswith("a forced length (ignore_eos")
    assert json.loads((out / "fixed" / "run.json").read_text())["server_mode"] == "fixed"
    # The verdict is the fixed run's SLO result, said as such. Whether its ITL p99 stays under
    # the SLO's 200 ms depends on the machine's load (a quiet machine's figure, asserted by
    # tests/bench/test_compare_timing.py): here the verdict only has to match it.
    if r.returncode == 0:
        assert "verdict: the fixed server met the SLO" in r.stdout
        assert fixed_slo["passed"] is True and fixed["itl_ms"]["p99"] < 200
    else:
        assert "verdict: the fixed server did NOT meet the SLO" in r.stderr
        assert fixed_slo["passed"] is False, fixed_slo
    # Each server ramped through 1, 2, 5 and 10 streams (10 held for half the run); the report shows every
    # level of both runs and where each turned.
    assert "ramping through 1, 2, 5, 10 streams" in r.stdout
    levels = {s["name"]: s for s in json.loads((out / "report.json").read_text())["levels"]}
    assert set(levels) == {"naive", "fixed"}
    assert [p["x"] for p in levels["fixed"]["levels"]] == [1, 2, 5, 10]
    assert all(p["truncation_rate"] == 0.0 for p in levels["fixed"]["levels"])
    assert levels["naive"]["knee"]["broke_at"] is not None  # the naive server turned somewhere
    html = (out / "report.html").read_text()
    assert "<h2>Load levels</h2>" in html and "against concurrency" in html
    assert "itl_ms" in r.stdout and "report.html" in r.stdout


def test_compare_rejects_a_non_empty_out(tmp_path):
    (tmp_path / "x").write_text("keep me")
    r = subprocess.run(
        [sys.executable, "-m", "streamslo", "compare", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert r.returncode == 2
    assert "not empty" in r.stderr
    assert (tmp_path / "x").read_text() == "keep me"


def test_the_ramp_halves_down_from_the_top_which_holds_half_the_run():
    from streamslo.commands.compare import level_counts, ramp_stages
    from streamslo.errors import BadInputError
    from streamslo.options.stages import parse_stages, total_duration
    from streamslo.reports.knee import stage_levels

    assert level_counts(40, 6) == (1, 2, 5, 10, 20, 40)
    assert level_counts(10, 6) == (1, 2, 5, 10)  # repeats dropped
    assert level_counts(40, 1) == (40,)
    stages = ramp_stages(40, 6, 40.0)
    assert total_duration(parse_stages(stages)) == 40.0
    held = stage_levels(stages)
    assert [n for n, _, _ in held] == [1, 2, 5, 10, 20, 40]
    assert [hi - lo for _, lo, hi in held] == [
        3,
        3,
        3,
        3,
        3,
        19,
    ]  # 4 s shares, 20 s at the top, less 1 s ramps
    with pytest.raises(BadInputError, match="too short"):
        ramp_stages(40, 6, 5.0)
