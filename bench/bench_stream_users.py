"""How many 50 tokens/s streams one client core holds with client-added lateness p99 < 10 ms:
streamslo's stream users (SSE and WebSocket) beside plain Locust ``HttpUser`` + ``requests``,
Locust ``FastHttpUser`` with the incremental ``readline`` recipe, the real asyncio clients
aiohttp, httpx and websockets, and an idealised asyncio line reader.

Setup, per cell (client x concurrency), side by side in one run:

- a lean token emitter (``bench/_emitter.py``) pinned to core 0 (``taskset -c 0``): 100-token
  streams, token k written at ``t_req + k * 20 ms`` (absolute schedule), chunked SSE;
- one client process pinned to core 1 (``taskset -c 1``), N users/streams started at once,
  each stream followed by the next at once (closed loop, no think time), for ``--seconds``:

  * ``streamslo per-gap`` / ``streamslo per-stream``: ``python -m locust -f
    locustfiles/streaming_locustfile.py --headless ... --results-dir DIR --max-tokens 100
    --itl-events per-gap|per-stream`` (``streamslo run`` does not expose ``--itl-events``; it
    runs the same users in one headless Locust process);
  * ``streamslo WS``: the same with ``--protocol ws --itl-events per-stream`` (the suite's
    WebSocket user: one connection per user, one request after another);
  * ``HttpUser+requests``: a bench-only locustfile (written to a temp file) with
    ``self.client.post(..., stream=True)`` and ``iter_lines()``, one ``time.time()`` per token line;
  * ``FastHttpUser readline``: the same with Locust's ``FastHttpUser`` (geventhttpclient) and
    ``response.stream.readline(b"\\n")`` per line (``iter_content``/``iter_lines`` wait for 1 KB
    there); neither Locust row decodes JSON (their best case);
  * ``asyncio websockets``: one ``websockets`` asyncio connection per user, one request after
    another on it, each message's JSON decoded (emit epoch from ``id``);
  * ``asyncio aiohttp``: one shared ``aiohttp.ClientSession`` (``TCPConnector(limit=0)``, no
    connection cap), ``session.post(...)`` and ``async for line in resp.content``; per ``data:``
    line one ``time.time()``, then what a real client does: strip the SSE field and
    ``json.loads`` the chunk (emit epoch from the decoded ``id``, the delta's content read);
  * ``asyncio httpx``: one shared ``httpx.AsyncClient`` (``Limits(max_connections=None)``),
    ``client.stream("POST", ...)`` and ``aiter_lines()``; per ``data:`` line the same as aiohttp;
  * ``vLLM bench serve`` (the peer row): vLLM's own benchmark client (``vllm bench serve
    --backend openai-chat --max-concurrency N --request-rate inf --save-detailed``, random
    prompts) from a venv of its own (``--peer-venv``, default ``$STREAMSLO_VLLM_VENV``; a
    tokenizer directory ``--peer-model``, default ``$STREAMSLO_VLLM_MODEL``; ``--install-peer
    DIR`` makes both with ``tests/realserver/vllm_setup.py``), run by ``bench/_vllm_peer.py``,
    which turns its per-request TTFT and ITLs into receive epochs. vLLM keeps no chunk ids: its
    requests are paired with the emitter's streams in start order, and the emitter sends no
    size-tag comment to it (vLLM's client strips each read's trailing blank line and then never
    finds the end of an event that followed a comment: every request failed). CPU is vLLM's
    process, a child of the wrapper. Without a vLLM venv the row is skipped with a note;
  * ``asyncio raw`` (shown as "asyncio raw (no JSON, idealised)"): ``asyncio.open_connection``,
    HTTP/1.1 ``Connection: close``, ``readline()``, one ``time.time()`` per ``data:`` line and
    no JSON decode at all. No real client is this lean: it is a reference floor, not a rival.

  The plain clients live in ``bench/_clients.py`` (asyncio: ``--lib aiohttp|httpx|raw|websockets``);
  ``aiohttp`` is a bench-only dependency (``pip install aiohttp``): without it that row is
  skipped with a printed note. ``HttpUser+requests`` decodes no JSON (its best case);
  streamslo's users parse HTTP chunking and SSE and decode every chunk's JSON to classify the
  stream, as aiohttp and httpx rows do.

Lateness (the same definition for every client): lateness = client receive epoch of token k
minus the emitter's write epoch of token k (both ``time.time()`` on one machine), so only the
client-added delay counts, whatever the emitter's own jitter.

- Plain clients: the write epoch is in each chunk (``id`` = write epoch, 6 decimals).
- streamslo keeps no chunk ids, so its receive epochs come from its results directory
  (``streams.csv``: ``started_at + ttft_ms`` for token 1; ``gaps.parquet``: ``run.json``
  ``start_epoch + t`` for the gap before token k+1, index k) and its write epochs from the
  emitter's log (every write epoch of every stream, dumped at SIGTERM). A results row is tied to
  its emitter stream exactly: every response starts with an SSE comment of ``seq % 1024`` bytes,
  so a complete stream's body size (``bytes`` in ``streams.csv``) names ``seq`` modulo 1024,
  and the one emitter stream with that size whose request arrived between ``started_at`` and
  the first token is the one (at most ~250 streams start per second here, so the size recurs
  only every ~4 s). Rows that do not match (none expected) are counted as ``unmatched``.

Only streams whose request reached the emitter after ``--warmup`` seconds of load (default
2.5 s: the first round, when all N connect at once while Locust still spawns) and that ended
complete (``ok`` / ``[DONE]``) are in the lateness figures; the same rule for every client.
A secondary figure, ``rel p99``, needs no emitter data: per stream, lateness relative to its
least-late token, ``(recv_k - k * 20 ms) - min_j (recv_j - j * 20 ms)``.

CPU: ``psutil`` ``cpu_percent`` of the client process and of the emitter, sampled every 0.5 s,
averaged over the steady window (warm-up end to the last request start).

A client "sustains" a level when its lateness p99 < 10 ms there; ``capacity`` is the largest such
level before the first failing one, and ``~crossing`` interpolates p99 linearly between the last
passing and first failing level (the estimate used for the ratios).

Summary ratios (streamslo capacity / other's): vs ``HttpUser+requests`` (goal >= 2x); vs
``FastHttpUser readline`` (for information); vs the best real asyncio client, the larger
capacity of aiohttp and httpx (issue 4's goal: >= 1x, no worse); vs the idealised raw reader
(information); and ``streamslo WS`` vs ``asyncio websockets`` (goal >= 1x). The generator's own
goal (issue 12): ``streamslo per-stream`` >= 500 streams per process.

Run (about 5 minutes with the defaults)::

    python bench/bench_stream_users.py [--levels 100,250,500] [--seconds 15] [--json out.json]

``--json`` defaults to ``bench/results/stream_users.json`` (``bench/run_all.py`` renders it into
``bench/RESULTS.md``).
"""

