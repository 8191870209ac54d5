"""``streamslo verify`` prints its verdicts, nothing of pytest's internals unless -v."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def run_dir(faulty_server, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("verify") / "run"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "streamslo",
            "run",
            "--host",
            faulty_server.base_url,
            "--model",
            "truncated_close",
            "--users",
            "2",
            "--duration",
            "1",
            "--max-tokens",
            "6",
            "--out",
            str(out),
            "--quiet",
            "--allow-invalid",
        ],
        capture_output=True,
        text=True,
        timeout=90,
        cwd=REPO,
    )
    assert r.returncode == 99, r.stderr
    return out


def verify(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streamslo", "verify", *args, "--allow-invalid"],
        capture_output=True,
        text=True,
        timeout=90,
        cwd=REPO,
    )


def test_verify_prints_only_the_verdicts(run_dir: Path) -> None:
    r = verify(str(run_dir))
    assert r.returncode == 99
    lines = r.stdout.splitlines()
    assert lines[0] == f"streamslo verify {run_dir}: SLO <default>"
    # the default SLO's four thresholds: truncation, 5xx and connection-error rates, ITL p99
    assert [ln.split()[0] for ln in lines[1:5]] == ["FAIL", "PASS", "PASS", "PASS"]
    assert lines[-1] == f"streamslo verify: SLO checks failed ({run_dir / 'slo.json'})"
    # A loaded machine may make the run invalid (its generator lagged): allowed, and said so
    # on a line of its own.
    invalid = json.loads((run_dir / "run.json").read_text()).get("valid") is False
    assert len(lines) == 6 + invalid, lines
    if invalid:
        assert lines[5].split()[:2] == ["SKIP", "test_run_is_valid:"], lines
    for noise in ("test session starts", "rootdir", "::", "PASSED", "warnings summary", "platform"):
        assert noise not in r.stdout + r.stderr


def test_quiet_prints_only_what_failed(run_dir: Path) -> None:
    r = verify(str(run_dir), "-q")
    assert r.returncode == 99
    assert [ln.split()[0] for ln in r.stdout.splitlines()[1:-1]] == ["FAIL"]
    assert "PASS" not in r.stdout and "." * 3 not in r.stdout


def test_verbose_shows_pytest(run_dir: Path) -> None:
    r = verify(str(run_dir), "-v")
    assert r.returncode == 99
    assert "test_run_is_complete PASSED" in r.stdout


def test_an_invalid_run_whose_thresholds_held_is_not_said_to_fail_its_slo(tmp_path: Path) -> None:
    """Every threshold held; only the run itself (its saturated generator) failed a check: the
    last line says so, not "SLO checks failed"."""
    from streamslo.verify.testing import stream_row, write_run

    rows = [stream_row(f"s{i}") for i in range(20)]
    gaps = {f"s{i}": [20.0] * 9 for i in range(20)}
    run_dir = write_run(
        tmp_path / "run", rows, gaps, run={"valid": False, "invalid_reason": "lag p99 90 ms"}
    )
    r = subprocess.run(
        [sys.executable, "-m", "streamslo", "verify", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=90,
        cwd=REPO,
    )
    assert r.returncode == 99, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert all(not ln.startswith("  FAIL  itl") for ln in lines), lines
    assert "every threshold held, but the run itself failed a check" in lines[-1], lines
