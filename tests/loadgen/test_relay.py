"""The worker-to-master channel without Locust: a batch survives msgpack exactly, a master writes
what it receives exactly as a local writer would, a resent batch is written once, and a batch
that cannot be read is refused and counted, not written.

The real Locust connection is exercised by ``test_distributed.py``; here the sender's messages
go through msgpack (what Locust's ZeroMQ messages use) straight to the receiver, so that the
resend and dedupe paths, which a healthy connection never takes, run too."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import msgpack
import pandas as pd
import pytest

from streamslo.loadgen.relay import ACK, RECORDS, RelayReceiver, RelaySender
from streamslo.results.batch import GapColumns, RecordBatch
from streamslo.results.layout import Layout, load_run
from streamslo.results.writer import ResultsWriter
from tests.results.helpers import record

RUN_START = 1_700_000_000.0


def _records(n: int = 6) -> list[Any]:
    out = []
    for i in range(n):
        rec = record(
            i,
            gaps=i % 4,
            error='cut, "quoted"\nnext line' if i == 3 else "",
            outcome="truncated" if i == 3 else "ok",
            started_at=RUN_START + 1 + i,
        )
        rec.open_gap = i == 3
        out.append(rec)
    return out


def _wire(obj: Any) -> Any:
    """Through msgpack as Locust sends it (``raw=False``, ``strict_map_key=False``)."""
    return msgpack.loads(msgpack.dumps(obj), raw=False, strict_map_key=False)


def test_a_batch_survives_msgpack_and_writes_what_a_local_writer_writes(tmp_path):
    local, remote = tmp_path / "local", tmp_path / "remote"
    w = ResultsWriter(local, run_start=RUN_START, flush_interval=3600)
    batch = RecordBatch()
    for rec in _records():
        w.add(rec)
        batch.add(rec)
    w.flush(wait=True)
    m = ResultsWriter(remote, run_start=RUN_START, flush_interval=3600)
    m.ingest(RecordBatch.from_wire(_wire(batch.to_wire())))
    m.flush(wait=True)
    assert Layout(remote).streams_csv.read_bytes() == Layout(local).streams_csv.read_bytes()
    a, b = load_run(local), load_run(remote)
    key = ["stream_id", "index"]
    pd.testing.assert_frame_equal(
        a.gaps.sort_values(key, ignore_index=True), b.gaps.sort_values(key, ignore_index=True)
    )
    assert len(b.gaps) == sum(i % 4 for i in range(6))
    assert b.gaps.loc[b.gaps["open"], "stream_id"].tolist() == [
        "s-3"
    ]  # only a failed stream's last gap
    assert b.gaps.groupby("stream_id")["index"].apply(list).to_dict() == {
        "s-1": [1],
        "s-2": [1, 2],
        "s-3": [1, 2, 3],
        "s-5": [1],
    }
    # A multi-line error is one line (one row, one line: the writer counts rows by newlines).
    assert (
        b.streams.loc[b.streams["stream_id"] == "s-3", "error"].item() == 'cut, "quoted" next line'
    )
    assert Layout(remote).streams_csv.read_bytes().count(b"\n") == 7
    assert w.streams_written == m.streams_written == 6 and w.rows_unwritten == m.rows_unwritten == 0


def test_gap_times_count_from_the_run_start_of_whoever_writes():
    rec = record(1, gaps=2, started_at=RUN_START + 10.0)  # t0 = 100.0 (perf_counter)
    g = GapColumns()
    g.add(rec)
    t = GapColumns.from_wire(_wire(g.to_wire())).table(RUN_START).column("t").to_pylist()
    # The first gap ends 0.05 + 0.02 s after the stream's start, 10 s after the run's.
    assert t == pytest.approx([10.07, 10.09], abs=1e-6)


@pytest.mark.parametrize(
    ("damage", "why"),
    [
        (lambda w: w.update(n=w["n"] + 1), "rows announced"),
        (lambda w: w.update(n=0), "rows announced"),
        (lambda w: w.update(rows=w["rows"][:-1]), "rows announced"),
        (lambda w: w.update(rows=b"\xff\xfe,x\n" * w["n"]), "UTF-8"),
        (lambda w: w["gaps"].update(t=w["gaps"]["t"][:-8]), "times came"),
        (lambda w: w["gaps"].update(count=w["gaps"]["count"][:-1]), "whole number"),
        (lambda w: w["gaps"].update(ids=w["gaps"]["ids"][:-1]), "stream ids"),
        (lambda w: w.pop("gaps"), "expected rows"),
    ],
)
def test_a_damaged_batch_is_refused_with_the_reason(damage, why):
    batch = RecordBatch()
    for rec in _records():
        batch.add(rec)
    wire = _wire(batch.to_wire())
    damage(wire)
    with pytest.raises(ValueError, match=why):
        RecordBatch.from_wire(wire)


@dataclass
class _Msg:
    node_id: str
    data: Any


class _Master:
    """What the receiver needs of Locust's master runner: ``send_message`` (acknowledgements
    go back to the sender) and ``clients``."""

    def __init__(self) -> None:
        self.senders: dict[str, RelaySender] = {}
        self.clients: dict[str, Any] = {}
        self.acks: list[int] = []
        self.drop_acks = False

    def send_message(self, msg_type: str, data: Any = None, client_id: str | None = None) -> None:
        assert msg_type == ACK and client_id is not None
        self.acks.append(data["seq"])
        if not self.drop_acks and client_id in self.senders:
            self.senders[client_id].on_ack(msg=_Msg("master", _wire(data)))


def _pair(
    tmp_path, resend_after: float = 3600.0
) -> tuple[RelaySender, RelayReceiver, _Master, ResultsWriter]:
    master = _Master()
    receiver = RelayReceiver(master)
    writer = ResultsWriter(tmp_path, run_start=RUN_START, flush_interval=3600)
    receiver.start(writer, Layout(tmp_path))

    def send(msg_type: str, data: dict[str, Any]) -> None:
        assert msg_type == RECORDS
        receiver.on_records(msg=_Msg("host-a_1", _wire(data)))

    sender = RelaySender(
        send,
        "123-abcdef",
        figures=lambda: {"cpu_busy_fraction": 0.0, "lag_p99_ms": 1.0},
        in_flight=lambda: 2,
        resend_after=resend_after,
    )
    master.senders["host-a_1"] = sender
    return sender, receiver, master, writer


def test_a_batch_sent_again_is_written_once(tmp_path):
    sender, receiver, master, writer = _pair(tmp_path, resend_after=0.0)
    sender.running = True
    master.drop_acks = True  # the acknowledgement is lost: the worker sends the batch again
    recs = _records()
    for rec in recs[:3]:
        sender.add(rec)
    sender.flush()
    assert sender.unacked == 1
    master.drop_acks = False
    for rec in recs[3:]:
        sender.add(rec)
    sender.flush(final=True)  # resends batch 1 first, then sends batch 2
    assert sender.unacked == 0 and master.acks == [1, 1, 2]
    writer.flush(wait=True)
    receiver.save()
    s = load_run(tmp_path).streams
    assert sorted(s["stream_id"]) == sorted(r.stream_id for r in recs) and s["stream_id"].is_unique
    relay = json.loads(Layout(tmp_path).relay_json.read_text())
    assert (relay["records"], relay["batches"], relay["duplicates"]) == (6, 2, 1)
    worker = relay["per_worker"][0]
    assert worker["final"] is True and worker["tag"] == "123-abcdef" and worker["in_flight"] == 2
    assert relay["lost_workers"] == []
    procs = json.loads(Layout(tmp_path).proc_json("123-abcdef").read_text())
    assert procs["worker"] == "host-a_1" and procs["lag_p99_ms"] == 1.0


def test_a_lost_batch_sent_again_after_the_final_one_is_written_and_the_worker_stays_final(
    tmp_path,
):
    master = _Master()
    receiver = RelayReceiver(master)
    writer = ResultsWriter(tmp_path, run_start=RUN_START, flush_interval=3600)
    receiver.start(writer, Layout(tmp_path))
    lost_once: set[int] = set()

    def send(msg_type: str, data: dict[str, Any]) -> None:
        if data["seq"] == 1 and 1 not in lost_once:  # the first try of batch 1 never arrives
            lost_once.add(1)
            return
        receiver.on_records(msg=_Msg("host-a_1", _wire(data)))

    sender = RelaySender(send, "123-abcdef", in_flight=lambda: 0, resend_after=0.0)
    master.senders["host-a_1"] = sender
    recs = _records()
    for rec in recs[:3]:
        sender.add(rec)
    sender.flush()
    for rec in recs[3:]:
        sender.add(rec)
    sender.flush(final=True)  # batch 1 again (first), then the final batch 2
    assert master.acks == [1, 2]
    sender.flush()  # nothing left to send again
    writer.flush(wait=True)
    assert sorted(load_run(tmp_path).streams["stream_id"]) == sorted(r.stream_id for r in recs)
    assert receiver.workers["host-a_1"].final is True

    # Delivered out of order: the final batch first, then the older one.
    late = RelayReceiver(master)
    older, newer = RecordBatch(), RecordBatch()
    older.add(recs[0])
    newer.add(recs[1])
    late.on_records(
        msg=_Msg("w", {"seq": 2, "batch": newer.to_wire(), "final": True, "in_flight": 0})
    )
    late.on_records(
        msg=_Msg("w", {"seq": 1, "batch": older.to_wire(), "final": False, "in_flight": 5})
    )
    assert (
        late.workers["w"].final is True
        and late.workers["w"].in_flight == 0
        and late.workers["w"].records == 2
    )


def test_a_batch_that_cannot_be_read_is_counted_not_written(tmp_path):
    _sender, receiver, master, writer = _pair(tmp_path)
    bad = RecordBatch()
    for rec in _records(2):
        bad.add(rec)
    wire = bad.to_wire()
    wire["gaps"]["t"] = b""
    receiver.on_records(
        msg=_Msg("host-a_1", {"seq": 1, "tag": "123-abcdef", "batch": wire, "final": False})
    )
    writer.flush(wait=True)
    receiver.save()
    assert load_run(tmp_path).streams.empty
    relay = json.loads(Layout(tmp_path).relay_json.read_text())
    assert relay["rejected_records"] == 2 and relay["records"] == 0
    assert master.acks == [1]  # acknowledged: sending it again would not make it readable


def test_finalize_names_lost_workers_and_saturated_ones(tmp_path):
    from streamslo.results.summary_table import format_summary
    from streamslo.runfiles.finalize import finalize

    sender, receiver, _master, writer = _pair(tmp_path)
    sender.running = True
    sender.figures = lambda: {"cpu_busy_fraction": 0.5, "lag_p99_ms": 31.0}
    for rec in _records(4):
        sender.add(rec)
    sender.flush()
    receiver.workers["host-a_1"].lost_at = (
        RUN_START + 30
    )  # as poll() marks a worker Locust saw missing
    receiver.save()
    writer.flush(wait=True)
    summary, checks = finalize(tmp_path, {"start_epoch": RUN_START})
    run = json.loads(Layout(tmp_path).run_json.read_text())
    assert run["lost_workers"] == [
        {
            "worker": "host-a_1",
            "host": sender.host,
            "tag": "123-abcdef",
            "at": "2023-11-14T22:13:50.000Z",
            "last_seen": run["lost_workers"][0]["last_seen"],
            "streams_in_flight": 2,
            "records": 4,
        }
    ]
    assert run["relay"]["records"] == 4 == summary["requests"]
    assert run["valid"] is False
    assert run["invalid_reason"] == (
        "worker host-a_1 (process 123-abcdef) was above 90% of a core for 50% of the run (limit 10%); "
        "worker host-a_1 (process 123-abcdef) greenlet lag p99 31.0 ms (limit 20 ms)"
    )
    table = format_summary(summary, checks, run).splitlines()
    assert table[0].startswith("!! INVALID RUN: worker host-a_1")
    assert table[1].startswith("!! LOST WORKER host-a_1 at 2023-11-14T22:13:50.000Z")
    assert "the 4 streams it sent are here; its 2 streams in flight then" in table[1]


def test_a_run_without_workers_has_no_lost_workers_field(tmp_path):
    from streamslo.runfiles.finalize import finalize

    w = ResultsWriter(tmp_path, run_start=RUN_START, flush_interval=3600)
    w.add(_records(1)[0])
    w.flush(wait=True)
    finalize(tmp_path, {})
    run = json.loads(Layout(tmp_path).run_json.read_text())
    assert "lost_workers" not in run and "relay" not in run


@pytest.mark.parametrize("name", ["streamslo.results.batch", "streamslo.loadgen.relay"])
def test_the_new_modules_declare_their_api(name):
    from tests.test_cli import test_all_matches_public_names

    test_all_matches_public_names(name)
