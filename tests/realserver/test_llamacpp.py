"""Against a real llama.cpp (``llama-server`` built from source, serving the tiny Llama of
``llamacpp_setup.py``), with no server-specific flags: a healthy server reads healthy in each
dialect it serves (OpenAI chat and completions, OpenAI Responses, Anthropic Messages) and with
prompts heavy in multibyte text, ``streamslo check`` passes, and a killed server fails the
default SLO. Skipped unless ``STREAMSLO_LLAMACPP_DIR`` is set (``tox -e llamacpp``).

llama.cpp holds back the text of byte tokens until they make whole UTF-8 characters, then sends
them in one chunk, and the tiny model's random weights emit many byte tokens: these runs are
where merged chunks meet the default flags.

The last test kills the module's server: keep it last.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.realserver.conftest import REPO, Run, assert_healthy, run_streamslo
from tests.realserver.llamacpp_setup import MULTIBYTE_TEXT

pytestmark = [pytest.mark.realserver, pytest.mark.load]

# --allow-invalid: the load generator shares the machine with llama-server (2 cores here): its
# latencies are not the server's alone, but what these tests check (outcomes, tokens, usage)
# does not depend on them.
LOAD = (
    "--users",
    "4",
    "--spawn-rate",
    "4",
    "--duration",
    "20s",
    "--max-tokens",
    "64",
    "--allow-invalid",
)

#: dialect flags -> the finish reason of a stream that ran to max_tokens, in that dialect's word.
DIALECTS = {
    "chat": (("--endpoint", "chat"), "length"),
    "completions": (("--endpoint", "completions"), "length"),
    "responses": (("--api", "openai-responses"), "max_output_tokens"),
    "messages": (("--api", "anthropic-messages"), "max_tokens"),
}


@pytest.mark.parametrize("dialect", list(DIALECTS))
def test_a_healthy_llamacpp_is_all_ok(llamacpp: Any, tmp_path: Path, dialect: str) -> None:
    flags, length_reason = DIALECTS[dialect]
    run = run_streamslo(llamacpp.url, tmp_path / "run", *flags, *LOAD)
    assert_healthy(run, length_reason=length_reason)


def test_prompts_heavy_in_multibyte_text_are_all_ok(llamacpp: Any, tmp_path: Path) -> None:
    """CJK, accented Latin, Greek, Cyrillic, Devanagari, Arabic and emoji in every prompt (the
    tokenizer spells most of them in byte tokens)."""
    prompts = tmp_path / "prompts.txt"
    prompts.write_text(
        "\n".join(
            f"{a} {b}"
            for a, b in zip(MULTIBYTE_TEXT, MULTIBYTE_TEXT[1:] + MULTIBYTE_TEXT[:1], strict=True)
        )
        + "\n",
        encoding="utf-8",
    )
    run = run_streamslo(
        llamacpp.url, tmp_path / "run", "--endpoint", "chat", "--prompt-file", str(prompts), *LOAD
    )
    assert_healthy(run)


def test_check_passes(llamacpp: Any, tmp_path: Path) -> None:
    """``streamslo check``: nothing fails against a healthy llama.cpp."""
    report = tmp_path / "check.json"
    proc = subprocess.run(
        [sys.executable, "-m", "streamslo", "check", llamacpp.url, "--json", str(report)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_a_killed_server_is_classified_and_fails_the_default_slo(
    llamacpp: Any, tmp_path: Path
) -> None:
    """SIGKILL to llama-server 8 s into a 25 s run: the streams in flight are cut, every
    request after it cannot connect, and the default SLO fails. (Kills this module's server.)"""
    out = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "streamslo",
        "run",
        "--host",
        llamacpp.url,
        "--out",
        str(out),
        "--progress",
        "off",
        "--endpoint",
        "chat",
        "--users",
        "4",
        "--spawn-rate",
        "4",
        "--duration",
        "25s",
        "--max-tokens",
        "400",
        "--allow-invalid",
    ]
    proc = subprocess.Popen(
        cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        time.sleep(8)
        assert llamacpp.proc.poll() is None, "llama-server exited before the kill"
        killed_at = time.time()
        llamacpp.proc.send_signal(signal.SIGKILL)
        _, stderr = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    run = Run(proc.returncode, out, stderr)
    outcomes = run.outcomes()
    assert run.code == 99, (outcomes, stderr[-2000:])
    after = run.streams[run.streams["started_at"] > killed_at + 1]
    assert len(after) and (after["outcome"] == "connect_error").all(), after[
        "outcome"
    ].value_counts()
    failed = {k: v for k, v in outcomes.items() if k not in ("ok", "cancelled")}
    assert "connect_error" in failed, outcomes
    assert set(failed) <= {"truncated", "connect_error"}, outcomes
    slo = json.loads((out / "slo.json").read_text())
    assert any(not t["passed"] for t in slo["thresholds"]), slo
