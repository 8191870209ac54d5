"""Locust's own distributed mode: a master and workers produce one results directory holding
every stream once.

Workers on other hosts share no disk with the master: here each worker runs in its own empty
working directory with its own TMPDIR, gets no ``--results-dir``, and must not write a file;
its streams reach the master over Locust's messaging, and only the master's directory holds
results."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

from tests.faulty.process import unused_port
from tests.loadgen.helpers import LOCUSTFILE, REPO, gaps, stop_process, streams

pytestmark = pytest.mark.load

BUSY_LOCUSTFILE = Path(__file__).with_name("busy_locustfile.py")
LOCUST = [sys.executable, "-m", "locust"]


@dataclass
class Host:
    """A folder standing for another machine: an empty working directory and its own TMPDIR."""

    root: Path

    def __post_init__(self) -> None:
        self.cwd.mkdir(parents=True)
        self.tmp.mkdir()

    @property
    def cwd(self) -> Path:
        return self.root / "cwd"

    @property
    def tmp(self) -> Path:
        return self.root / "tmp"

    def env(self) -> dict[str, str]:
        return dict(os.environ, TMPDIR=str(self.tmp))

    def files(self) -> list[str]:
        """Every file and folder written under this host's directories."""
        return sorted(
            str(p.relative_to(self.root)) for d in (self.cwd, self.tmp) for p in d.rglob("*")
        )


@dataclass
class Worker:
    host: Host
    log: Path
    process: subprocess.Popen[bytes]

    def sent(self) -> tuple[str | None, int]:
        """(its tag, how many streams it had sent) from its debug log."""
        found = re.findall(
            r"worker (\S+) sent batch \d+: \d+ records \((\d+) in all\)",
            self.log.read_text(errors="replace"),
        )
        return (found[-1][0], int(found[-1][1])) if found else (None, 0)


def start_worker(tmp_path: Path, name: str, port: int, locustfile: Path = LOCUSTFILE) -> Worker:
    """A bare worker: the locustfile and the master's address, nothing else (no results dir)."""
    host = Host(tmp_path / name)
    log = tmp_path / f"{name}.log"  # outside the host's folders: the test reads it
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            [
                *LOCUST,
                "-f",
                str(locustfile),
                "--worker",
                "--master-host",
                "127.0.0.1",
                "--master-port",
                str(port),
                "--loglevel",
                "DEBUG",
            ],
            cwd=host.cwd,
            env=host.env(),
            stdout=subprocess.DEVNULL,
            stderr=fh,
        )
    return Worker(host, log, proc)


def stop_workers(workers: list[Worker]) -> None:
    for w in workers:  # they leave with the master; stop any that did not
        if w.process.poll() is None:
            stop_process(w.process, timeout=20)


def tags(s: pd.DataFrame) -> pd.Series:
    return s["stream_id"].str.rsplit("-", n=1).str[0]


