"""The README's examples run as written: every fenced TOML block parses (and the SLO example
holds on a healthy SSE-only run), every ``streamslo`` command in a fenced bash block is
accepted by the command line, every file a command names exists."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from streamslo.cli import build_parser

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"


def blocks(lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", README.read_text(), re.S | re.M)


def commands() -> list[list[str]]:
    """Each shell command of the bash blocks: continuations joined, comments and ``&`` dropped,
    ``a && b`` split."""
    out = []
    for block in blocks("bash"):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" # ")[0].strip().rstrip("&").strip()
            if not line or line.startswith("#"):
                continue
            for part in line.split("&&"):
                words = shlex.split(part, comments=True)
                if words:
                    out.append(words)
    return out


def test_the_readme_has_examples_to_check() -> None:
    assert len(blocks("toml")) >= 2
    assert sum(1 for c in commands() if c[0].endswith("streamslo")) >= 15


def _quick_start() -> dict[str, str]:
    """The quick start's commands by their comment (``1. The main job...``), continuations
    joined into one line."""
    block = blocks("bash")[0]
    out: dict[str, str] = {}
    for chunk in block.strip().split("\n\n"):
        comment, _, command = chunk.partition("\n")
        out[comment] = " ".join(command.replace("\\\n", " ").split())
    return out


def test_the_quick_start_installs_the_cpu_build_of_the_pinned_torch_first() -> None:
    """A Linux user who pastes either command gets torch's CPU build, not PyPI's CUDA one, at
    the version the server extra pins."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    (pin,) = [r for r in pyproject["project"]["optional-dependencies"]["server"] if "torch" in r]
    commands = _quick_start()
    assert len(commands) == 2, commands
    for command in commands.values():
        steps = [shlex.split(step) for step in command.split("&&")]
        torch = next(i for i, s in enumerate(steps) if pin in s)
        project = next(i for i, s in enumerate(steps) if any(w.startswith(".[server") for w in s))
        assert torch < project, command
        words = steps[torch]
        assert words[:2] == [".venv/bin/pip", "install"] and "--no-deps" in words
        cpu = words[words.index("--extra-index-url") + 1]
        assert cpu == "https://download.pytorch.org/whl/cpu"


def test_ci_runs_the_readmes_test_command_exactly() -> None:
    (command,) = [c for comment, c in _quick_start().items() if "test suite" in comment]
    ci = (REPO / ".ci" / "run").read_text().replace("\\\n", " ")
    assert command in [" ".join(line.split()) for line in ci.splitlines()], command


def test_every_toml_example_parses() -> None:
    for text in blocks("toml"):
        doc = tomllib.loads(text)
        assert doc


def test_the_scenario_example_is_a_valid_scenario(tmp_path: Path) -> None:
    from streamslo.workload.scenario_file import read_scenario

    (text,) = [b for b in blocks("toml") if "[scenarios." in b]
    path = tmp_path / "scenario.toml"
    path.write_text(text)
    scenario = read_scenario(path)
    assert scenario.values["scenarios"] and scenario.slo is not None


@pytest.mark.parametrize(
    "words", [c for c in commands() if c[0].endswith("streamslo")], ids=lambda c: " ".join(c[:3])
)
def test_every_streamslo_command_is_accepted_as_written(words: list[str]) -> None:
    argv = words[1:]
    parser = build_parser(argv[0])
    args = parser.parse_args(argv)  # a bad flag or value exits 2 here
    assert args.command == argv[0]


def test_every_file_a_command_names_exists() -> None:
    for words in commands():
        for i, w in enumerate(words[:-1]):
            if w == "-f":
                assert (REPO / words[i + 1]).exists(), words


def test_the_slo_example_holds_on_a_healthy_sse_only_run(faulty_server, tmp_path: Path) -> None:
    """The example once selected ttft_ms{protocol:ws}, which failed every SSE-only run."""
    (text,) = [b for b in blocks("toml") if b.startswith("[thresholds]")]
    slo = tmp_path / "slo.toml"
    slo.write_text(text)
    out = tmp_path / "run"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "streamslo",
            "run",
            "--host",
            faulty_server.base_url,
            "--users",
            "2",
            "--duration",
            "2",
            "--protocol",
            "sse",
            "--max-tokens",
            "8",
            "--out",
            str(out),
            "--slo",
            str(slo),
            "--allow-invalid",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=90,
        cwd=REPO,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    verify = subprocess.run(
        [
            sys.executable,
            "-m",
            "streamslo",
            "verify",
            str(out),
            "--slo",
            str(slo),
            "--allow-invalid",
        ],
        capture_output=True,
        text=True,
        timeout=90,
        cwd=REPO,
    )
    assert verify.returncode == 0, verify.stdout
    assert "FAIL" not in verify.stdout and verify.stdout.count("PASS") == 5


def test_a_selector_that_matches_nothing_says_so(faulty_server, tmp_path: Path) -> None:
    slo = tmp_path / "ws.toml"
    slo.write_text('[thresholds]\n"ttft_ms{protocol:ws}" = ["p(95)<2000"]\n')
    out = tmp_path / "run"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "streamslo",
            "run",
            "--host",
            faulty_server.base_url,
            "--users",
            "1",
            "--duration",
            "1",
            "--out",
            str(out),
            "--allow-invalid",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=90,
        cwd=REPO,
    )
    verify = subprocess.run(
        [
            sys.executable,
            "-m",
            "streamslo",
            "verify",
            str(out),
            "--slo",
            str(slo),
            "--allow-invalid",
        ],
        capture_output=True,
        text=True,
        timeout=90,
        cwd=REPO,
    )
    assert verify.returncode == 99
    assert "no ws streams in this run" in verify.stdout
