"""What the benchmarks share: starting and stopping pinned processes, the lean emitter,
sampling a process's CPU and memory, percentiles, tying streamslo's results rows to the
emitter's streams, and writing ``bench/results/<name>.json``.

Pinning: on this 2-core machine the server or emitter runs on core 0 and the client on core 1
(``taskset -c``), so neither steals the other's CPU; the machine is shared with other work, so
every bench compares its rows side by side within one run and reports ratios.

Priority: Linux groups the CPU time of each session (``autogroup``), so ``nice`` does not
reach across sessions: on a machine shared with other sessions' tests, a client that needs
more CPU per token than another can be held in the run queue for a second or more at a time
(measured: 1.4-1.9 s) while the leaner one keeps up, and the two disagree because of the
machine. :func:`prioritise` puts the bench (and every process it starts) in a session of its
own with a higher autogroup priority, so every side it compares gets the same head start.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "BENCH",
    "EMITTER",
    "REPO",
    "RESULTS",
    "Sampler",
    "SchedWatch",
    "fmt",
    "locust_cmd",
    "match_streamslo",
    "md_table",
    "pct",
    "pinned",
    "prioritise",
    "priority_note",
    "run_against_emitter",
    "shown_command",
    "start_emitter",
    "stop",
    "workdir",
    "write_result",
]

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent


def shown_command(script: str, argv: list[str]) -> str:
    """The command as RESULTS.md shows it: paths inside the repository made relative, so the
    line can be rerun from any clone."""
    prefix = str(REPO) + "/"
    return " ".join(["python", f"bench/{script}.py", *(a.replace(prefix, "") for a in argv)])


EMITTER = BENCH / "_emitter.py"
RESULTS = BENCH / "results"


def pinned(core: str | None, cmd: Sequence[str], nice: int = 0) -> list[str]:
    """``cmd`` under ``nice -n`` and ``taskset -c core`` (each only when asked)."""
    out = list(cmd)
    if core is not None:
        out = ["taskset", "-c", core, *out]
    if nice:
        out = ["nice", "-n", str(nice), *out]
    return out


def prioritise(nice: int = -10) -> None:
    """Run this script again in a session of its own whose autogroup nice is ``nice``, and exit
    with its code (call it under ``if __name__ == "__main__"``). Needs root to raise it;
    without, or with ``BENCH_NO_PRIORITY=1``, the script runs at the default priority. The
    results JSON says which (:func:`priority_note`)."""
    if os.environ.get("BENCH_NO_PRIORITY") == "1" or "BENCH_PRIORITY" in os.environ:
        return
    env = dict(os.environ, BENCH_PRIORITY=f"autogroup nice {int(nice)}, a session of its own")
    # A new session is a new autogroup: the caller (a shell, a test run) keeps its priority.
    code = (
        "import os, runpy, sys\n"
        "try:\n"
        f"    open('/proc/self/autogroup', 'w').write('{int(nice)}')\n"
        "except OSError as exc:\n"
        "    os.environ['BENCH_PRIORITY'] = f'default ({exc.strerror})'\n"
        f"sys.argv = {sys.argv!r}\n"
        "runpy.run_path(sys.argv[0], run_name='__main__')\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, start_new_session=True)
    try:
        rc = proc.wait()
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGINT)
        rc = proc.wait()
    sys.exit(rc)


def priority_note() -> str:
    """How the bench's processes were prioritised (for the results JSON)."""
    return os.environ.get("BENCH_PRIORITY", "default")


def stop(proc: subprocess.Popen[Any], grace: float = 10.0, sig: int = signal.SIGTERM) -> None:
    """End a process this bench started: ``sig``, then SIGKILL after ``grace`` seconds."""
    if proc.poll() is not None:
        return
    proc.send_signal(sig)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


@contextlib.contextmanager
def workdir(prefix: str, keep: bool = False) -> Iterator[Path]:
    """A temporary work directory, removed afterwards unless ``keep``."""
    import shutil

    d = Path(tempfile.mkdtemp(prefix=f"bench-{prefix}-"))
    try:
        yield d
    finally:
        if not keep:
            shutil.rmtree(d, ignore_errors=True)


