"""``streamslo check``: the bundled server passes; each misbehaving server is named, with the
run flag it needs; an unreachable one exits 2."""

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
        "ignore_eos honoured",
        "max_tokens honoured",
        "usage",
        "bad request → 4xx with an error body",
        "/metrics",
        "keep-alive reuse",
    ):
        assert name in names
    assert "11 passed, 0 warnings, 0 failed" in r.stdout


def test_the_correct_faulty_scenario_passes_the_stream_contract(faulty_server) -> None:
    report = run_checks(f"{faulty_server.base_url}/s/ok")
    assert exit_code(report) == 0
    assert statuses(report)["/metrics"] == "warn"  # it has none; a run needs nothing for that
    assert report.flags == []


def test_no_done_marker_is_named_with_its_flag(faulty_server) -> None:
    report = run_checks(f"{faulty_server.base_url}/s/no_done")
    assert exit_code(report) == 99
    status, detail, flags = item(report, "terminal marker [DONE]")
    assert (status, flags) == ("fail", ("--no-done-marker",))
    assert "without data: [DONE]" in detail
    # read with --no-done-marker, the rest of the contract holds
    assert item(report, "ignore_eos honoured")[0] == "pass"
    assert "needs: --no-done-marker" in format_table(report)


def test_usage_that_lies_is_named(faulty_server) -> None:
    report = run_checks(f"{faulty_server.base_url}/s/usage_overcount")
    status, detail, _ = item(report, "usage")
    assert status == "fail"
    assert "usage.completion_tokens 12 but 6 content chunks streamed" in detail


def test_ignore_eos_ignored_is_named_with_its_flag(faulty_server) -> None:
    report = run_checks(f"{faulty_server.base_url}/s/early_stop")
    status, detail, flags = item(report, "ignore_eos honoured")
    assert (status, flags) == ("fail", ("--no-ignore-eos",))
    assert "finish_reason stop after 6 of 12 tokens" in detail


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
