"""How worker records should travel to the master (issue 12 §1): message size, the master's CPU
per record, and how long a record waits before the master has it, side by side in one run.

A. Encodings (in this process, no Locust): ``--records`` finished streams of ``--tokens`` tokens,
   sent in batches of ``--batch``; for each encoding the worker's cost to encode a record, the
   msgpack bytes per record, and the master's cost to take a record in and write it (decode,
   queue, append the rows to ``streams.csv``, write the gaps' parquet part; all synchronous here,
   so every cost is counted):

   * ``csv rows + gap columns`` (what the relay sends): each ``streams.csv`` row formatted on the
     worker, the gaps as little-endian number columns;
   * ``row columns + gap columns``: the row fields as one list per column; the master formats
     the CSV rows;
   * ``dict per row and per gap``: what sending ``StreamRecord`` fields naively would be.

B. Delivery (real Locust: ``--processes 1``, a master and one worker on this host): a synthetic
   generator on the worker finishes ``--rate`` records per second, each stamped when it
   finished, and sends them both ways at once: a custom message every second (the relay's
   interval) and Locust's ``report_to_master`` (every 3 s, ``WORKER_REPORT_INTERVAL``); the
   master notes, per record, how long after it finished it arrived (the first 2 s left out).

Run: ``python bench/bench_relay.py [--json bench/results/relay.json]``; ``--skip-locust``: A only.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from array import array
from pathlib import Path
from typing import Any

import msgpack
import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from streamslo.results.batch import GapColumns, RecordBatch  # noqa: E402
from streamslo.results.columns import STREAM_COLUMNS, stream_row  # noqa: E402
from streamslo.results.writer import ResultsWriter  # noqa: E402
from streamslo.stream.outcome import Outcome  # noqa: E402
from streamslo.stream.timing import StreamRecord, Wire  # noqa: E402

RUN_START = 1_700_000_000.0


def make_record(i: int, tokens: int, now: float | None = None) -> StreamRecord:
    """A finished 50 tokens/s stream, as the tracker leaves one."""
    end = RUN_START + 10 + i * 0.005 if now is None else now
    e2e = 0.3 + 0.02 * (tokens - 1)
    t0 = 1000.0 + i
    rec = StreamRecord(
        stream_id=f"4242-a1b2c3-{i}",
        protocol=Wire.SSE,
        user_class="SSEStreamUser",
        started_at=end - e2e,
        t0=t0,
    )
    rec.status, rec.outcome, rec.connect_s, rec.ttft_s, rec.e2e_s = (
        200,
        Outcome.OK,
        0.0012,
        0.3,
        e2e,
    )
    rec.tokens = rec.expected_tokens = rec.usage_completion_tokens = tokens
    rec.finish_reason, rec.bytes = "length", 180 * tokens
    rec.gap_s = array("d", [0.02 + 1e-5 * (k % 7) for k in range(tokens - 1)])
    rec.gap_t = array("d", [t0 + 0.3 + 0.02 * (k + 1) for k in range(tokens - 1)])
    return rec


def _dumps(obj: Any) -> bytes:
    return bytes(msgpack.dumps(obj))


def _loads(data: bytes) -> Any:
    return msgpack.loads(data, raw=False, strict_map_key=False)  # as Locust reads its messages


# --------------------------------------------------------------------------- A: encodings
def enc_csv(recs: list[StreamRecord]) -> bytes:
    b = RecordBatch()
    for r in recs:
        b.add(r)
    return _dumps(b.to_wire())


def dec_csv(data: bytes) -> RecordBatch:
    return RecordBatch.from_wire(_loads(data))


def enc_columns(recs: list[StreamRecord]) -> bytes:
    rows = [stream_row(r) for r in recs]
    g = GapColumns()
    for r in recs:
        g.add(r)
    return _dumps(
        {"cols": {c: [row[c] for row in rows] for c in STREAM_COLUMNS}, "gaps": g.to_wire()}
    )


def dec_columns(data: bytes) -> RecordBatch:
    msg = _loads(data)
    text = io.StringIO()
    w = csv.writer(text, lineterminator="\n")
    cols = msg["cols"]
    w.writerows(
        zip(*(["" if v is None else v for v in cols[c]] for c in STREAM_COLUMNS), strict=True)
    )
    n = len(cols[STREAM_COLUMNS[0]])
    return RecordBatch.from_wire({"rows": text.getvalue().encode(), "n": n, "gaps": msg["gaps"]})


def enc_dicts(recs: list[StreamRecord]) -> bytes:
    return _dumps(
        {
            "rows": [stream_row(r) for r in recs],
            "gaps": [
                {
                    "stream_id": r.stream_id,
                    "index": k + 1,
                    "gap_s": g,
                    "t": t,
                    "base": r.started_at - r.t0,
                    "open": r.open_gap and k == len(r.gap_s) - 1,
                }
                for r in recs
                for k, (g, t) in enumerate(zip(r.gap_s, r.gap_t, strict=True))
            ],
        }
    )


def dec_dicts(data: bytes) -> RecordBatch:
    msg = _loads(data)
    text = io.StringIO()
    w = csv.writer(text, lineterminator="\n")
    for row in msg["rows"]:
        w.writerow(["" if row[c] is None else row[c] for c in STREAM_COLUMNS])
    g = GapColumns()
    last = None
    for gap in msg["gaps"]:  # back to columns, stream by stream
        if gap["stream_id"] != last:
            g.ids.append(gap["stream_id"])
            g.base.append(gap["base"])
            g.count.append(0)
            g.open.append(0)
            last = gap["stream_id"]
        g.count[-1] += 1
        g.open[-1] = 1 if gap["open"] else 0
        g.gap_s.append(gap["gap_s"])
        g.t.append(gap["t"])
    return RecordBatch.from_wire(
        {"rows": text.getvalue().encode(), "n": len(msg["rows"]), "gaps": g.to_wire()}
    )


ENCODINGS = {
    "csv rows + gap columns (relay)": (enc_csv, dec_csv),
    "row columns + gap columns": (enc_columns, dec_columns),
    "dict per row and per gap": (enc_dicts, dec_dicts),
}


def bench_encodings(records: int, tokens: int, batch: int, repeats: int) -> list[dict[str, Any]]:
    recs = [make_record(i, tokens) for i in range(records)]
    chunks = [recs[i : i + batch] for i in range(0, records, batch)]
    out: list[dict[str, Any]] = []
    for name, (enc, dec) in ENCODINGS.items():
        enc_s, master_s, sizes = [], [], 0
        for _ in range(repeats):
            t = time.process_time()
            msgs = [enc(c) for c in chunks]
            enc_s.append(time.process_time() - t)
            sizes = sum(len(m) for m in msgs)
            with tempfile.TemporaryDirectory() as d:
                w = ResultsWriter(Path(d), RUN_START, flush_interval=3600)
                t = time.process_time()
                for m in msgs:  # the master: decode, queue, write (a flush per message)
                    w.ingest(dec(m))
                    w.flush()
                w.flush(wait=True)
                master_s.append(time.process_time() - t)
                assert w.streams_written == records
        out.append(
            {
                "encoding": name,
                "bytes_per_record": sizes / records,
                "worker_us_per_record": min(enc_s) / records * 1e6,
                "master_us_per_record": min(master_s) / records * 1e6,
            }
        )
    base = out[0]["master_us_per_record"]
    for row in out:
        row["master_vs_relay"] = float(row["master_us_per_record"]) / float(base)
    return out


# --------------------------------------------------------------------------- B: delivery
LOCUSTFILE = """
import json, os, time
import gevent
from locust import User, constant, events, task
from locust.runners import MasterRunner, WorkerRunner
from streamslo.loadgen.relay import SEND_INTERVAL_S
from streamslo.results.batch import RecordBatch
import bench_relay as b

