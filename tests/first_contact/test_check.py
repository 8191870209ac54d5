"""``streamslo check``: the bundled server passes; what a server needs a run adapts to by itself
(named with its flag, the check passing); what a server gets wrong is named; an unreachable one
exits 2."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamslo.check.contract import CheckReport, exit_code, format_table, run_checks
from streamslo.run.preflight import PreflightFailed
from tests.faulty.process import unused_port
from tests.server.servers import ROOT, Server, start_server


@pytest.fixture(scope="module")
def bundled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = start_server(["--mode", "fixed"], tmp_path_factory.mktemp("bundled"))
    yield s
    s.stop()


def statuses(report: CheckReport) -> dict[str, str]:
    return {i.name: i.status for i in report.items}


def item(report: CheckReport, name: str) -> tuple[str, str, tuple[str, ...]]:
    (found,) = [i for i in report.items if i.name == name]
    return found.status, found.detail, found.flags


def test_the_bundled_server_passes_every_check(bundled: Server, tmp_path: Path) -> None:
    out = tmp_path / "check.json"
    r = subprocess.run(
        [sys.executable, "-m", "streamslo", "check", bundled.url, "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(out.read_text())
    assert doc["passed"] is True and doc["run_flags"] == []
    names = {c["name"]: c["status"] for c in doc["checks"]}
    assert set(names.values()) == {"pass"}, names
    for name in (
        "/v1/models",
        "SSE /v1/chat/completions",
        "SSE /v1/completions",
        "WebSocket /v1/ws",
        "terminal marker [DONE]",
        "forced length",
        "max_tokens honoured",
        "usage",
        "token count",
        "bad request → 4xx with an error body",
        "/metrics",
        "keep-alive reuse",
    ):
        assert name in names
    assert "12 passed, 0 warnings, 0 failed" in r.stdout
    # What a run there can check, and the one command line to use.
    assert doc["truth"]["missing"] == [] and doc["truth"]["silent_stop"].startswith(
        "a forced length (ignore_eos"
    )
    assert f"run: streamslo run --host {bundled.url}   (no flags: a run adapts)" in r.stdout
    assert "sees a silent stop: by a forced length (ignore_eos)" in r.stdout


def test_the_correct_faulty_scenario_passes_the_stream_contract(faulty_server) -> None:
    report = run_checks(f"{faulty_server.base_url}/s/ok")
    assert exit_code(report) == 0
    assert statuses(report)["/metrics"] == "warn"  # it has none; a run needs nothing for that
    assert report.flags == []


def test_no_done_marker_is_what_a_run_adapts_to(faulty_server) -> None:
    """A server that ends its streams with the body after the stop reason: a run adapts (the
    check passes, naming the flag), and the stop reason is what shows a cut."""
    report = run_checks(f"{faulty_server.base_url}/s/no_done")
    assert exit_code(report) == 0, format_table(report)
    status, detail, flags = item(report, "terminal marker [DONE]")
    assert (status, flags) == ("pass", ("--no-done-marker",))
    assert "no data: [DONE]: each stream ends with the body, after its stop reason" in detail
    # read without the marker, the rest of the contract holds
    assert item(report, "SSE /v1/chat/completions")[0] == "pass"
    table = format_table(report)
    assert "(it adapts by itself)" in table and "spelled out: " in table
    assert table.rstrip().endswith("--no-done-marker")
    assert report.truth is not None and report.truth.cut == "the stop reason at the body's end"


def test_usage_above_the_chunks_is_counted_by_usage_and_a_lost_chunk_cannot_be_seen(
    faulty_server,
) -> None:
    """A usage that counts more than arrived, on an idle server: merged tokens or a lie, the
    wire cannot tell; a run counts by usage and says it cannot see a lost chunk."""
    report = run_checks(f"{faulty_server.base_url}/s/usage_overcount")
    status, detail, flags = item(report, "token count")
    assert (status, flags) == ("warn", ("--coalesced-chunks",))
    assert "cannot see a lost chunk" in detail
    assert report.truth is not None and report.truth.missing == ["lost_chunk"]
    assert "cannot see a lost chunk: several tokens may share a chunk" in format_table(report)


def test_a_forced_length_the_server_ignores_is_named_and_replaced(faulty_server) -> None:
    """The server stops at 6 of 12 tokens whatever the request says: every means is seen
    ignored (three tries each), and its replies repeat, so a run records reference replies."""
    report = run_checks(f"{faulty_server.base_url}/s/early_stop")
    status, detail, flags = item(report, "forced length")
    assert status == "warn"
    assert flags == ("--forced-length none", "--reference on")
    assert "ignore_eos ignored (accepted, but the answer stopped ('stop') after 8 of 16" in detail
    assert "logit_bias against the end-of-sequence ids unavailable" in detail
    assert item(report, "greedy replies repeat")[0] == "pass"
    assert report.truth is not None
    assert report.truth.silent_stop == "reference replies (greedy replies recorded before the load)"


def test_errors_without_a_body_are_named(faulty_server) -> None:
    """A load run never sends a body that is not JSON: a bare answer to one is a warning
    (llama.cpp answers it 500), not a failed contract."""
    report = run_checks(f"{faulty_server.base_url}/s/bare_errors")
    status, detail, flags = item(report, "bad request → 4xx with an error body")
    assert status == "warn" and flags == ()
    assert "HTTP 400 with no error message" in detail
    assert all(i.status != "fail" for i in report.items if i.name.startswith("bad request"))


def test_fix_texts_fit_checks_own_command_line() -> None:
    """check takes the URL as its argument: its fixes never say --host."""
    with pytest.raises(PreflightFailed) as err:
        run_checks(f"http://127.0.0.1:{unused_port()}")
    assert "in the URL" in str(err.value) and "--host" not in str(err.value)


def test_an_unreachable_server_exits_2(tmp_path: Path) -> None:
    with pytest.raises(PreflightFailed, match="connection refused"):
        run_checks(f"http://127.0.0.1:{unused_port()}")
    r = subprocess.run(
        [sys.executable, "-m", "streamslo", "check", "ftp://x"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert r.returncode == 2 and "not an http(s) URL" in r.stderr


def test_an_unwritable_json_path_exits_2(faulty_server, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "streamslo",
            "check",
            f"{faulty_server.base_url}/s/ok",
            "--json",
            str(blocker / "check.json"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert r.returncode == 2, r.stderr
    assert str(blocker / "check.json") in r.stderr and "Traceback" not in r.stderr
