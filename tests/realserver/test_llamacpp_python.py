"""Against a real llama-cpp-python server (0.3.36, the tiny Llama's GGUF), with no server flags:
it takes ``ignore_eos`` and ignores it, sends no usage, and by default ends a running stream
with ``[DONE]`` and no stop reason as soon as another request waits
(``--interrupt_requests``). With interruption off a healthy server reads healthy (its length
forced by ``min_tokens``) and ``streamslo check`` passes; with it on, the streams it cuts read
broken. Skipped unless ``STREAMSLO_LLAMACPP_PYTHON_DIR`` is set (``tox -e llamacpp-python``).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from streamslo.server.bundled import free_port
from tests.realserver.conftest import LOAD, REPO, run_streamslo
from tests.realserver.llamacpp_python_setup import start_server

pytestmark = [pytest.mark.realserver, pytest.mark.load]


@pytest.fixture(scope="module")
def quiet(llamacpp_python_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The server with ``--interrupt_requests False``: every stream runs to its end."""
    log = tmp_path_factory.mktemp("lcp-log") / "serve.log"
    server = start_server(llamacpp_python_dir, free_port(), log, interrupt=False)
    try:
        yield server
    finally:
        server.stop()


def test_a_healthy_server_reads_healthy_with_no_flags(quiet: Any, tmp_path: Path) -> None:
    run = run_streamslo(quiet.url, tmp_path / "run", *LOAD)
    s = run.streams
    counted = s[s["outcome"] != "cancelled"]
    ok = counted[counted["outcome"] == "ok"]
    assert len(counted) >= 20 and len(ok) >= 0.99 * len(counted), run.outcomes()
    # Its chunks are not tokens (a "content": "" chunk while a character's bytes are
    # incomplete, then the text; 62 to 68 chunks for 64 tokens), and it gives no count: only
    # the stop reason is judged.
    assert (ok["finish_reason"] == "length").all()
    assert run.run["contract"]["adaptations"][0]["flag"] == "--forced-length min_tokens"
    contract = run.run["contract"]
    statuses = {m["means"]: m["status"] for m in contract["means"]}
    assert statuses["ignore_eos"] in ("ignored", "known_ignored"), statuses
    assert contract["forced_length"] == "min_tokens"
    assert run.run["truth"]["silent_stop"] == "a forced length (min_tokens)"
    assert run.run["truth"]["missing"] == ["lost_chunk"]


def test_check_passes_and_names_what_it_cannot_see(quiet: Any) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "streamslo", "check", quiet.url, "--no-ws"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "--forced-length min_tokens" in r.stdout
    assert "run: streamslo run --host" in r.stdout
    assert "a run there:" in r.stdout


def test_streams_it_interrupts_read_broken(
    llamacpp_python_dir: Path, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Interruption on (its default): at 4 users nearly every stream is ended early with
    [DONE] and no stop reason; none of those reads ok."""
    log = tmp_path_factory.mktemp("lcp-int-log") / "serve.log"
    server = start_server(llamacpp_python_dir, free_port(), log, interrupt=True)
    try:
        run = run_streamslo(server.url, tmp_path / "run", *LOAD)
    finally:
        server.stop()
    s = run.streams
    counted = s[s["outcome"] != "cancelled"]
    short = counted[counted["finish_reason"] != "length"]
    assert len(short) >= 0.3 * len(counted), run.outcomes()
    assert (short["outcome"] != "ok").all(), short[["outcome", "tokens", "error"]].head()
    assert set(short["cause"]) <= {"no_stop_reason", "stopped_early", "cut", "no_terminal"}