RATE = float(os.environ["BENCH_RATE"]); TOKENS = int(os.environ["BENCH_TOKENS"])
state = {"custom": [RecordBatch(), []], "report": [RecordBatch(), []], "delays": {"custom": [], "report": []}, "cpu": 0.0, "n": 0}

class Idle(User):
    wait_time = constant(3600)
    @task
    def idle(self):
        pass

def _take(kind):
    batch, made = state[kind]
    state[kind] = [RecordBatch(), []]
    return {"batch": batch.to_wire(), "made": made}

def _generate():
    i = 0
    start = time.perf_counter()
    while True:
        i += 1
        gevent.sleep(max(0.0, start + i / RATE - time.perf_counter()))
        rec = b.make_record(i, TOKENS, now=time.time())
        for kind in ("custom", "report"):
            state[kind][0].add(rec)
            state[kind][1].append(time.time())

def _send(runner):
    while True:
        gevent.sleep(SEND_INTERVAL_S)
        runner.send_message("bench_records", _take("custom"))

def _arrived(kind, data):
    t = time.thread_time()
    now = time.time()
    RecordBatch.from_wire(data["batch"])
    state["cpu"] += time.thread_time() - t
    state["n"] += len(data["made"])
    state["delays"][kind].extend([m, now - m] for m in data["made"])

@events.init.add_listener
def _init(environment, runner=None, **_):
    if isinstance(runner, MasterRunner):
        runner.register_message("bench_records", lambda environment, msg, **_: _arrived("custom", msg.data))
    if isinstance(runner, WorkerRunner):
        gevent.spawn(_generate)
        gevent.spawn(_send, runner)

@events.report_to_master.add_listener
def _to_master(client_id, data, **_):
    data["bench_records"] = _take("report")

@events.worker_report.add_listener
def _from_worker(client_id, data, **_):
    if "bench_records" in data:
        _arrived("report", data["bench_records"])