def test_master_and_bare_workers(faulty_server, tmp_path):
    port = str(unused_port())
    out = tmp_path / "run"
    locust = [*LOCUST, "-f", str(LOCUSTFILE)]
    workers = [
        subprocess.Popen(
            [*locust, "--worker", "--master-host", "127.0.0.1", "--master-port", port],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(2)
    ]
    try:
        master = subprocess.run(
            [
                *locust,
                "--master",
                "--master-bind-host",
                "127.0.0.1",
                "--master-bind-port",
                port,
                "--expect-workers",
                "2",
                "--headless",
                "-u",
                "6",
                "-r",
                "6",
                "-t",
                "5s",
                "--host",
                faulty_server.base_url,
                "--model",
                "timed",
                "--max-tokens",
                "4",
                "--protocol",
                "mixed",
                "--results-dir",
                str(out),
                "--stop-timeout",
                "3",
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=90,
        )
        assert master.returncode == 0, master.stderr[-2000:]
    finally:
        for w in workers:
            try:
                w.wait(timeout=20)
            except subprocess.TimeoutExpired:
                w.kill()
                w.wait()
    s = streams(out)
    assert len(s) > 10 and s["stream_id"].is_unique
    assert set(s["protocol"]) == {"sse", "ws"}  # the master's --protocol reached the workers
    assert tags(s).nunique() == 2  # both workers' streams
    assert set(gaps(out)["stream_id"]) == set(s["stream_id"])
    summary = json.loads((out / "summary.json").read_text())
    assert summary["requests"] == len(s)


def test_workers_on_other_hosts_write_nothing_and_every_stream_reaches_the_master(
    faulty_server, tmp_path
):
    """Two workers, one of them saturated; the master counts with Locust's own statistics."""
    port = unused_port()
    master = Host(tmp_path / "master")
    healthy = start_worker(tmp_path, "w1", port)
    busy = start_worker(tmp_path, "w2", port, BUSY_LOCUSTFILE)
    try:
        r = subprocess.run(
            [
                *LOCUST,
                "-f",
                str(LOCUSTFILE),
                "--master",
                "--master-bind-host",
                "127.0.0.1",
                "--master-bind-port",
                str(port),
                "--expect-workers",
                "2",
                "--headless",
                "-u",
                "8",
                "-r",
                "8",
                "-t",
                "6s",
                "--stop-timeout",
                "5",
                "--host",
                faulty_server.base_url,
                "--model",
                "timed",
                "--max-tokens",
                "10",
                "--protocol",
                "mixed",
                "--results-dir",
                "run",
                "--json",
            ],
            cwd=master.cwd,
            env=master.env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        (tmp_path / "master.log").write_text(r.stderr + r.stdout)
        assert r.returncode == 0, r.stderr[-3000:]
    finally:
        stop_workers([healthy, busy])
    # The workers wrote nothing, anywhere they could; the master wrote only its directory.
    assert healthy.host.files() == [] and busy.host.files() == []
    assert sorted(p.name for p in master.cwd.iterdir()) == ["run"]
    out = master.cwd / "run"
    s = streams(out)
    assert s["stream_id"].is_unique
    assert set(tags(s)) == {healthy.sent()[0], busy.sent()[0]}
    # Every stream Locust counted is a row, once (cancelled streams are not reported to Locust).
    locust_streams = sum(e["num_requests"] for e in json.loads(r.stdout) if e["name"] == "stream")
    assert locust_streams > 10
    assert (s["outcome"] != "cancelled").sum() == locust_streams
    # Every token's gap is there: n tokens, n - 1 gaps, for every stream that ended ok.
    ok = s[s["outcome"] == "ok"].set_index("stream_id")
    per_stream = gaps(out).groupby("stream_id").size()
    assert (per_stream.reindex(ok.index).fillna(0) == ok["tokens"] - 1).all()
    assert (ok["tokens"] == 10).all()
    run = json.loads((out / "run.json").read_text())
    assert run["complete"] is True and run["lost_workers"] == []
    assert run["relay"]["workers"] == 2 and run["relay"]["records"] == len(s)
    # Both workers' generator figures came to the master; the saturated one makes the run
    # invalid, by name.
    assert run["generator"]["processes"] == 2
    assert run["valid"] is False
    busy_worker = next(
        w
        for w in json.loads((out / "relay.json").read_text())["per_worker"]
        if w["tag"] == busy.sent()[0]
    )
    assert f"worker {busy_worker['worker']} (process {busy.sent()[0]})" in run["invalid_reason"]


def _get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read())


def test_a_worker_killed_mid_run(faulty_server, tmp_path):
    """SIGKILL one of two workers mid-run: the run still finalizes, says which worker was lost
    and when, and holds every stream that worker had sent."""
    port = unused_port()
    master = Host(tmp_path / "master")
    keep, kill = start_worker(tmp_path, "w1", port), start_worker(tmp_path, "w2", port)
    out = master.cwd / "run"
    cmd = [
        sys.executable,
        "-m",
        "streamslo",
        "run",
        "--host",
        faulty_server.base_url,
        "--out",
        "run",
        "--allow-invalid",
        "--model",
        "timed",
        "--users",
        "8",
        "--duration",
        "10",
        "--max-tokens",
        "20",
        "--drain",
        "3",
        "--master",
        "--expect-workers",
        "2",
        "--master-bind-port",
        str(port),
    ]
    run_proc = subprocess.Popen(
        cmd,
        cwd=master.cwd,
        env=master.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 45
        while time.monotonic() < deadline:  # both workers have streams at the master: kill one
            relay = out / "relay.json"
            if relay.exists() and kill.sent()[0] is not None:
                per = {w["tag"]: w["records"] for w in json.loads(relay.read_text())["per_worker"]}
                if per.get(kill.sent()[0], 0) > 0 and len(per) == 2:
                    break
            time.sleep(0.2)
        else:
            pytest.fail("the workers' streams never reached the master")
        kill.process.send_signal(signal.SIGKILL)
        kill.process.wait()
        killed_tag, sent_before_kill = kill.sent()
        stdout, stderr = run_proc.communicate(timeout=90)
    finally:
        if run_proc.poll() is None:
            stop_process(run_proc)  # type: ignore[arg-type]
        stop_workers([keep, kill])
    assert run_proc.returncode == 0, stdout + stderr
    run = json.loads((out / "run.json").read_text())
    assert run["complete"] is True
    lost = run["lost_workers"]
    assert [w["tag"] for w in lost] == [killed_tag]
    assert (
        re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", lost[0]["at"])
        and lost[0]["last_seen"] <= lost[0]["at"]
    )
    assert isinstance(lost[0]["streams_in_flight"], int) and 0 <= lost[0]["streams_in_flight"] <= 8
    s = streams(out)
    assert s["stream_id"].is_unique
    mine = s[tags(s) == killed_tag]
    # Every stream it sent before it died is there (and nothing it did not send).
    assert len(mine) >= sent_before_kill > 0
    assert len(mine) == lost[0]["records"]
    assert set(gaps(out)["stream_id"]) >= set(mine.loc[mine["tokens"] > 1, "stream_id"])
    survivor = next(
        w
        for w in json.loads((out / "relay.json").read_text())["per_worker"]
        if w["tag"] == keep.sent()[0]
    )
    assert survivor["final"] is True
    assert f"LOST WORKER {lost[0]['worker']}" in stdout  # the summary table says so
    assert keep.host.files() == [] and kill.host.files() == []
    report = subprocess.run(
        [sys.executable, "-m", "streamslo", "report", "run", "--out", "report.html"],
        cwd=master.cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert report.returncode == 0, report.stderr
    assert (
        f"LOST WORKER {lost[0]['worker']}" in (master.cwd / "report.md").read_text()
    )  # the report's banner


def test_the_web_ui_tab_merges_every_worker(faulty_server, tmp_path):
    """The Stream SLOs tab on the master counts the streams of both workers."""
    port, web = unused_port(), unused_port()
    master = Host(tmp_path / "master")
    workers = [start_worker(tmp_path, "w1", port), start_worker(tmp_path, "w2", port)]
    ui = subprocess.Popen(
        [
            *LOCUST,
            "-f",
            str(LOCUSTFILE),
            "--master",
            "--master-bind-host",
            "127.0.0.1",
            "--master-bind-port",
            str(port),
            "--expect-workers",
            "2",
            "--autostart",
            "-u",
            "4",
            "-r",
            "4",
            "--run-time",
            "60s",
            "--web-host",
            "127.0.0.1",
            "--web-port",
            str(web),
            "--host",
            faulty_server.base_url,
            "--model",
            "timed",
            "--max-tokens",
            "8",
            "--results-dir",
            "run",
            "--stop-timeout",
            "3",
        ],
        cwd=master.cwd,
        env=master.env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{web}"

    def live_ok() -> int:
        rows = {r["name"]: r["value"] for r in _get_json(base + "/streamslo/live")["rows"]}
        return int(rows["outcome: ok"])

    try:
        deadline = time.monotonic() + 45
        while time.monotonic() < deadline:
            try:
                stats = _get_json(base + "/stats/requests")
                running = [w for w in stats.get("workers", []) if w["user_count"] > 0]
                if len(running) == 2 and live_ok() >= 10:
                    break
            except OSError:
                pass
            time.sleep(0.5)
        else:
            pytest.fail("the web UI never showed both workers' streams")
        urllib.request.urlopen(
            urllib.request.Request(base + "/stop", method="POST"), timeout=10
        ).close()
        # Once stopped, the tab's count converges on the rows the master wrote for both workers.
        deadline, seen = time.monotonic() + 30, (-1, -1)
        while time.monotonic() < deadline:
            s = streams(master.cwd / "run")
            seen = (live_ok(), int((s["outcome"] == "ok").sum()))
            if seen[0] == seen[1] and tags(s[s["outcome"] == "ok"]).nunique() == 2:
                break
            time.sleep(0.5)
        else:
            pytest.fail(f"the tab's ok streams never matched the rows of both workers: {seen}")
    finally:
        stop_process(ui, timeout=30)  # type: ignore[arg-type]
        stop_workers(workers)
    assert seen[0] >= 10