def start_emitter(
    work: Path,
    *,
    core: str | None = "0",
    nice: int = 0,
    period_ms: float = 20.0,
    ttft_ms: float | None = None,
    tag: bool = True,
    flood: bool = False,
    name: str = "emitter",
    port: int = 0,
    share: tuple[int, int] | None = None,
) -> tuple[subprocess.Popen[Any], int]:
    """Start ``bench/_emitter.py`` (its write log goes to ``work/{name}.json`` at SIGTERM);
    returns the process and its port. ``share=(i, n)``: the i-th of n emitters on one port
    (SO_REUSEPORT; streams numbered i, i + n, ...: disjoint size tags)."""
    ready = work / f"{name}.port"
    cmd = [
        sys.executable,
        str(EMITTER),
        "--ready",
        str(ready),
        "--log",
        str(work / f"{name}.json"),
        "--period-ms",
        str(period_ms),
        "--port",
        str(port),
    ]
    if share is not None:
        cmd += [
            "--reuse-port",
            "--seq-start",
            str(share[0] - share[1]),
            "--seq-step",
            str(share[1]),
        ]
    if ttft_ms is not None:
        cmd += ["--ttft-ms", str(ttft_ms)]
    if not tag:
        cmd.append("--no-tag")
    if flood:
        cmd.append("--flood")
    err = open(work / f"{name}.err", "w")  # noqa: SIM115 (the child owns it)
    proc = subprocess.Popen(pinned(core, cmd, nice), stdout=subprocess.DEVNULL, stderr=err)
    deadline = time.time() + 10
    while not ready.exists():
        if proc.poll() is not None or time.time() > deadline:
            stop(proc)
            raise RuntimeError(
                f"emitter did not start: {(work / f'{name}.err').read_text()[-500:]}"
            )
        time.sleep(0.02)
    return proc, int(ready.read_text())


def emitter_log(work: Path, name: str = "emitter") -> dict[str, Any]:
    """The emitter's write log (``{"period", "ttft", "streams": [...]}``), empty if absent."""
    path = work / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else {"streams": []}


@dataclass
class EmitterRun:
    """What :func:`run_against_emitter` saw: the client's exit code, the samples of both
    processes, the emitter's write log and the run's start."""

    rc: int | None
    sampler: Sampler
    emitted: list[dict[str, Any]]
    t_start: float
    log: dict[str, Any]
    sched: SchedWatch | None = None
    """The client's run-queue wait (``sched=True``)."""
    sched_emitter: SchedWatch | None = None
    """The emitter's run-queue wait (``sched=True``)."""