from __future__ import annotations

import argparse
import atexit
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _clients import locustfile
from _harness import (
    BENCH,
    REPO,
    fmt,
    locust_cmd,
    match_streamslo,
    pct,
    prioritise,
    run_against_emitter,
    shown_command,
    workdir,
    write_result,
)

PERIOD = 0.020
MAX_TOKENS = 100
BOUND_MS = 10.0
EMITTER_LAG_MS = 10.0  # a cell whose emitter wrote late beyond this (p99) is flagged: not valid
GOAL_STREAMS = 500  # issue 12: streams per generator process at p99 < 10 ms
CLIENTS = (
    "streamslo per-gap",
    "streamslo per-stream",
    "streamslo WS",
    "HttpUser+requests",
    "FastHttpUser readline",
    "asyncio aiohttp",
    "asyncio httpx",
    "asyncio raw",
    "asyncio websockets",
    "vLLM bench serve",
)
DEFAULT_CLIENTS = (
    "streamslo per-stream",
    "streamslo WS",
    "HttpUser+requests",
    "FastHttpUser readline",
    "asyncio aiohttp",
    "asyncio raw",
    "asyncio websockets",
    "vLLM bench serve",
)
# The real asyncio clients (parse SSE, decode each chunk's JSON); issue 4's "best asyncio client".
REAL_ASYNCIO = ("asyncio aiohttp", "asyncio httpx")
# "asyncio raw" is not a real client: a bare line reader that decodes nothing (an idealised floor).
LABELS = {"asyncio raw": "asyncio raw (no JSON, idealised)"}
# Optional third-party modules a client row needs; a row whose module is missing is skipped.
NEEDS = {"asyncio aiohttp": "aiohttp", "asyncio httpx": "httpx", "asyncio websockets": "websockets"}


