"""What a run says to the person who started it: the top error texts, where its results went
and what to run next, a path it cannot write, a master that waits for its workers, and an
invalid-run verdict that names instant failures."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from streamslo.runfiles.finalize import finalize
from tests.faulty.process import unused_port

REPO = Path(__file__).resolve().parents[2]


def streamslo(*args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streamslo", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )


def test_a_run_prints_its_top_errors_then_where_its_results_are(
    faulty_server, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    r = streamslo(
        "run",
        "--host",
        faulty_server.base_url,
        "--out",
        str(out),
        "--model",
        "truncated_close",
        "--users",
        "2",
        "--duration",
        "2",
        "--max-tokens",
        "6",
        "--progress",
        "off",
        "--allow-invalid",
    )
    assert r.returncode == 99, r.stderr
    summary = json.loads((out / "summary.json").read_text())
    n = summary["outcomes"]["truncated"]
    assert n > 0
    (group,) = summary["top_errors"]["truncated"]
    assert group == {
        "error": "connection closed mid-body",
        "count": n,
        "cause": group["cause"],
        "texts": 1,
    }
    assert group["cause"] in ("cut", "no_terminal")
    lines = r.stdout.splitlines()
    assert "top errors (grouped by outcome, cause and text with numbers masked)" in lines
    assert any(
        line.split()
        == ["truncated", f"({group['cause']})", f"{n:,}", "connection", "closed", "mid-body"]
        for line in lines
    )
    assert f"results: {out}" in lines
    assert any(f"streamslo verify {out} " in line for line in lines)
    assert any(f"streamslo report {out} " in line for line in lines)
    # the preflight saw the same cut stream, said so, and let the run go on
    assert "preflight sse" in r.stderr and "the run goes on" in r.stderr
    assert json.loads((out / "run.json").read_text())["preflight"][0]["outcome"] == "truncated"


def test_an_invalid_run_names_requests_that_failed_at_once(tmp_path: Path) -> None:
    out = tmp_path / "run"
    r = streamslo(
        "run",
        "--host",
        f"http://127.0.0.1:{unused_port()}",
        "--out",
        str(out),
        "--no-preflight",
        "--users",
        "2",
        "--duration",
        "1",
        "--progress",
        "off",
        "--quiet",
        "--allow-invalid",
    )
    assert r.returncode == 99, r.stderr
    # As if the generator had been busy the whole run (it is, at thousands of refusals a second).
    for proc in (out / "procs").glob("*.json"):
        doc = json.loads(proc.read_text())
        doc["cpu_busy_fraction"] = 0.95
        proc.write_text(json.dumps(doc))
    finalize(out, {})
    run = json.loads((out / "run.json").read_text())
    summary = json.loads((out / "summary.json").read_text())
    n = summary["requests"]
    assert run["valid"] is False
    assert run["invalid_reason"].startswith(
        f"all {n:,} requests failed before any byte: ConnectionRefusedError: [Errno 111] Connection refused"
    )
    assert "not slow" in run["invalid_reason"] and "above 90% of a core" in run["invalid_reason"]
    assert summary["invalid_reason"] == run["invalid_reason"]


@pytest.mark.parametrize("where", ["under-a-file", "a-file", "proc"])
def test_an_out_that_cannot_be_written_exits_2_with_the_path(
    faulty_server, tmp_path: Path, where: str
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    out = {
        "under-a-file": blocker / "run",
        "a-file": blocker,
        "proc": Path("/proc/streamslo-nowhere"),
    }[where]
    r = streamslo("run", "--host", faulty_server.base_url, "--out", str(out), "--duration", "1")
    assert r.returncode == 2, r.stderr
    assert f"--out {out}" in r.stderr and "Traceback" not in r.stderr


def test_a_master_waiting_for_its_workers_says_so(faulty_server, tmp_path: Path) -> None:
    port = unused_port()
    cmd = [
        sys.executable,
        "-m",
        "streamslo",
        "run",
        "--host",
        faulty_server.base_url,
        "--out",
        str(tmp_path / "m"),
        "--master",
        "--expect-workers",
        "2",
        "--master-bind-port",
        str(port),
        "--duration",
        "3",
        "--progress",
        "plain",
        "--progress-interval",
        "1",
    ]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO
    )
    try:
        assert proc.stderr is not None
        deadline = time.monotonic() + 30
        seen = ""
        while time.monotonic() < deadline and "waiting for" not in seen:
            seen += proc.stderr.readline()
        assert f"master waiting for 2 workers on 127.0.0.1:{port}" in seen
        assert "--worker --master-host HOST" in seen
        assert "ETA" not in seen  # no countdown of a run that has not begun
    finally:
        proc.terminate()  # our own child: it finalizes and exits
        proc.communicate(timeout=60)


@pytest.mark.parametrize("command", ["sweep", "report"])
def test_other_commands_name_a_path_they_cannot_write(tmp_path: Path, command: str) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    if command == "sweep":
        r = streamslo(
            "sweep",
            "--host",
            f"http://127.0.0.1:{unused_port()}",
            "--rates",
            "1",
            "--out",
            str(blocker / "sweep"),
        )
    else:
        # A hand-built results directory (no load run needed to reach the unwritable --out).
        from tests.reports.conftest import write_fixed

        run = write_fixed(tmp_path / "run").path
        r = streamslo("report", str(run), "--out", str(blocker / "report.html"))
    assert r.returncode == 2, r.stderr
    assert str(blocker) in r.stderr and "Traceback" not in r.stderr
    assert "is a file" in r.stderr or "a file is there" in r.stderr