def run_against_emitter(
    work: Path,
    cmd: Sequence[str],
    seconds: float,
    *,
    env: dict[str, str] | None = None,
    nice: int = 0,
    client_core: str | None = "1",
    children: bool = False,
    sched: bool = False,
    cwd: Path | None = None,
    **emitter: Any,
) -> EmitterRun:
    """Start the emitter (core 0), run ``cmd`` against it (``{url}`` in ``cmd`` is replaced by
    its base URL) pinned to ``client_core`` (run in ``cwd``, default the repository), sample
    both every 0.5 s, stop both, and read the emitter's log. The client's output goes to
    ``work/client.log``."""
    proc_e, port = start_emitter(work, nice=nice, **emitter)
    url = f"http://127.0.0.1:{port}"
    full = [c.replace("{url}", url) for c in cmd]
    t_start = time.time()
    try:
        with open(work / "client.log", "w") as log:
            proc = subprocess.Popen(
                pinned(client_core, full, nice),
                cwd=cwd or REPO,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            sampler = Sampler({"client": proc.pid, "emitter": proc_e.pid}, children=children)
            watch = SchedWatch(proc.pid) if sched else None
            watch_e = SchedWatch(proc_e.pid) if sched else None
            try:
                sampler.run_until(proc, t_start + seconds + 60)
            finally:
                stop(proc)
                for w in (watch, watch_e):
                    if w is not None:
                        w.stop()
    finally:
        stop(proc_e)
    elog = emitter_log(work)
    return EmitterRun(proc.returncode, sampler, elog["streams"], t_start, elog, watch, watch_e)


def locust_cmd(url: str, users: int, seconds: float, *extra: str) -> list[str]:
    """A headless Locust run: every user spawned at once, a short stop timeout."""
    return [
        sys.executable,
        "-m",
        "locust",
        "--headless",
        "--host",
        url,
        "-u",
        str(users),
        "-r",
        str(users),
        "--run-time",
        f"{int(seconds)}s",
        "--stop-timeout",
        "5",
        "--exit-code-on-error",
        "0",
        "--only-summary",
        *extra,
    ]


@dataclass
class Sampler:
    """Samples processes every ``period`` seconds: CPU % (``psutil``), RSS, preemptions.

    ``procs`` maps a name to a pid; a process's children (their RSS and CPU) are summed in when
    ``children``.
    """

    procs: dict[str, int]
    period: float = 0.5
    children: bool = False
    cpu: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    rss: dict[str, list[tuple[float, int]]] = field(default_factory=dict)
    preempt: dict[str, list[tuple[float, int]]] = field(default_factory=dict)
    cpu_s: dict[str, float] = field(default_factory=dict)
    """CPU seconds (user + system) at the last sample."""

    def __post_init__(self) -> None:
        import psutil

        self._ps = {k: psutil.Process(pid) for k, pid in self.procs.items()}
        self._kids: dict[int, Any] = {}  # pid -> psutil.Process (cpu_percent needs the same one)
        for k, p in self._ps.items():
            self.cpu[k], self.rss[k], self.preempt[k] = [], [], []
            with contextlib.suppress(psutil.Error):
                p.cpu_percent(None)

    def sample(self) -> bool:
        """One sample of every process; False once all are gone."""
        import psutil

        now, alive = time.time(), False
        for k, p in self._ps.items():
            try:
                kids = [
                    self._kids.setdefault(q.pid, q)
                    for q in (p.children(recursive=True) if self.children else [])
                ]
                rss = sum(q.memory_info().rss for q in [p, *kids])
                t = p.cpu_times()
                self.cpu_s[k] = t.user + t.system
                cpu = p.cpu_percent(None)
                for q in kids:  # a child's first sample reads 0: it is seen from the next one
                    with contextlib.suppress(psutil.Error):
                        cpu += q.cpu_percent(None)
                self.cpu[k].append((now, cpu))
                self.rss[k].append((now, rss))
                self.preempt[k].append((now, p.num_ctx_switches().involuntary))
                alive = True
            except psutil.Error:
                continue
        return alive

    def run_until(self, proc: subprocess.Popen[Any], hard_deadline: float) -> None:
        """Sample until ``proc`` ends or the deadline passes."""
        while proc.poll() is None and time.time() < hard_deadline:
            time.sleep(self.period)
            if not self.sample():
                break

    def mean_cpu(self, name: str, lo: float, hi: float) -> float | None:
        inside = [c for t, c in self.cpu[name] if lo <= t <= hi] or [c for _, c in self.cpu[name]]
        return sum(inside) / len(inside) if inside else None

    def rate(self, name: str, lo: float, hi: float) -> float | None:
        inside = [(t, v) for t, v in self.preempt[name] if lo <= t <= hi]
        if len(inside) < 2:
            return None
        return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])

    def peak_rss(self, name: str) -> int | None:
        return max((v for _, v in self.rss[name]), default=None)


class SchedWatch:
    """Watches how long a process's main thread waited for a CPU while runnable (the kernel's
    run-queue delay, ``/proc/PID/task/PID/schedstat``), sampled every ``period`` seconds in a
    thread of this process.

    A gap that the generator measured too long while its thread sat in the run queue was the
    machine's doing (other processes on the core), not the generator's: :meth:`waited` says how
    much of a window that was.
    """

    def __init__(self, pid: int, period: float = 0.002) -> None:
        import threading

        self.path = Path(f"/proc/{pid}/task/{pid}/schedstat")
        self.t_run: list[float] = []  # seconds on a CPU, the same samples
        self.period = period
        self.t: list[float] = []
        self.delay: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.period):
            try:
                fields = self.path.read_text().split()
            except OSError:
                return
            self.t.append(time.time())
            self.delay.append(int(fields[1]) / 1e9)
            self.t_run.append(int(fields[0]) / 1e9)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(1)

    def waited(self, t0: float, t1: float) -> float | None:
        """Seconds of run-queue wait between epochs ``t0`` and ``t1`` (to the samples around
        them; None when the window is outside the samples)."""
        from bisect import bisect_left, bisect_right

        i, j = bisect_right(self.t, t0) - 1, bisect_left(self.t, t1)
        if i < 0 or j >= len(self.t):
            return None
        return self.delay[j] - self.delay[i]

    def ran(self, t0: float, t1: float) -> float | None:
        """Seconds the thread ran on a CPU between epochs ``t0`` and ``t1``."""
        from bisect import bisect_left, bisect_right

        i, j = bisect_right(self.t, t0) - 1, bisect_left(self.t, t1)
        if i < 0 or j >= len(self.t):
            return None
        return self.t_run[j] - self.t_run[i]

    def waits(self, t0: Any, t1: Any) -> Any:
        """:meth:`waited` for arrays of windows (numpy), seconds."""
        import numpy as np

        st, sd = np.asarray(self.t), np.asarray(self.delay)
        if len(st) < 2:
            return np.zeros(len(t0))
        i = np.clip(np.searchsorted(st, t0, "right") - 1, 0, len(st) - 1)
        j = np.clip(np.searchsorted(st, t1, "left"), 0, len(st) - 1)
        return sd[j] - sd[i]

    def total(self) -> float:
        return self.delay[-1] - self.delay[0] if len(self.delay) > 1 else 0.0


