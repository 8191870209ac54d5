"""Against a real llama.cpp (``llama-server`` built from source, serving the tiny Llama of
``llamacpp_setup.py``), with no server-specific flags: a healthy server reads healthy in each
dialect it serves (OpenAI chat and completions, OpenAI Responses, Anthropic Messages) and with
prompts heavy in multibyte text, ``streamslo check`` passes, and a killed server fails the
default SLO. On Anthropic Messages llama.cpp drops ``ignore_eos``: answers that end at the
end-of-sequence are no failure there. Skipped unless ``STREAMSLO_LLAMACPP_DIR`` is set
(``tox -e llamacpp``).

llama.cpp holds back the text of byte tokens until they make whole UTF-8 characters, then sends
them in one chunk; bytes still held back when the answer ends (a lead byte, or a run of them,
that never completes) are never sent, and the tokens that made them have no chunk at all. The
tiny model's random weights emit many byte tokens: these runs are where both meet the default
flags.

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

from tests.realserver.conftest import (
    AGENTIC,
    LOAD,
    REPO,
    Run,
    assert_healthy,
    assert_sessions_whole,
    run_command,
    run_streamslo,
)
from tests.realserver.llamacpp_setup import MULTIBYTE_TEXT

pytestmark = [pytest.mark.realserver, pytest.mark.load]


#: dialect -> its flags, and the finish reason of a stream that ran to max_tokens. llama.cpp ends
#: a Responses stream at max_output_tokens with ``response.completed`` (status "completed", no
#: ``incomplete_details``), so that is the reason there.
DIALECTS = {
    "chat": (("--endpoint", "chat"), "length"),
    "completions": (("--endpoint", "completions"), "length"),
    "responses": (("--api", "openai-responses"), "completed"),
}

#: Prompts after which the tiny model's greedy answer is its end-of-sequence within 4 tokens
#: (found by trying against this build and model: 3 tokens, the third the EOS).
EOS_PROMPTS = (
    "wave harbour rock fish night island sea lighthouse",
    "night night island night island wave lighthouse harbour",
    "fish rock lighthouse harbour rock lamp island lighthouse",
    "rock island storm rock harbour rock lighthouse fish",
    "boat night rock wave rock island sea lamp",
)


@pytest.mark.parametrize("dialect", list(DIALECTS))
def test_a_healthy_llamacpp_is_all_ok(llamacpp: Any, tmp_path: Path, dialect: str) -> None:
    flags, length_reason = DIALECTS[dialect]
    run = run_streamslo(llamacpp.url, tmp_path / "run", *flags, *LOAD)
    assert_healthy(run, finish_reasons=(length_reason,))


def test_a_short_agentic_replay_on_llamacpp_is_whole(llamacpp: Any, tmp_path: Path) -> None:
    """Synthetic sessions (4 steps, a fan-out of 2 and a join) against llama.cpp: every step ok,
    every session whole, each step's prompt the context its ancestors built. llama-server runs
    without --jinja here: tool steps send no tool (--session-tools off)."""
    run = run_streamslo(llamacpp.url, tmp_path / "run", *AGENTIC, "--session-tools", "off")
    assert_sessions_whole(run)


def test_a_healthy_llamacpp_is_all_ok_on_anthropic_messages(llamacpp: Any, tmp_path: Path) -> None:
    """llama.cpp's /v1/messages drops ``ignore_eos`` (its Anthropic-to-chat conversion passes on
    only temperature, top_p, top_k, stream and chat_template_kwargs), so some streams end at the
    model's end-of-sequence with ``end_turn`` before max_tokens; their ``usage.output_tokens``
    counts the end-of-sequence token, which streams no text. Neither is a failure."""
    run = run_streamslo(llamacpp.url, tmp_path / "run", "--api", "anthropic-messages", *LOAD)
    s = run.streams
    counted = s[s["outcome"] != "cancelled"]
    ok = counted[counted["outcome"] == "ok"]
    msg = (
        f"outcomes {run.outcomes()}; finish {s['finish_reason'].value_counts().to_dict()}; "
        f"errors {s['error'].dropna().head(3).tolist()}"
    )
    assert len(counted) >= 20, msg
    assert len(ok) >= 0.99 * len(counted), msg
    full = ok[ok["finish_reason"] == "max_tokens"]
    eos = ok[ok["finish_reason"] == "end_turn"]
    assert len(full) + len(eos) == len(ok), msg
    assert (full["usage_completion_tokens"] == 64).all(), msg
    assert (full["tokens"] == full["usage_completion_tokens"]).all(), msg
    assert (eos["usage_completion_tokens"] <= 64).all(), msg
    # the EOS counted or not as a token position: both are the stream as sent
    assert (eos["usage_completion_tokens"] - eos["tokens"]).isin([0, 1]).all(), (
        msg,
        eos[["tokens", "usage_completion_tokens"]].head(5).to_dict("records"),
    )
    assert "llama.cpp's /v1/messages is known to ignore a forced length" in run.stderr


def test_llamacpp_honours_ignore_eos_on_chat_and_not_on_anthropic_messages(
    llamacpp: Any, tmp_path: Path
) -> None:
    """The same prompts, whose greedy answer ends at the EOS after 3 tokens, with default flags:
    on chat (``ignore_eos`` honoured) every stream runs to max_tokens; on /v1/messages every
    stream ends with ``end_turn`` after 3 tokens, and that is no truncation there."""
    prompts = tmp_path / "eos.txt"
    prompts.write_text("\n".join(EOS_PROMPTS) + "\n")
    load = (
        "--users",
        "4",
        "--spawn-rate",
        "4",
        "--duration",
        "10s",
        "--max-tokens",
        "64",
        "--allow-invalid",
        "--prompt-file",
        str(prompts),
    )
    chat = run_streamslo(llamacpp.url, tmp_path / "chat", "--endpoint", "chat", *load)
    assert_healthy(chat)
    messages = run_streamslo(
        llamacpp.url, tmp_path / "messages", "--api", "anthropic-messages", *load
    )
    s = messages.streams
    counted = s[s["outcome"] != "cancelled"]
    msg = f"outcomes {messages.outcomes()}; finish {s['finish_reason'].value_counts().to_dict()}"
    assert len(counted) >= 20, msg
    assert (counted["finish_reason"] == "end_turn").all(), msg
    assert (counted["usage_completion_tokens"] < 64).all(), msg
    assert (counted["outcome"] == "ok").all(), msg


def test_prompts_heavy_in_multibyte_text_are_all_ok(llamacpp: Any, tmp_path: Path) -> None:
    """CJK, accented Latin, Greek, Cyrillic, Devanagari, Arabic and emoji in every prompt (the
    tokenizer spells most of them in byte tokens): each ordered pair of the lines of
    ``MULTIBYTE_TEXT``, 132 prompts, so that the answers vary."""
    prompts = tmp_path / "prompts.txt"
    prompts.write_text(
        "\n".join(f"{a} {b}" for a in MULTIBYTE_TEXT for b in MULTIBYTE_TEXT if a != b) + "\n",
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
    # A long run (400 tokens a stream) that the kill cuts short.
    cmd = run_command(
        llamacpp.url,
        out,
        "--endpoint",
        "chat",
        *LOAD[:4],  # users and spawn rate
        "--duration",
        "25s",
        "--max-tokens",
        "400",
        "--allow-invalid",
    )
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
