"""The stream users' code run without Locust or sockets: a StreamSource over the in-memory
transport, through the real exchange, tracker and dialect objects."""

from __future__ import annotations

import json
import sys

import pytest

from streamslo.loadgen.memory import MemoryTransport
from streamslo.loadgen.options import LoadOptions
from streamslo.loadgen.streams import FixedTarget, StreamSource, run_conversation
from streamslo.stream.timing import StreamRecord
from streamslo.transport.common import Target

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"


def _chunk(text: str, finish: str | None = None, usage: int | None = None) -> bytes:
    obj: dict = {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]}
    if usage is not None:
        obj["usage"] = {"prompt_tokens": 3, "completion_tokens": usage}
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def answer_words(words: list[str], cut_after: int | None = None):
    """An answer of ``words`` (one chunk each, 20 ms apart), or one cut after ``cut_after``."""

    def answer(body: bytes) -> list[tuple[float, bytes]]:
        reads = [(0.0, HEAD)]
        n = len(words)
        for i, w in enumerate(words, 1):
            last = i == n
            reads.append((0.02, _chunk(w, "length" if last else None, n if last else None)))
            if cut_after is not None and i == cut_after:
                return reads
        reads.append((0.001, b"data: [DONE]\n\n"))
        return reads

    return answer


def source(transport: MemoryTransport, *flags: str) -> tuple[StreamSource, list[StreamRecord]]:
    opts = LoadOptions.from_args(["--model", "m", "--seed", "7", *flags])
    ended: list[StreamRecord] = []
    fixed = FixedTarget(Target.from_url("http://127.0.0.1:9"), opts.request)
    return StreamSource(opts, fixed, ended.append, transport), ended


def test_a_conversation_sends_each_answer_back_and_records_every_turn():
    transport = MemoryTransport(answer_words(["Hello", " there", " friend", "!"]))
    src, ended = source(transport, "--max-tokens", "4", "--turns", "3")
    records = run_conversation(src, "sse", "MemoryUser", src.opts.limits)
    assert [r.outcome for r in records] == ["ok", "ok", "ok"]
    assert ended == records and src.in_flight == 0
    assert {r.conversation_id for r in records} == {records[0].conversation_id}
    assert [r.turn for r in records] == [1, 2, 3]
    assert all(r.tokens == 4 and r.usage_completion_tokens == 4 for r in records)
    assert records[0].ttft_s == pytest.approx(0.02) and records[0].gap_s == pytest.approx(
        [0.02] * 3
    )
    # Turn 2 carries turn 1's answer, as it streamed, in the assistant's message.
    second = json.loads(transport.sent[1])
    assistant = [m["content"] for m in second["messages"] if m["role"] == "assistant"]
    assert assistant == ["Hello there friend!"]
    assert len(json.loads(transport.sent[2])["messages"]) > len(second["messages"])


def test_a_cut_turn_ends_the_conversation_and_is_recorded():
    transport = MemoryTransport(answer_words(["a", "b", "c", "d"], cut_after=2))
    src, ended = source(transport, "--max-tokens", "4", "--turns", "3")
    records = run_conversation(src, "sse", "MemoryUser", src.opts.limits)
    assert len(records) == 1 and len(transport.sent) == 1
    assert records[0].outcome == "truncated" and records[0].tokens == 2
    assert ended == records


def test_a_silent_stop_is_silent_truncation_and_the_stream_ids_are_the_sources():
    def stop_early(body: bytes):
        return [(0.0, HEAD), (0.01, _chunk("x", "stop", 1)), (0.0, b"data: [DONE]\n\n")]

    src, _ = source(MemoryTransport(stop_early), "--max-tokens", "8")
    src.tag = "pt"
    records = run_conversation(src, "sse", "MemoryUser", src.opts.limits)
    assert records[0].outcome == "silent_truncation"
    assert records[0].stream_id == "pt-1" and records[0].user_class == "MemoryUser"


def test_the_client_hangs_up_as_the_cancel_plan_draws():
    src, _ = source(
        MemoryTransport(answer_words(["w"] * 8)),
        "--max-tokens",
        "8",
        "--cancel-rate",
        "1",
        "--cancel-after",
        "3tok",
    )
    records = run_conversation(src, "sse", "MemoryUser", src.opts.limits)
    assert records[0].outcome == "client_cancelled" and records[0].tokens == 3


def test_a_stall_is_judged_on_the_scripted_clock():
    def stalls(body: bytes):
        return [(0.0, HEAD), (0.01, _chunk("x")), (30.0, _chunk("y"))]

    src, _ = source(MemoryTransport(stalls), "--max-tokens", "8", "--stall-timeout", "2s")
    rec = run_conversation(src, "sse", "MemoryUser", src.opts.limits)[0]
    assert rec.outcome == "stalled" and rec.e2e_s == pytest.approx(2.01)


def test_no_locust_was_imported():
    assert "locust" not in sys.modules or "streamslo.loadgen.base" in sys.modules
    with pytest.raises(ValueError, match="SSE only"):
        MemoryTransport(answer_words(["a"])).open("ws", LoadOptions.from_args([]).limits, True)