def pct(values: Any, q: float) -> float | None:
    """The ``q``-th percentile of ``values`` (None when empty)."""
    import numpy as np

    return float(np.percentile(values, q)) if len(values) else None


def fmt(v: float | None, nd: int = 1) -> str:
    return "-" if v is None else f"{v:.{nd}f}"


def md_table(header: Sequence[str], rows: Sequence[Sequence[Any]], align: str | None = None) -> str:
    """A Markdown table; ``align`` is one character per column (``l`` or ``r``)."""
    align = align or "l" + "r" * (len(header) - 1)
    sep = ["---" if a == "l" else "---:" for a in align]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(sep) + " |"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def write_result(name: str, data: dict[str, Any], path: str | None = None) -> Path:
    """Write ``data`` (plus the machine and time) to ``bench/results/<name>.json`` or ``path``."""
    out = Path(path) if path else RESULTS / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {
        "bench": name,
        "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "priority": priority_note(),
    }
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({**meta, **data}, indent=1, default=str) + "\n")
    os.replace(tmp, out)
    return out


def match_streamslo(
    results: Path, emitted: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], int, int]:
    """Tie each row of a streamslo results directory to the emitter stream it read.

    Per row: the receive epochs (token 1: ``started_at + ttft_ms``; token k+1: ``run.json``
    ``start_epoch`` + the gap's ``t``), and the emitter's write epochs and request time. A row
    names its emitter stream by its body size (each emitter stream carries a ``seq % 1024``
    byte tag) and the stream whose request arrived between the row's start and its first
    token. Returns ``(streams, unmatched, total tokens)``; a stream is ``{t0, done, recv, emit,
    t_req, started_at, ttft_ms, gaps_ms}``.
    """
    import pandas as pd

    rows = pd.read_csv(results / "streams.csv")
    total_tokens = int(rows["tokens"].fillna(0).sum())
    run = json.loads((results / "run.json").read_text())
    run_start = float(run["start_epoch"])
    gaps_dir = results / "gaps.parquet"
    gaps = (
        pd.read_parquet(gaps_dir)
        if any(gaps_dir.glob("*.parquet"))
        else pd.DataFrame(columns=["stream_id", "index", "t", "gap_ms"])
    )
    gaps = gaps.sort_values(["stream_id", "index"])
    gap_t = {
        sid: (g["t"].to_numpy() + run_start, g["gap_ms"].to_numpy())
        for sid, g in gaps.groupby("stream_id")
    }
    by_size: dict[int, list[tuple[float, int]]] = defaultdict(list)
    for i, s in enumerate(emitted):
        if s["done"]:
            by_size[s["bytes"]].append((s["t_req"], i))
    for lst in by_size.values():
        lst.sort()
    used: set[int] = set()
    out: list[dict[str, Any]] = []
    unmatched = 0
    r: Any
    for r in rows.itertuples(index=False):
        if r.outcome != "ok":
            out.append({"t0": float(r.started_at), "done": False, "recv": [], "emit": []})
            continue
        first = float(r.started_at) + float(r.ttft_ms) / 1000.0
        cands = by_size.get(int(r.bytes), [])
        j = bisect_left(cands, (float(r.started_at) - 0.002, -1))
        match = None
        while j < len(cands) and cands[j][0] <= first:
            if cands[j][1] not in used:
                match = cands[j][1]
                break
            j += 1
        gt, gms = gap_t.get(r.stream_id, ((), ()))
        recv = [first, *gt]
        if match is None or len(recv) != len(emitted[match]["w"]):
            unmatched += 1
            continue
        used.add(match)
        out.append(
            {
                "t0": float(r.started_at),
                "done": True,
                "recv": recv,
                "emit": emitted[match]["w"],
                "t_req": emitted[match]["t_req"],
                "ttft_ms": float(r.ttft_ms),
                "gaps_ms": list(gms),
                "stream_id": r.stream_id,
            }
        )
    return out, unmatched, total_tokens
