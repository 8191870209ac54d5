"""Agentic sessions in a real run (``streamslo run --sessions``, Locust, real sockets) against
an adversarial server whose broken steps are known: every step's outcome and every session's
verdict must match it, and a broken step's session is aborted as configured."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import threading
from pathlib import Path

import pandas as pd
import pytest

from tests.loadgen.helpers import REPO, streamslo_run

pytestmark = pytest.mark.load


async def _handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Chat streams: a request whose last message holds [cut] is cut after 2 tokens, one with
    [stop] ends after 2 tokens with finish_reason stop; any other gets max_tokens tokens."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        body = await reader.readexactly(length) if length else b""
        if head.startswith(b"GET /v1/models"):
            data = b'{"object":"list","data":[{"id":"m","object":"model","owned_by":"test"}]}'
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(data), data)
            )
            await writer.drain()
            return
        req = json.loads(body)
        last = req["messages"][-1]["content"]
        n = int(req["max_tokens"])
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
        )
        sent = 2 if ("[cut]" in last or "[stop]" in last) else n
        for i in range(1, sent + 1):
            finish = None
            if i == sent and "[cut]" not in last:
                finish = "stop" if "[stop]" in last else "length"
            chunk = {
                "choices": [{"index": 0, "delta": {"content": f"t{i} "}, "finish_reason": finish}]
            }
            writer.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            await writer.drain()
            await asyncio.sleep(0.01)
        if "[cut]" not in last:
            writer.write(b"data: [DONE]\n\n")
        await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, ValueError):
        pass
    finally:
        writer.close()


@pytest.fixture
def adversary():
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    box: dict[str, object] = {}

    async def main() -> None:
        server = await asyncio.start_server(_handle, "127.0.0.1", 0)
        box["port"] = server.sockets[0].getsockname()[1]
        box["server"] = server
        ready.set()
        with contextlib.suppress(asyncio.CancelledError):
            await server.serve_forever()

    t = threading.Thread(target=lambda: loop.run_until_complete(main()), daemon=True)
    t.start()
    ready.wait(10)
    yield f"http://127.0.0.1:{box['port']}"
    loop.call_soon_threadsafe(box["server"].close)  # type: ignore[attr-defined]
    t.join(10)
    loop.close()


SESSIONS = [
    # s1: a clean chain -> whole
    {"session": "s1", "step": "a", "input": "plan"},
    {
        "session": "s1",
        "step": "b",
        "parents": ["a"],
        "wait_s": 0.1,
        "input": "tool result",
        "tool": True,
    },
    {"session": "s1", "step": "c", "parents": ["b"], "input": "answer"},
    # s2: its middle step is cut -> broken, the last never sent
    {"session": "s2", "step": "a", "input": "plan"},
    {"session": "s2", "step": "b", "parents": ["a"], "input": "tool result [cut]"},
    {"session": "s2", "step": "c", "parents": ["b"], "input": "answer"},
    # s3: two subagents, one stops early (silent truncation) -> broken, the join never sent
    {"session": "s3", "step": "root", "input": "plan"},
    {"session": "s3", "step": "x", "parents": ["root"], "wait_s": 0.05, "input": "sub x"},
    {"session": "s3", "step": "y", "parents": ["root"], "wait_s": 0.05, "input": "sub y [stop]"},
    {"session": "s3", "step": "join", "parents": ["x", "y"], "input": "join"},
    # s4: whole, with tool time
    {"session": "s4", "step": "a", "input": "plan"},
    {"session": "s4", "step": "b", "parents": ["a"], "wait_s": 0.2, "input": "tool", "tool": True},
]


def test_every_step_and_session_is_judged_as_the_server_broke_it(adversary, tmp_path: Path):
    f = tmp_path / "sessions.jsonl"
    f.write_text("".join(json.dumps(s) + "\n" for s in SESSIONS))
    out = tmp_path / "run"
    slo = tmp_path / "slo.toml"
    slo.write_text('[thresholds]\nsession_success_rate = ["rate>0.9"]\nsessions = ["count>=4"]\n')
    r = streamslo_run(
        adversary,
        out,
        "--sessions",
        str(f),
        "--users",
        "4",
        "--duration",
        "6s",
        "--max-tokens",
        "6",
        "--slo",
        str(slo),
        timeout=120,
    )
    assert (out / "summary.json").exists(), r.stdout + r.stderr
    s = pd.read_csv(out / "streams.csv")
    got = {(row.session_id, row.step_id): row.outcome for row in s.itertuples()}
    assert got == {
        ("s1", "a"): "ok",
        ("s1", "b"): "ok",
        ("s1", "c"): "ok",
        ("s2", "a"): "ok",
        ("s2", "b"): "truncated",
        ("s3", "root"): "ok",
        ("s3", "x"): "ok",
        ("s3", "y"): "silent_truncation",
        ("s4", "a"): "ok",
        ("s4", "b"): "ok",
    }
    assert set(s["session_steps"]) == {2, 3, 4}
    depth = {(row.session_id, row.step_id): row.depth for row in s.itertuples()}
    assert depth[("s3", "root")] == 1 and depth[("s3", "y")] == 2 and depth[("s1", "c")] == 3
    # A step's schedule lag is the generator's alone: measured from when its parents allowed it.
    lag = s.loc[s["wait_ms"].notna(), "schedule_lag_ms"]
    assert lag.notna().all() and (lag < 1000).all()
    summary = json.loads((out / "summary.json").read_text())["sessions"]
    assert summary["sessions"] == 4 and summary["whole"] == 2
    assert summary["success_rate"] == 0.5
    assert "sessions  4 ended, 2 whole" in r.stdout
    assert summary["steps_not_sent"] == 2 and "2 later steps not sent" in r.stdout
    # The session SLO fails the run, in run and in verify alike.
    assert r.returncode == 99, r.stdout[-2000:] + r.stderr[-2000:]
    v = subprocess.run(
        [sys.executable, "-m", "streamslo", "verify", str(out), "--slo", str(slo)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert v.returncode == 99 and "session_success_rate" in v.stdout, v.stdout + v.stderr


def test_sessions_arrive_at_the_files_times(adversary, tmp_path: Path):
    f = tmp_path / "timed.jsonl"
    rows = []
    for i, at in enumerate((0.0, 1.0, 2.5)):
        rows.append({"session": f"t{i}", "step": "a", "input": "plan", "at_s": at})
        rows.append(
            {"session": f"t{i}", "step": "b", "parents": ["a"], "wait_s": 0.1, "input": "go"}
        )
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "run"
    r = streamslo_run(
        adversary,
        out,
        "--sessions",
        str(f),
        "--session-arrivals",
        "trace",
        "--duration",
        "5s",
        "--max-tokens",
        "4",
        timeout=120,
    )
    assert (out / "streams.csv").exists(), r.stdout + r.stderr
    s = pd.read_csv(out / "streams.csv")
    assert (s["outcome"] == "ok").all() and len(s) == 6
    roots = s[s["step_id"] == "a"].sort_values("session_id")
    at = roots["scheduled_at"].to_numpy()
    assert at[1] - at[0] == pytest.approx(1.0, abs=0.01)
    assert at[2] - at[0] == pytest.approx(2.5, abs=0.01)
    # Every step's start is measured from its schedule: the roots' from their arrival.
    assert roots["schedule_lag_ms"].notna().all() and (roots["schedule_lag_ms"] < 1000).all()
