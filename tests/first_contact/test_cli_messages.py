"""The command line answers a mistake in a line or two: the option a typo meant, what is wrong
with a value, the sub-command's short usage; global options anywhere; required options shown
as required; serve says where it listens; packaged scenarios resolve by name."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from streamslo.errors import BadInputError
from streamslo.scenario_files import packaged, resolve_scenario
from streamslo.server.bundled import free_port

REPO = Path(__file__).resolve().parents[2]


def streamslo(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streamslo", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )


def test_a_typo_in_an_option_gets_a_suggestion_and_a_short_usage() -> None:
    r = streamslo("run", "--host", "http://x", "--out", "/tmp/x", "--usres", "5")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert lines[0] == "streamslo run: error: unrecognized arguments: --usres 5"
    assert lines[1].strip() == "--usres: did you mean --users?"
    assert lines[2] == "usage: streamslo run --out DIR [options]"
    assert len(lines) <= 4  # not the 30-line usage


def test_a_negative_duration_says_what_is_wrong() -> None:
    r = streamslo("run", "--host", "http://x", "--out", "/tmp/x", "--duration", "-5s")
    assert r.returncode == 2
    assert r.stderr.startswith("streamslo run: error: --duration: must be positive, got -5s\n")


def test_a_duration_in_words_unquoted_gets_its_unit_form() -> None:
    r = streamslo("run", "--host", "http://x", "--out", "/tmp/x", "--duration", "5", "minutes")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert lines[0] == "streamslo run: error: unrecognized arguments: minutes"
    assert (
        lines[1].strip().startswith("--duration 5 minutes: a duration is one word: --duration 5m")
    )
    assert lines[2] == "usage: streamslo run --out DIR [options]"
    # Quoted, the value itself is refused, with the same unit form.
    r = streamslo("run", "--host", "http://x", "--out", "/tmp/x", "--warmup=1 hour 30 min")
    assert "--warmup: not a duration: '1 hour 30 min': did you mean 1h30m?" in r.stderr
    # A bare word after a value that is not a duration: quote it; a typo still gets its hint.
    r = streamslo(
        "run", "--host", "http://x", "--out", "/tmp/x", "--system-prompt", "be", "brief", "--usres"
    )
    assert (
        '--system-prompt takes one value: quote it if it has spaces, --system-prompt "be brief"'
        in (r.stderr)
    )
    assert "--usres: did you mean --users?" in r.stderr


def test_a_missing_required_option_is_named_and_shown_as_required() -> None:
    r = streamslo("run", "--host", "http://x")
    assert r.returncode == 2 and "required: --out" in r.stderr
    assert "--out DIR [--scenario" in streamslo("run", "--help").stdout.replace("\n", " ").replace(
        "  ", " "
    )


def test_verbose_is_accepted_after_the_sub_command(tmp_path: Path) -> None:
    slo = tmp_path / "slo.toml"
    slo.write_text('[thresholds]\nitl_ms = ["p(99)<200"]\n')
    r = streamslo("verify", "--slo", str(slo), "-v")
    assert r.returncode == 0, r.stderr
    assert f"{slo}: OK, 1 threshold" in r.stdout


def test_sweep_help_lists_no_option_sweep_refuses() -> None:
    text = streamslo("sweep", "--help").stdout
    for flag in ("--request-rate", "--stages", "--shape"):
        assert flag not in text
    assert "--rates" in text


def test_packaged_scenarios_resolve_by_name() -> None:
    assert set(packaged()) >= {"nightly", "soak-short"}
    assert resolve_scenario("nightly") == str(packaged()["nightly"])
    # the repository path still works, and means the same file
    repo_path = REPO / "locustfiles" / "scenarios" / "nightly.toml"
    assert repo_path.read_text() == packaged()["nightly"].read_text()
    with pytest.raises(BadInputError, match="did you mean nightly"):
        resolve_scenario("nigthly")


def test_serve_logs_its_url_and_mode(tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "serve.log"
    with open(log, "wb") as f:
        proc = subprocess.Popen(
            [sys.executable, "-m", "streamslo", "serve", "--mode", "naive", "--port", str(port)],
            stdout=f,
            stderr=subprocess.STDOUT,
            cwd=REPO,
        )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and "serving http://" not in log.read_text():
            time.sleep(0.2)
        text = log.read_text()
        assert f"serving http://127.0.0.1:{port} (mode naive, faults: " in text
        assert "; uvicorn)" in text
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_typo_in_a_command_or_a_choice_gets_a_suggestion() -> None:
    r = streamslo("runn")
    assert r.returncode == 2 and "did you mean run?" in r.stderr
    r = streamslo("run", "--out", "/tmp/x", "--protocol", "wss")
    assert (
        r.returncode == 2
        and "--protocol: invalid choice: 'wss'" in r.stderr
        and "did you mean ws?" in r.stderr
    )