#: The peer row (``vLLM bench serve``): vLLM's venv and a tokenizer directory (--peer-venv,
#: --peer-model; bench/_vllm_peer.py).
PEER: dict[str, Path] = {}
PEER_ROW = "vLLM bench serve"


#: --baseline: a revision -> the directory holding its ``streamslo/`` (``git archive``).
BASELINES: dict[str, Path] = {}


def _export(rev: str) -> Path:
    """``streamslo/`` at ``rev`` in a temp directory, imported first through ``PYTHONPATH``."""
    import subprocess
    import tempfile

    out = Path(tempfile.mkdtemp(prefix="streamslo-base-"))
    tar = subprocess.run(
        ["git", "-C", str(BENCH.parent), "archive", rev, "streamslo", "locustfiles"],
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(out)], input=tar, check=True)
    return out


def _export_tree() -> Path:
    """The working tree's ``streamslo/`` copied to a temp directory (the "current" rows of a
    --baseline run: editing the tree while the bench runs changes nothing)."""
    import shutil
    import tempfile

    out = Path(tempfile.mkdtemp(prefix="streamslo-cur-"))
    for part in ("streamslo", "locustfiles"):
        shutil.copytree(BENCH.parent / part, out / part)
    return out


def with_baseline(rev: str, clients: list[str]) -> list[str]:
    """``--baseline REV``: copies of ``rev``'s code and of the working tree (removed at exit),
    and each streamslo client twice, ``NAME`` and ``NAME @REV``, side by side."""
    import shutil

    BASELINES[rev] = _export(rev)
    BASELINES[""] = _export_tree()
    for path in BASELINES.values():
        atexit.register(shutil.rmtree, path, True)
    return [v for c in clients for v in ((c, f"{c} @{rev}") if c.startswith("streamslo") else (c,))]


def _label(client: str) -> str:
    return LABELS.get(client, client)


def _client_cmd(
    client: str, url: str, users: int, seconds: int, work: Path
) -> tuple[list[str], dict[str, str]]:
    import os

    env = dict(os.environ)
    code = BASELINES.get("")  # --baseline: the working tree's code, copied when the run began
    if " @" in client:  # the same client on a baseline revision's code (--baseline)
        client, rev = client.split(" @", 1)
        code = BASELINES[rev]
    if code is not None:
        env["PYTHONPATH"] = str(code) + os.pathsep + env.get("PYTHONPATH", "")
    if client.startswith("streamslo"):
        mode = "per-stream" if client == "streamslo WS" else client.split()[-1]
        proto = ["--protocol", "ws"] if client == "streamslo WS" else []
        # A copy's own locustfile, run from the copy: Locust puts its working directory first
        # on sys.path, and from this repository that would import the working tree's code.
        base = REPO if code is None else code
        cmd = locust_cmd(
            url,
            users,
            seconds,
            "-f",
            str(base / "locustfiles" / "streaming_locustfile.py"),
            "--results-dir",
            str(work / "results"),
            "--max-tokens",
            str(MAX_TOKENS),
            "--itl-events",
            mode,
            *proto,
        )
        if code is not None:
            # -P: no working directory first on sys.path, so the copy on PYTHONPATH is what
            # runs (python -m puts the working directory before PYTHONPATH).
            cmd.insert(1, "-P")
            env["STREAMSLO_BENCH_CWD"] = str(code)
    elif client in ("HttpUser+requests", "FastHttpUser readline"):
        kind = client.split("+")[0].split()[0]
        lf = work / f"plain_{kind}_locustfile.py"
        lf.write_text(locustfile(kind))
        env["BENCH_OUT"] = str(work / "client.json")
        env["BENCH_MAX_TOKENS"] = str(MAX_TOKENS)
        cmd = locust_cmd(url, users, seconds, "-f", str(lf))
    else:
        # Plain clients and the peer: a script of bench/ with the same run arguments.
        if client == PEER_ROW:
            script = "_vllm_peer.py"
            own = ["--venv", str(PEER["venv"]), "--tokenizer", str(PEER["model"])]
        else:
            lib = client.split()[-1]  # aiohttp | httpx | raw | websockets
            script, own = "_clients.py", ["--lib", lib]
        cmd = [
            sys.executable,
            str(BENCH / script),
            *own,
            "--url",
            url,
            "--users",
            str(users),
            "--seconds",
            str(seconds),
            "--max-tokens",
            str(MAX_TOKENS),
            "--out",
            str(work / "client.json"),
        ]
    return cmd, env


