"""Installing streamslo must not break anyone's project: one importable name, a plugin that
takes no generic option, marker or module name, and costs nothing where it is not used."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def test_a_project_with_its_own_verify_and_reports_packages_keeps_its_pytest(
    tmp_path: Path,
) -> None:
    """A throwaway project whose own top-level packages have the names of our parts, with its
    own ``--slo``/``--run-dir`` options and ``slo`` marker, passes its own pytest in an
    environment where streamslo (and its pytest plugin) is installed."""
    _write(
        tmp_path,
        {
            "verify/__init__.py": "def who():\n    return 'the project verify'\n",
            "reports/__init__.py": "def who():\n    return 'the project reports'\n",
            "target_server/__init__.py": "NAME = 'the project server'\n",
            "locustfiles/__init__.py": "",
            "pytest.ini": """\
                [pytest]
                addopts = --strict-markers -p no:cacheprovider
                markers =
                    slo: the project's own marker, with its own meaning
                filterwarnings = error
                """,
            "conftest.py": """\
                def pytest_addoption(parser):
                    parser.addoption("--slo", default="mine")
                    parser.addoption("--run-dir", default="here")
                    parser.addoption("--allow-invalid", action="store_true")
                """,
            "tests/test_project.py": """\
                import pytest
                import reports
                import target_server
                import verify


                def test_own_packages():
                    assert verify.who() == "the project verify"
                    assert reports.who() == "the project reports"
                    assert target_server.NAME == "the project server"


                @pytest.mark.slo(whatever=1)
                def test_own_options_and_marker(pytestconfig):
                    assert pytestconfig.getoption("--slo") == "mine"
                    assert pytestconfig.getoption("--run-dir") == "here"
                """,
        },
    )
    # Exactly the plugins an environment holding streamslo and its dependencies loads (this
    # test environment also has the test extra's pytest plugins, which a user's does not).
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "streamslo.verify.plugin", "-q", "tests"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 passed" in proc.stdout
    # The plugin was there all along, under its own prefixed names.
    help_text = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "streamslo.verify.plugin", "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    ).stdout
    assert "--streamslo-run-dir" in help_text and "--streamslo-slo" in help_text


def test_the_plugin_costs_nothing_to_load() -> None:
    """Loading the plugin (which pytest does in every session) imports nothing heavy."""
    code = (
        "import sys, streamslo.verify.plugin; "
        "heavy = [m for m in ('pandas', 'pyarrow', 'numpy', 'matplotlib', 'locust', 'gevent', 'torch', 'httpx') "
        "if m in sys.modules]; print(heavy); sys.exit(1 if heavy else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.load
def test_the_wheel_installs_one_top_level_name(tmp_path: Path) -> None:
    """The built wheel holds ``streamslo`` and its metadata, nothing else at the top level."""
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(REPO)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (wheel,) = tmp_path.glob("streamslo-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        tops = {n.split("/", 1)[0] for n in names}
        dist_info = next(t for t in tops if t.endswith(".dist-info"))
        top_level = (
            zf.read(f"{dist_info}/top_level.txt").decode().split()
            if f"{dist_info}/top_level.txt" in names
            else ["streamslo"]
        )
        entry_points = zf.read(f"{dist_info}/entry_points.txt").decode()
        metadata = zf.read(f"{dist_info}/METADATA").decode()
    assert tops == {"streamslo", dist_info}, sorted(tops)
    assert top_level == ["streamslo"]
    assert "streamslo = streamslo.verify.plugin" in entry_points
    # The package carries the locustfile ``streamslo run`` uses, and the server is an extra.
    assert "streamslo/loadgen/locustfile.py" in names
    # ... and the scenario files `--scenario nightly` names.
    assert {
        "streamslo/scenario_files/nightly.toml",
        "streamslo/scenario_files/soak-short.toml",
    } <= set(names)
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    assert any("torch" in r and 'extra == "server"' in r for r in requires), requires
    assert not any("torch" in r and "extra" not in r for r in requires), requires
    # No pytest plugin among the plain dependencies but our own: pytest-asyncio, for one,
    # would change every other project's warnings.
    assert not any("pytest-asyncio" in r and "extra" not in r for r in requires), requires