@events.quitting.add_listener
def _dump(environment, **_):
    if isinstance(environment.runner, MasterRunner):
        with open(os.environ["BENCH_OUT"], "w") as fh:
            json.dump(state["delays"], fh)
"""


def bench_delivery(rate: float, tokens: int, seconds: int) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory() as d:
        lf = Path(d) / "relay_locustfile.py"
        lf.write_text(LOCUSTFILE)
        out = Path(d) / "delays.json"
        env = dict(
            os.environ,
            BENCH_RATE=str(rate),
            BENCH_TOKENS=str(tokens),
            BENCH_OUT=str(out),
            PYTHONPATH=os.pathsep.join(
                [str(REPO / "bench"), str(REPO), os.environ.get("PYTHONPATH", "")]
            ),
        )
        subprocess.run(
            [
                sys.executable,
                "-m",
                "locust",
                "-f",
                str(lf),
                "--headless",
                "--processes",
                "1",
                "-u",
                "1",
                "-r",
                "1",
                "-t",
                f"{seconds}s",
                "--master-bind-host",
                "127.0.0.1",
                "--only-summary",
                "--loglevel",
                "WARNING",
            ],
            env=env,
            check=True,
            capture_output=True,
            timeout=seconds + 60,
        )
        delays = json.loads(out.read_text())
    # Leave out the first 2 s (the worker connects and the test starts) on both channels alike.
    first = min(m for kind in delays.values() for m, _ in kind)
    rows: list[dict[str, Any]] = []
    for kind, label in (
        ("custom", "custom message, 1 s (relay)"),
        ("report", "report_to_master, 3 s"),
    ):
        ms = np.array([d for m, d in delays[kind] if m >= first + 2.0]) * 1000.0
        rows.append(
            {
                "channel": label,
                "records": int(ms.size),
                "p50_ms": float(np.percentile(ms, 50)),
                "p99_ms": float(np.percentile(ms, 99)),
                "max_ms": float(ms.max()),
            }
        )
    base = rows[0]["p50_ms"]
    for row in rows:
        row["p50_vs_relay"] = float(row["p50_ms"]) / float(base)
    return rows


def _table(rows: list[dict[str, Any]]) -> str:
    keys = list(rows[0])
    widths = [max(len(k), *(len(_fmt(r[k])) for r in rows)) for k in keys]
    lines = ["  ".join(k.ljust(w) for k, w in zip(keys, widths, strict=True))]
    lines += [
        "  ".join(_fmt(r[k]).ljust(w) for k, w in zip(keys, widths, strict=True)) for r in rows
    ]
    return "\n".join(lines)


def _fmt(v: Any) -> str:
    return f"{v:.2f}" if isinstance(v, float) else str(v)


def render(data: dict[str, Any]) -> str:
    """The Markdown section of ``bench/RESULTS.md`` from this bench's JSON."""
    pr = data["params"]
    out = [
        f"A. Encodings: {pr['records']} streams of {pr['tokens']} tokens, {pr['batch']} per message "
        "(master: decode, queue, `streams.csv` rows, gaps parquet part; CPU time, best of the repeats).\n",
        _md(data["encodings"]),
    ]
    if data.get("delivery"):
        out += [
            f"\nB. Delivery to the master (real Locust, one worker): {pr['rate']:g} records/s for "
            f"{pr['seconds']} s, both channels at once.\n",
            _md(data["delivery"]),
        ]
    return "\n".join(out)


def _md(rows: list[dict[str, Any]]) -> str:
    keys = list(rows[0])
    lines = ["| " + " | ".join(keys) + " |", "| " + " | ".join("---" for _ in keys) + " |"]
    lines += ["| " + " | ".join(_fmt(r[k]) for k in keys) + " |" for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=2000)
    p.add_argument("--tokens", type=int, default=100)
    p.add_argument(
        "--batch", type=int, default=200, help="records per message (200 streams/s for 1 s)"
    )
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument(
        "--rate", type=float, default=200.0, help="B: records per second from the worker"
    )
    p.add_argument("--seconds", type=int, default=12, help="B: run time")
    p.add_argument("--skip-locust", action="store_true")
    p.add_argument("--json", type=Path, help="write the results here")
    args = p.parse_args(argv)
    result: dict[str, Any] = {
        "params": vars(args) | {"json": None},
        "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cpus": os.cpu_count(),
    }
    result["encodings"] = bench_encodings(args.records, args.tokens, args.batch, args.repeats)
    print(
        f"A. encodings: {args.records} streams of {args.tokens} tokens, {args.batch} per message\n"
    )
    print(_table(result["encodings"]))
    if not args.skip_locust:
        result["delivery"] = bench_delivery(args.rate, args.tokens, args.seconds)
        print(
            f"\nB. delivery to the master: {args.rate:g} records/s for {args.seconds} s, both channels at once\n"
        )
        print(_table(result["delivery"]))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