# --------------------------------------------------------------------------- analysis
def _streams_plain(path: Path) -> list[dict[str, Any]]:
    """[{t0, done, recv[], emit[]}] from a plain client's dump."""
    if not path.exists():
        return []
    rows: list[dict[str, Any]] = json.loads(path.read_text())
    return rows


def analyse(
    streams: list[dict[str, Any]], emitted: list[dict[str, Any]], warmup: float
) -> dict[str, Any]:
    """Lateness (receive - emit) of every token of the complete streams started after warm-up."""
    import numpy as np

    t_first = min((s["t_req"] for s in emitted), default=0.0)
    cut = t_first + warmup
    late: list[Any] = []
    rel: list[Any] = []
    for s in streams:
        if not s["done"] or s["t0"] < cut - 0.05 or not s["recv"]:
            continue
        recv = np.asarray(s["recv"], dtype=float)
        emit = np.asarray(s["emit"], dtype=float)
        late.append(recv - emit)
        shifted = recv - np.arange(1, len(recv) + 1) * PERIOD
        rel.append(shifted - shifted.min())
    lat = np.concatenate(late) * 1000.0 if late else np.array([])
    rl = np.concatenate(rel) * 1000.0 if rel else np.array([])
    # The emitter's own lateness: each write against its absolute schedule.
    ew = [
        np.asarray(s["w"]) - (s["t_req"] + PERIOD * np.arange(1, len(s["w"]) + 1))
        for s in emitted
        if s["w"]
    ]
    ewl = np.concatenate(ew) * 1000.0 if ew else np.array([])
    return {
        "lateness_p50_ms": pct(lat, 50),
        "lateness_p99_ms": pct(lat, 99),
        "lateness_max_ms": float(lat.max()) if len(lat) else None,
        "negative_lateness": int((lat < -0.5).sum()),
        "rel_p99_ms": pct(rl, 99),
        "tokens_measured": len(lat),
        "streams_measured": len(late),
        "emitter_write_late_p99_ms": pct(ewl, 99),
        "emitter_write_late_max_ms": float(ewl.max()) if len(ewl) else None,
    }


def run_cell(
    client: str, users: int, seconds: int, warmup: float, keep: bool, nice: int = 0
) -> dict[str, Any]:
    """One client at one concurrency against a fresh emitter; its lateness, CPU and counts."""
    with workdir(client.split()[0][:8] + f"-{users}", keep) as work:
        cmd, env = _client_cmd(client, "{url}", users, seconds, work)
        # The peer's client is a child of its wrapper: sum it in.
        peer = client == PEER_ROW
        cwd = env.pop("STREAMSLO_BENCH_CWD", None)
        run = run_against_emitter(
            work,
            cmd,
            seconds,
            env=env,
            nice=nice,
            children=peer,
            tag=not peer,
            cwd=Path(cwd) if cwd else None,
        )
        rc, sampler, emitted, t_start = run.rc, run.sampler, run.emitted, run.t_start
        unmatched = 0
        if client.startswith("streamslo"):
            results = work / "results"
            if (results / "run.json").exists():
                streams, unmatched, tokens = match_streamslo(results, emitted)
            else:
                streams, tokens = [], 0
        else:
            streams = _streams_plain(work / "client.json")
            tokens = sum(len(s["recv"]) for s in streams)
            if peer:
                from _vllm_peer import join_emitter

                unmatched = join_emitter(streams, emitted)
        res = analyse(streams, emitted, warmup)
        t_first = min((s["t_req"] for s in emitted), default=t_start)
        t_last = max((s["t_req"] for s in emitted), default=time.time())
        lo, hi = t_first + warmup, t_last
        res.update(
            client=client,
            users=users,
            seconds=seconds,
            rc=rc,
            streams_completed=sum(1 for s in streams if s["done"]),
            streams_emitted=len(emitted),
            tokens_received=tokens,
            unmatched=unmatched,
            client_cpu_pct=sampler.mean_cpu("client", lo, hi),
            emitter_cpu_pct=sampler.mean_cpu("emitter", lo, hi),
            client_preempt_per_s=sampler.rate("client", lo, hi),
            emitter_preempt_per_s=sampler.rate("emitter", lo, hi),
            client_peak_rss_mb=(sampler.peak_rss("client") or 0) / 2**20,
            workdir=str(work) if keep else None,
        )
        if rc not in (0, None) or not res["tokens_measured"]:
            res["log_tail"] = (work / "client.log").read_text()[-1500:]
    return res


