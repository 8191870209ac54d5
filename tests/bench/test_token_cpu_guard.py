"""The read path's instructions per token, held to the committed figures (issue 36, item 7).

``bench/results/token_cpu_reference.json`` holds the instructions per token of the Sans-I/O
read path (SSE and WebSocket; the emitter's chunk and vLLM's; ``bench/bench_token_cpu.py``),
counted by valgrind's cachegrind with ``PYTHONHASHSEED=0`` (the count then repeats to the
instruction, whatever the machine's load), and the commit and environment that gave them.
:func:`test_the_read_path_holds_to_the_committed_figures` measures the working tree and fails
past the reference's tolerance (+5 %), naming each case and its figures. On a machine whose
interpreter build or decoders differ from the reference's (another CPython build counts other
instructions for the same code), the reference's commit is measured there beside the tree and
the tree is held to that instead.

It needs valgrind: skipped without it, except where ``STREAMSLO_REQUIRE_VALGRIND=1`` (the
nightly job), where a missing valgrind fails. It runs with the benchmarks
(``STREAMSLO_BENCH_SMOKE=1``: ``tox -e bench``, the nightly workflow's bench job), about a
minute, two where the environment differs. The other tests here check the rule itself, in the
default suite, without valgrind.

A change that makes the path dearer on purpose records the figures again, with its reason in
bench/RESULTS.md: ``python bench/bench_token_cpu.py --record
bench/results/token_cpu_reference.json`` (after committing the code: the reference names HEAD).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.bench.conftest import BENCH, REPO, bench_module

pytestmark = pytest.mark.load

REFERENCE = BENCH / "results" / "token_cpu_reference.json"


def test_the_reference_is_committed_for_both_transports() -> None:
    ref = json.loads(REFERENCE.read_text())
    tc = bench_module("bench_token_cpu")
    assert sorted(ref["figures"]) == sorted(tc.GUARDED)
    assert {k.split("/")[0] for k in ref["figures"]} == {"sse", "ws"}
    assert ref["tolerance"] == 0.05
    assert all(isinstance(v, float) and 10_000 < v < 100_000 for v in ref["figures"].values())
    assert set(ref["environment"]) == set(tc.environment())
    assert ref["command"].startswith("python bench/bench_token_cpu.py --record")
    if (REPO / ".git").exists():  # the commit it names is there to measure (a full clone)
        proc = subprocess.run(
            ["git", "-C", str(REPO), "cat-file", "-e", ref["commit"] + "^{commit}"],
            capture_output=True,
        )
        shallow = (REPO / ".git" / "shallow").exists()
        assert proc.returncode == 0 or shallow, f"{ref['commit']} is not in this repository"


def _fake(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    now: float,
    base: float,
    same_env: bool,
) -> tuple[Any, Path, list[Any]]:
    """bench_token_cpu with the measurement faked: the tree counts ``now`` a token, the
    reference's commit ``base``; the reference written to ``tmp_path``."""
    tc = bench_module("bench_token_cpu")
    env = {k: "x" for k in ("python", "implementation", "machine", "libc", "msgspec")}
    env["websockets"] = "17.4"
    ref = {
        "commit": "0" * 40,
        "tolerance": 0.05,
        "ir_streams": 20,
        "environment": env if same_env else {**env, "python": "another build"},
        "figures": {k: 20_000.0 for k in tc.GUARDED},
    }
    path = tmp_path / "ref.json"
    path.write_text(json.dumps(ref))
    cur, old = tmp_path / "cur", tmp_path / "old"
    cur.mkdir()
    old.mkdir()
    exported: list[Any] = []

    def export(rev: str) -> Path:
        exported.append(rev)
        return old

    monkeypatch.setattr(tc, "environment", lambda: env)
    monkeypatch.setattr(tc, "_current_tree", lambda: cur)
    monkeypatch.setattr(tc, "_export", export)
    monkeypatch.setattr(
        tc, "ir_per_token", lambda path, proto, shape, streams: now if path == cur else base
    )
    return tc, path, exported


@pytest.mark.parametrize(
    ("now", "passes"), [(20_000.0, True), (20_999.0, True), (21_001.0, False), (15_000.0, True)]
)
def test_the_check_fails_past_five_percent_of_the_committed_figure(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, now: float, passes: bool
) -> None:
    tc, path, exported = _fake(monkeypatch, tmp_path, now, base=0.0, same_env=True)
    ok, lines = tc.check_reference(path)
    assert ok is passes
    assert exported == []  # the same environment: the committed figures themselves
    assert len(lines) == len(tc.GUARDED)
    assert all("committed 20,000" in line for line in lines)
    assert all(line.endswith("ok" if passes else "FAILED") for line in lines), lines


@pytest.mark.parametrize(("now", "passes"), [(31_400.0, True), (31_600.0, False)])
def test_another_environment_holds_the_tree_to_the_reference_commit_measured_there(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, now: float, passes: bool
) -> None:
    """Another CPython build: its counts for the reference's code (30,000 here) are the figures,
    not the committed 20,000 (which every case would fail)."""
    tc, path, exported = _fake(monkeypatch, tmp_path, now, base=30_000.0, same_env=False)
    ok, lines = tc.check_reference(path)
    assert ok is passes
    assert exported == ["0" * 40]
    assert "python differ" in lines[0] and "measured here" in lines[0]
    assert all("measured here 30,000" in line for line in lines[1:])


def test_the_check_exits_nonzero_on_a_failure(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tc, path, _ = _fake(monkeypatch, tmp_path, 22_000.0, base=0.0, same_env=True)
    assert tc.main(["--check", str(path)]) == 1
    assert "+10.0% (fails past +5%) FAILED" in capsys.readouterr().out


@pytest.mark.skipif(
    os.environ.get("STREAMSLO_BENCH_SMOKE") != "1",
    reason="instructions counted by cachegrind (a minute or two): set STREAMSLO_BENCH_SMOKE=1 "
    "(tox -e bench, the nightly job) to run it",
)
def test_the_read_path_holds_to_the_committed_figures() -> None:
    if shutil.which("valgrind") is None:
        if os.environ.get("STREAMSLO_REQUIRE_VALGRIND") == "1":
            pytest.fail("valgrind is not installed, and this job requires the guard")
        pytest.skip("valgrind is not installed (apt-get install valgrind)")
    ok, lines = bench_module("bench_token_cpu").check_reference(REFERENCE)
    print("\n".join(lines))
    assert ok, "\n".join(lines)


def test_the_guard_runs_in_tox_bench_and_the_nightly_job() -> None:
    """``tox -e bench`` runs tests/bench with the benchmarks on; the nightly bench job installs
    valgrind, requires it, checks out the history (the reference's commit) and runs the guard."""
    tox = (REPO / "tox.ini").read_text()
    env = tox[tox.index("[testenv:bench]") :]
    env = env[: env.index("\n[", 1)]
    assert "STREAMSLO_BENCH_SMOKE = 1" in env and "python -m pytest tests/bench" in env
    wf = (REPO / ".github" / "workflows" / "nightly-soak.yml").read_text()
    job = wf[wf.index("\n  bench:") : wf.index("\n  external:")]
    assert "apt-get install -y valgrind" in job
    assert 'STREAMSLO_REQUIRE_VALGRIND: "1"' in job and 'STREAMSLO_BENCH_SMOKE: "1"' in job
    assert "fetch-depth: 0" in job
    assert "pytest -n 0 -rA tests/bench/test_token_cpu_guard.py" in job
