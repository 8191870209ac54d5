"""The nightly workflow's run history survives from one night to the next: the ``bundled`` job's
steps, driven as GitHub runs them, night after night, each night on a fresh runner (a new empty
workspace) that shares only the workflow's cache with the nights before.

What the driver does per step: ``actions/cache/restore`` copies the newest cache entry whose
key starts with a restore key into the workspace (GitHub's rule for a missed key);
``actions/cache/save`` stores the path under its key; the other ``uses:`` steps (checkout,
setup-python, upload) have nothing to do here; a ``run:`` step runs in ``bash -e`` (GitHub's
default shell) with ``GITHUB_OUTPUT`` and ``GITHUB_STEP_SUMMARY``, its ``${{ }}`` expressions
filled in from the earlier steps' outputs, and only when its ``if:`` allows (no ``if:``: every
earlier step succeeded). The install step is the one step not run: the workspace's
``.venv/bin/streamslo`` is this checkout's, except that ``soak`` writes a synthetic night (the
project's own writer and finalize: tests/history/nights.py) instead of soaking for an hour.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
WORKFLOW = REPO / ".github" / "workflows" / "nightly-soak.yml"
T0 = 1_800_000_000.0

#: ``streamslo`` on the runner: this checkout's, with ``soak`` writing the night in $NIGHT.
SHIM = """#!/bin/sh
if [ "$1" = soak ]; then
    while [ $# -gt 0 ]; do [ "$1" = --out ] && out=$2; shift; done
    exec {python} -c '
import json, os, sys
from pathlib import Path
sys.path.insert(0, "{repo}")
from tests.history.nights import Night, write_night
write_night(Path(sys.argv[1]), Night(**json.loads(os.environ["NIGHT"])))
' "$out"
fi
exec {python} -m streamslo "$@"
"""


@dataclass
class Cache:
    """The workflow's cache: entries by key, never overwritten."""

    root: Path
    keys: list[str] = field(default_factory=list)

    def save(self, key: str, path: Path) -> None:
        if key in self.keys or not path.exists():
            return
        shutil.copytree(path, self.root / key)
        self.keys.append(key)

    def restore(self, key: str, prefixes: list[str], path: Path) -> bool:
        hit = (
            key
            if key in self.keys
            else next(
                (k for k in reversed(self.keys) if any(k.startswith(p) for p in prefixes)), None
            )
        )
        if hit is None:
            return False
        shutil.copytree(self.root / hit, path, dirs_exist_ok=True)
        return True


def _expr(text: str, outputs: dict[str, dict[str, str]], run_id: int) -> str:
    """Fill in the ``${{ }}`` expressions the job uses."""

    def one(m: re.Match[str]) -> str:
        e = m.group(1).strip()
        if e == "github.run_id":
            return str(run_id)
        step = re.fullmatch(r"steps\.([\w-]+)\.outputs\.([\w-]+)", e)
        if step:
            return outputs.get(step.group(1), {}).get(step.group(2), "")
        raise AssertionError(f"an expression the driver does not know: {e}")

    return re.sub(r"\$\{\{(.*?)\}\}", one, text)


def _runs(step: dict[str, Any], failed: bool) -> bool:
    cond = step.get("if")
    if cond is None:
        return not failed
    assert cond.strip() == "${{ !cancelled() }}", cond
    return True


@dataclass
class Night:
    ok: bool
    outputs: dict[str, dict[str, str]]
    summary: str
    workspace: Path
    log: str


def run_night(job: dict[str, Any], cache: Cache, root: Path, run_id: int, night: dict) -> Night:
    """One night of the job on a fresh runner."""
    ws = root / f"runner-{run_id}"
    (ws / ".venv" / "bin").mkdir(parents=True)
    shim = ws / ".venv" / "bin" / "streamslo"
    shim.write_text(SHIM.format(python=sys.executable, repo=str(REPO)))
    shim.chmod(shim.stat().st_mode | stat.S_IEXEC)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STREAMSLO_", "GITHUB_"))}
    env.update({k: str(v) for k, v in job.get("env", {}).items()})
    env.update(
        SCENARIO="locustfiles/scenarios/nightly.toml",
        NIGHT=json.dumps(night),
        GITHUB_OUTPUT=str(ws / "github_output"),
        GITHUB_STEP_SUMMARY=str(ws / "step_summary.md"),
        MPLBACKEND="Agg",
    )
    outputs: dict[str, dict[str, str]] = {}
    failed, log = False, []
    for step in job["steps"]:
        if not _runs(step, failed):
            continue
        uses = step.get("uses", "")
        with_ = {k: _expr(str(v), outputs, run_id) for k, v in step.get("with", {}).items()}
        if uses.startswith("actions/cache/restore@"):
            prefixes = [p.strip() for p in with_.get("restore-keys", "").splitlines() if p.strip()]
            cache.restore(with_["key"], prefixes, ws / with_["path"])
            continue
        if uses.startswith("actions/cache/save@"):
            cache.save(with_["key"], ws / with_["path"])
            continue
        if uses or step["name"].startswith("Install"):
            continue  # checkout, setup-python, upload; the install (the shim stands for it)
        step_env = dict(
            env, **{k: _expr(str(v), outputs, run_id) for k, v in step.get("env", {}).items()}
        )
        (ws / "github_output").write_text("")
        proc = subprocess.run(
            ["bash", "-e", "-c", _expr(step["run"], outputs, run_id)],
            cwd=ws,
            env=step_env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        log.append(
            f"== {step.get('name', step['run'][:40])}: exit {proc.returncode}\n{proc.stdout}{proc.stderr}"
        )
        if "id" in step:
            lines = (ws / "github_output").read_text().splitlines()
            outputs[step["id"]] = dict(line.split("=", 1) for line in lines if "=" in line)
        failed = failed or proc.returncode != 0
    summary = (ws / "step_summary.md").read_text() if (ws / "step_summary.md").exists() else ""
    return Night(not failed, outputs, summary, ws, "\n".join(log))


@pytest.fixture(scope="module")
def nights(tmp_path_factory) -> list[Night]:
    """Four nights: three of noise (no verdict yet: three runs must have passed first), then a
    30 % rise of ITL p99 that passes its threshold."""
    job = yaml.safe_load(WORKFLOW.read_text())["jobs"]["bundled"]
    root = tmp_path_factory.mktemp("nightly")
    cache = Cache(root / "cache")
    cache.root.mkdir()
    out = []
    for n in range(1, 5):
        night = {"seed": 500 + n, "start": T0 + n * 86400.0, "itl_p99_rise": 0.3 if n == 4 else 0.0}
        out.append(run_night(job, cache, root, 9000 + n, night))
    return out


def test_the_history_survives_from_one_night_to_the_next(nights):
    from streamslo.history.store import open_store

    for n, night in enumerate(nights, start=1):
        store = night.workspace / ".streamslo" / "history" / "history.sqlite"
        assert store.exists(), night.log
        with open_store(store) as s:
            (series,) = s.series()
        assert series.runs == n, night.log  # every night before it, restored from the cache


def test_the_job_fails_on_a_regression_that_passed_its_thresholds(nights):
    assert [n.ok for n in nights] == [True, True, True, False], nights[-1].log
    last = nights[-1]
    assert last.outputs["soak"]["code"] == "0"  # the thresholds held
    assert last.outputs["history"]["code"] == "99"  # the history caught it
    assert "REGRESSION" in last.summary and "itl_ms.p99" in last.summary
    assert (last.workspace / "results" / "nightly" / "history.html").exists()
    assert "No verdict" in nights[0].summary and "No verdict" in nights[2].summary


def test_the_job_fails_on_a_threshold_too(tmp_path):
    """A night whose soak failed its thresholds (exit 99) fails the job, and still joins the
    history (as a run that did not pass)."""
    job = yaml.safe_load(WORKFLOW.read_text())["jobs"]["bundled"]
    for step in job["steps"]:
        if step.get("id") == "soak":
            step["run"] = step["run"].replace(
                "--out results/nightly\n", "--out results/nightly\n(exit 99)\n"
            )
    night = run_night(job, Cache(tmp_path / "cache"), tmp_path, 1, {"seed": 1, "start": T0})
    assert not night.ok and night.outputs["soak"]["code"] == "99", night.log
    assert night.outputs["history"]["code"] == "0"


def test_tox_soak_does_the_same_locally(tmp_path):
    """``tox -e soak``'s command, run twice with the same shim: each run joins the history kept
    in ``$STREAMSLO_HISTORY`` between runs, and the exit says both verdicts."""
    import configparser

    tox = configparser.ConfigParser(interpolation=None)
    tox.read(REPO / "tox.ini")
    section = tox["testenv:soak"]
    assert "{toxworkdir}/history.sqlite" in section["setenv"]
    command = section["commands"].strip()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "streamslo"
    shim.write_text(SHIM.format(python=sys.executable, repo=str(REPO)))
    shim.chmod(shim.stat().st_mode | stat.S_IEXEC)
    store = tmp_path / "history.sqlite"
    codes = []
    for n in (1, 2):
        argv = shlex.split(
            command.replace("{envtmpdir}", str(tmp_path / "envtmp")).replace("{posargs}", "")
        )
        env = dict(
            os.environ,
            PATH=f"{bin_dir}:{os.environ['PATH']}",
            STREAMSLO_HISTORY=str(store),
            NIGHT=json.dumps({"seed": 40 + n, "start": T0 + n * 86400.0}),
            MPLBACKEND="Agg",
        )
        proc = subprocess.run(
            argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )
        codes.append(proc.returncode)
        assert "tox -e soak: soak exit 0 (thresholds), history exit 0" in proc.stdout, (
            proc.stdout + proc.stderr
        )
    assert codes == [0, 0]
    from streamslo.history.store import open_store

    with open_store(store) as s:
        assert [x.runs for x in s.series()] == [2]