# --------------------------------------------------------------------------- report
def _capacity(cells: list[dict[str, Any]]) -> tuple[int | None, float | None, str]:
    """(largest level passing before the first failure, interpolated crossing, text)."""
    cells = sorted(cells, key=lambda c: c["users"])
    prev: dict[str, Any] | None = None
    for c in cells:
        p99 = c["lateness_p99_ms"]
        if p99 is None or p99 >= BOUND_MS:
            if prev is None:
                return None, None, f"< {c['users']}"
            p0 = prev["lateness_p99_ms"]
            x = (
                prev["users"] + (BOUND_MS - p0) / (p99 - p0) * (c["users"] - prev["users"])
                if p99 is not None
                else prev["users"]
            )
            return prev["users"], x, f"{prev['users']} (~{x:.0f})"
        prev = c
    top = cells[-1]["users"] if cells else None
    return top, None, f">= {top}"


def report(cells: list[dict[str, Any]], clients: list[str]) -> tuple[str, dict[str, Any]]:
    lines = [
        "| client | streams | lateness p50 ms | lateness p99 ms | rel p99 ms | streams completed | tokens received | client CPU % | emitter CPU % | emitter write-late p99 ms | preempted/s client, emitter |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for c in sorted(cells, key=lambda c: (c["users"], clients.index(c["client"]))):
        flag = "" if c["lateness_p99_ms"] is not None and c["lateness_p99_ms"] < BOUND_MS else " ✗"
        extra = f" (unmatched {c['unmatched']})" if c["unmatched"] else ""
        el = c["emitter_write_late_p99_ms"]
        lag = " ‡" if el is not None and el > EMITTER_LAG_MS else ""
        lines.append(
            f"| {_label(c['client'])} | {c['users']} | {fmt(c['lateness_p50_ms'], 2)} | {fmt(c['lateness_p99_ms'], 1)}{flag} | "
            f"{fmt(c['rel_p99_ms'], 1)} | {c['streams_completed']}{extra} | {c['tokens_received']} | "
            f"{fmt(c['client_cpu_pct'], 0)} | {fmt(c['emitter_cpu_pct'], 0)} | {fmt(el, 2)}{lag} | "
            f"{fmt(c['client_preempt_per_s'], 0)}, {fmt(c['emitter_preempt_per_s'], 0)} |"
        )
    caps: dict[str, Any] = {}
    lines.append(
        f"\n✗: lateness p99 >= {BOUND_MS:g} ms. ‡: the emitter itself wrote late (p99 > {EMITTER_LAG_MS:g} ms; "
        "the machine is shared): the cell measured a burstier load than asked, read it with care."
    )
    lines += [
        "",
        f"| client | capacity at p99 < {BOUND_MS:g} ms (largest level passing, ~interpolated crossing) |",
        "| --- | --- |",
    ]
    for name in clients:
        level, cross, text = _capacity([c for c in cells if c["client"] == name])
        caps[name] = {"level": level, "crossing": cross, "text": text}
        lines.append(f"| {_label(name)} | {text} |")

    def est(name: str) -> float | None:
        cap = caps.get(name)
        if cap is None:
            return None
        value = cap["crossing"] if cap["crossing"] is not None else cap["level"]
        return None if value is None else float(value)

    ratios: dict[str, Any] = {}
    real = [c for c in REAL_ASYNCIO if c in caps]
    best_real: str | None = None
    if real:
        passing = [c for c in real if est(c) is not None]
        best_real = max(passing, key=lambda c: est(c) or 0.0) if passing else real[0]
    lines.append("")
    if best_real is not None:
        shown = ", ".join(f"{_label(c)} {caps[c]['text']}" for c in real)
        lines.append(
            f"- best real asyncio client (max capacity of {', '.join(real)}): {best_real} ({shown})"
        )
    elif any(c.startswith("streamslo") for c in clients):
        lines.append(
            "- no real asyncio client (aiohttp, httpx) in this run: the issue 4 comparison is not made"
        )

    def compare(ours: str, other: str, name: str, goal: str | None, gv: float | None) -> None:
        a, b = est(ours), est(other)
        notes = []
        if caps[ours]["crossing"] is None and caps[ours]["level"] is not None:
            notes.append("streamslo passed every level: ratio is a lower bound")
        if caps[other]["crossing"] is None and caps[other]["level"] is not None:
            notes.append(f"{_label(other)} passed every level: ratio is an upper bound")
        note = f" ({'; '.join(notes)})" if notes else ""
        if a is None and b is None:
            text, r = (
                f"both fail the lowest level ({caps[ours]['text']}, {caps[other]['text']})",
                None,
            )
        elif a is None:
            text, r = (
                f"streamslo fails the lowest level; {_label(other)} holds {caps[other]['text']}",
                None,
            )
        elif b is None:
            text, r = (
                f"{_label(other)} fails the lowest level; streamslo holds {caps[ours]['text']}",
                None,
            )
        else:
            r = a / b
            text = f"{r:.2f}x{note}"
        if goal is None:
            tail = " (for information, no goal)"
            verdict = ""
        else:
            tail = f" (goal {goal})"
            if r is not None:
                verdict = " — meets goal" if r >= (gv or 0.0) else " — below goal"
            elif a is not None and b is None:
                verdict = " — meets goal"
            elif a is None and b is not None:
                verdict = " — below goal"
            else:
                verdict = " — undecided at these levels"
        ratios[f"{ours} vs {name}"] = r
        lines.append(f"- capacity {ours} vs {name}: {text}{tail}{verdict}")

    for ours in [c for c in clients if c.startswith("streamslo") and c != "streamslo WS"]:
        if "HttpUser+requests" in caps:
            compare(ours, "HttpUser+requests", "HttpUser+requests", ">= 2x", 2.0)
        if "FastHttpUser readline" in caps:
            compare(ours, "FastHttpUser readline", "FastHttpUser readline", None, None)
        if best_real is not None:
            compare(
                ours,
                best_real,
                f"best real asyncio client ({best_real})",
                ">= 1x (no worse, issue 4)",
                1.0,
            )
        if "asyncio raw" in caps:
            compare(ours, "asyncio raw", _label("asyncio raw"), None, None)
    if "streamslo WS" in caps and "asyncio websockets" in caps:
        compare("streamslo WS", "asyncio websockets", "asyncio websockets", ">= 1x (no worse)", 1.0)
    if "streamslo per-stream" in caps:
        got = est("streamslo per-stream")
        cap = caps["streamslo per-stream"]
        bound = (
            " (a lower bound: every level passed)"
            if cap["crossing"] is None and cap["level"]
            else ""
        )
        verdict = "meets goal" if got is not None and got >= GOAL_STREAMS else "below goal"
        held = f"~{fmt(got, 0)}" if got is not None else cap["text"]
        lines.append(
            f"- streamslo per-stream: {held} streams per process at p99 < {BOUND_MS:g} ms{bound} "
            f"(goal >= {GOAL_STREAMS}) — {verdict}"
        )
    return "\n".join(lines), {"capacities": caps, "ratios": ratios, "best_real_asyncio": best_real}


def render(data: dict[str, Any]) -> str:
    """The Markdown section of ``bench/RESULTS.md`` from this bench's JSON."""
    table, _ = report(data["cells"], data["clients"])
    head = (
        f"Command: `{data['command']}`\n\n50 tokens/s per stream, {MAX_TOKENS}-token streams back to back, "
        "emitter pinned to core 0, client to core 1. Lateness = client receive time − emitter write time "
        "(embedded in each chunk, or tied through the emitter's log for streamslo).\n\n"
    )
    tail = "".join(f"\n- skipped: {n}" for n in data.get("skipped", []))
    return head + table + tail


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--levels", default="100,250,500", help="concurrency levels, comma-separated")
    p.add_argument("--seconds", type=int, default=15, help="load seconds per cell")
    p.add_argument("--warmup", type=float, default=2.5, help="leave out streams started this soon")
    p.add_argument(
        "--clients",
        default=",".join(DEFAULT_CLIENTS),
        help=f"which clients, comma-separated (of: {', '.join(CLIENTS)})",
    )
    p.add_argument(
        "--json",
        default="",
        help="write the results here (default bench/results/stream_users.json)",
    )
    p.add_argument("--keep", action="store_true", help="keep each cell's work directory")
    p.add_argument(
        "--baseline",
        default="",
        help=(
            "a git revision: each streamslo client runs again on that revision's code "
            "(row 'streamslo ... @REV'), side by side in the same run (the old path)"
        ),
    )
    p.add_argument(
        "--peer-venv",
        type=Path,
        default=os.environ.get("STREAMSLO_VLLM_VENV"),
        help=f"the '{PEER_ROW}' row: a venv with vLLM (default $STREAMSLO_VLLM_VENV)",
    )
    p.add_argument(
        "--peer-model",
        type=Path,
        default=os.environ.get("STREAMSLO_VLLM_MODEL"),
        help="a model directory with a tokenizer, for vLLM's random prompts "
        "(default $STREAMSLO_VLLM_MODEL)",
    )
    p.add_argument(
        "--install-peer",
        type=Path,
        metavar="DIR",
        help=f"make DIR/venv (vLLM's CPU build, minutes) and DIR/model for the '{PEER_ROW}' row",
    )
    p.add_argument(
        "--nice",
        type=int,
        default=-5,
        help="run emitter and client at this nice level (default -5: the machine is shared; 0: off)",
    )
    args = p.parse_args(argv)
    levels = [int(x) for x in args.levels.split(",") if x.strip()]
    clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    for c in clients:
        if c not in CLIENTS:
            p.error(f"unknown client {c!r}; choose from {', '.join(CLIENTS)}")
    if args.baseline:
        clients = with_baseline(args.baseline, clients)
    skipped = []
    if PEER_ROW in clients:
        if args.install_peer is not None:
            sys.path.insert(0, str(REPO / "tests" / "realserver"))
            import vllm_setup

            args.peer_venv, args.peer_model = (
                args.install_peer / "venv",
                args.install_peer / "model",
            )
            if not (args.peer_venv / "bin" / "vllm").exists():
                vllm_setup.install(args.peer_venv)
            if not (args.peer_model / "tokenizer.json").exists():
                subprocess.run(
                    [
                        str(args.peer_venv / "bin" / "python"),
                        vllm_setup.__file__,
                        "build-model",
                        str(args.peer_venv),
                        str(args.peer_model),
                    ],
                    check=True,
                )
        if args.peer_venv is None or not (Path(args.peer_venv) / "bin" / "vllm").exists():
            clients.remove(PEER_ROW)
            skipped.append(f"{PEER_ROW} (no vLLM venv: --peer-venv, or --install-peer DIR)")
            print(f"note: skipping client {skipped[-1]}", file=sys.stderr, flush=True)
        else:
            PEER["venv"], PEER["model"] = Path(args.peer_venv), Path(args.peer_model)
    for c in list(clients):
        mod = NEEDS.get(c)
        if mod is not None and importlib.util.find_spec(mod) is None:
            clients.remove(c)
            skipped.append(f"{c} (module {mod!r} not installed; `pip install {mod}` to include it)")
            print(f"note: skipping client {skipped[-1]}", file=sys.stderr, flush=True)
    cells: list[dict[str, Any]] = []
    t0 = time.time()
    for users in levels:  # interleaved, so the machine's noise hits every client alike
        for client in clients:
            c = run_cell(client, users, args.seconds, args.warmup, args.keep, args.nice)
            cells.append(c)
            print(
                f"[{time.time() - t0:5.0f}s] {client} @ {users}: p99 {fmt(c['lateness_p99_ms'])} ms, "
                f"cpu {fmt(c['client_cpu_pct'], 0)} %, {c['streams_completed']} streams"
                + (f"\n{c.get('log_tail', '')}" if "log_tail" in c else ""),
                file=sys.stderr,
                flush=True,
            )
    table, summary = report(cells, clients)
    print(table)
    for note in skipped:
        print(f"- skipped: {note}")
    command = shown_command("bench_stream_users", argv)
    out = write_result(
        "stream_users",
        {
            "command": command.strip(),
            "cells": cells,
            "clients": clients,
            **summary,
            "skipped": skipped,
            "levels": levels,
            "seconds": args.seconds,
        },
        args.json or None,
    )
    print(f"\nwrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    prioritise()
    sys.exit(main())
