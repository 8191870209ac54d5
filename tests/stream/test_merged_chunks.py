"""Merged chunks, the server's own counts, and the stop reasons that end a stream: the end-of-stream
rules of streamslo/stream/counts.py, driven by a scripted clock (no sockets).

The shapes are real engines' (docs/servers.md): llama.cpp sends no chunk for a token whose text
ends inside an unfinished UTF-8 sequence (its bytes come with the next token, and bytes still
unfinished at the end are never sent), puts ``timings.predicted_n`` on every chunk when asked
``timings_per_token``, and ends chat with an empty finish chunk and a ``choices: []`` usage chunk.
"""

from __future__ import annotations

import json

import pytest

from streamslo.results.columns import stream_row
from streamslo.stream.counts import Ledger, text_capacity
from streamslo.stream.timing import StreamExpectations, StreamRecord
from streamslo.stream.tracker import StreamTracker
from tests.stream.feed import Feed

DONE = b"data: [DONE]\n\n"
FORCED = StreamExpectations(max_tokens=8)
FREE = StreamExpectations(max_tokens=8, forced_length=False)


def event(obj: object) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def chat(delta: dict, finish: str | None = None, predicted: int | None = None) -> bytes:
    chunk: dict[str, object] = {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if predicted is not None:
        chunk["timings"] = {"predicted_n": predicted, "predicted_ms": 1.0}
    return event(chunk)


def usage_chunk(n: int, predicted: int | None = None) -> bytes:
    chunk: dict[str, object] = {
        "choices": [],
        "usage": {"prompt_tokens": 2, "completion_tokens": n, "total_tokens": n + 2},
    }
    if predicted is not None:
        chunk["timings"] = {"predicted_n": predicted}
    return event(chunk)


def run(expect: StreamExpectations, chunks: list[bytes]) -> StreamRecord:
    rec = StreamRecord("s", "sse", "T", 1000.0, 10.0)
    tr = Feed(StreamTracker(rec, expect))
    tr.on_response(10.0, 200, "text/event-stream")
    for i, data in enumerate(chunks):
        tr.on_sse_bytes(10.1 + 0.01 * i, data)
    tr.on_eof(11.0, True)
    return rec


def llamacpp(
    texts: list[str], counts: list[int] | None, total: int, tail: bool = True
) -> list[bytes]:
    """A llama.cpp chat stream: the role chunk, one chunk per text (with ``predicted_n`` when
    ``counts``), the empty finish chunk, the usage chunk, ``[DONE]``."""
    out = [chat({"role": "assistant", "content": None}, predicted=0 if counts else None)]
    for i, text in enumerate(texts):
        out.append(chat({"content": text}, predicted=counts[i] if counts else None))
    if tail:
        out.append(chat({}, "length", predicted=total if counts else None))
    out.append(usage_chunk(total, predicted=total if counts else None))
    out.append(DONE)
    return out


# --- how much a chunk's text can hold ---------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "capacity"),
    [
        ("a", 1),
        (" the", 1),
        ("é", 3),  # 2 bytes: up to 2 byte tokens held back, plus the chunk's own
        ("中", 4),
        ("😀", 5),
        ("\ufffd", 4),  # what a server sends for bytes it could not decode: up to 3 of them
        ("a中b", 4),
    ],
)
def test_text_capacity(text, capacity):
    assert text_capacity(text) == capacity


def test_a_ledger_explains_only_what_multibyte_text_can_hold():
    ledger = Ledger()
    ledger.add_text("abc")
    assert not ledger.explains(1)  # ASCII holds one token an arrival: a missing one was lost
    ledger.add_text("中")
    assert ledger.explains(3) and not ledger.explains(4)
    ledger.tail = True
    assert ledger.explains(6) and not ledger.explains(7)
    ledger.counted = True  # the server counted its tokens chunk by chunk: its count stands
    assert ledger.explains(30)


# --- llama.cpp without its counts (Ollama, LM Studio, any server that gives none) -------------


def test_a_merged_multibyte_chunk_is_not_a_truncation():
    # 8 tokens: "中" took three byte tokens, sent as one chunk with the third.
    rec = run(FORCED, llamacpp(["a", "b", "中", "c", "d", "e"], None, 8))
    assert rec.outcome == "ok", rec.error
    assert rec.tokens == 6  # arrivals: one ITL gap each
    assert len(rec.gap_s) == 5
    assert stream_row(rec)["tokens"] == 8  # the stream's tokens, by the server's count


def test_unfinished_bytes_at_the_end_are_the_tail_of_a_multibyte_stream():
    # The last two tokens were the first bytes of a character never finished: never sent.
    rec = run(FORCED, llamacpp(["é", "a", "b", "c", "d"], None, 8))
    assert rec.outcome == "ok", rec.error
    assert stream_row(rec)["tokens"] == 8


def test_a_lost_ascii_chunk_is_a_silent_truncation_naming_both_numbers():
    rec = run(FORCED, llamacpp(["a", "b", "c", "d", "e", "f", "g"], None, 8))
    assert rec.outcome == "silent_truncation"
    assert rec.error == "7 token positions arrived of 8 the server counted"
    assert stream_row(rec)["tokens"] == 7  # positions that never arrived are not counted


def test_more_missing_than_the_text_can_hold_is_a_silent_truncation():
    # "é" holds 3 tokens, the tail 3 more: 7 of 9 at most.
    rec = run(StreamExpectations(max_tokens=7), llamacpp(["a", "é", "b"], None, 7))
    assert rec.outcome == "ok", rec.error
    rec = run(StreamExpectations(max_tokens=9), llamacpp(["a", "é", "b"], None, 9))
    assert rec.outcome == "silent_truncation"
    assert "3 token positions arrived of 9" in rec.error


# --- llama.cpp with its counts (timings_per_token) -------------------------------------------


def test_predicted_n_counts_a_merged_chunk_exactly():
    rec = run(FORCED, llamacpp(["a", "b", "中", "c", "d", "e"], [1, 2, 5, 6, 7, 8], 8))
    assert rec.outcome == "ok", rec.error
    assert rec.tokens == 8 == stream_row(rec)["tokens"]
    assert len(rec.gap_s) == 5  # six arrivals


def test_predicted_n_on_the_finish_chunk_counts_the_unsent_tail():
    rec = run(FORCED, llamacpp(["é", "a", "b", "c", "d"], [2, 3, 4, 5, 6], 8))
    assert rec.outcome == "ok", rec.error
    assert rec.tokens == 8
    # the tail's tokens arrived with the finish chunk: one more arrival, one more gap
    assert len(rec.gap_s) == 5


def test_a_count_jump_is_the_servers_word():
    """A token with no text gets no chunk from llama.cpp (an end-of-sequence token under
    ignore_eos): the next chunk's count covers it. A chunk lost on the way looks the same:
    with a running count, the count is believed (docs/outcomes.md)."""
    chunks = llamacpp(["a", "b", "c", "e", "f", "g", "h"], [1, 2, 3, 5, 6, 7, 8], 8)
    rec = run(FORCED, chunks)
    assert rec.outcome == "ok", rec.error
    assert rec.tokens == 8
    assert len(rec.gap_s) == 6  # seven arrivals


def test_continuous_usage_counts_like_predicted_n():
    # vLLM's continuous_usage_stats: a usage on every chunk, cumulative.
    def c(text: str, n: int, finish: str | None = None) -> bytes:
        return event(
            {
                "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}],
                "usage": {"prompt_tokens": 2, "completion_tokens": n},
            }
        )

    # The last token's text held back: its chunk is empty, with the finish and the count.
    chunks = [c("a", 1), c("b", 2), c("é", 4), c("c", 5), c("d", 6), c("e", 7), c("", 8, "length")]
    rec = run(FORCED, [*chunks, DONE])
    assert rec.outcome == "ok", rec.error
    assert rec.tokens == 8


# --- the count rules ------------------------------------------------------------------------


def test_an_empty_finish_chunk_is_not_a_token_the_count_cannot_place():
    """All 24 chunks of max_tokens 24, finish length, an empty finish chunk, usage 29: the 25th
    position never arrived (it was read malformed, 'more positions than max_tokens')."""
    expect = StreamExpectations(max_tokens=24)
    chunks = [chat({"content": f" t{i}"}) for i in range(24)]
    chunks += [chat({"content": ""}, "length"), usage_chunk(29), DONE]
    rec = run(expect, chunks)
    assert rec.outcome == "silent_truncation"
    assert rec.error == "24 token positions arrived of 29 the server counted"
    assert rec.tokens == 24


def test_the_last_tokens_empty_chunk_still_counts_when_it_closes_the_count():
    """vLLM: the finish rides on the last token's chunk, its text held back."""
    chunks = [chat({"content": f" t{i}"}) for i in range(7)]
    chunks += [chat({"content": ""}, "length"), usage_chunk(8), DONE]
    rec = run(FORCED, chunks)
    assert rec.outcome == "ok", rec.error
    assert rec.tokens == 8


# --- stop reasons ---------------------------------------------------------------------------


@pytest.mark.parametrize("reason", ["abort", "error"])
@pytest.mark.parametrize("expect", [FORCED, FREE], ids=["forced", "free"])
def test_a_stop_reason_that_says_the_server_gave_up_is_an_error(reason, expect):
    """vLLM ends a request its engine aborted with HTTP 200, finish_reason abort and [DONE]."""
    chunks = [chat({"content": f" t{i}"}) for i in range(3)]
    chunks += [chat({}, reason), usage_chunk(3), DONE]
    rec = run(expect, chunks)
    assert rec.outcome == "error_event"
    assert f"stop reason {reason!r}" in rec.error and "gave up" in rec.error


def test_content_filter_is_a_silent_truncation_without_a_forced_length():
    chunks = [chat({"content": " t0"}), chat({}, "content_filter"), usage_chunk(1), DONE]
    rec = run(FREE, chunks)
    assert rec.outcome == "silent_truncation"


@pytest.mark.parametrize("reason", ["stop", "tool_calls", "eos_token"])
def test_ordinary_stop_reasons_end_a_free_stream(reason):
    chunks = [chat({"content": " t0"}), chat({}, reason), usage_chunk(1), DONE]
    rec = run(FREE, chunks)
    assert rec.outcome == "ok", rec.error
    assert rec.finish_reason == reason


def test_a_count_on_the_finish_chunk_alone_is_the_final_count_not_a_running_one():
    """llama.cpp without timings_per_token puts timings on its last chunk only; the bundled server
    and others put the usage on the finish chunk: the arrivals before it are explained by their
    text, and the finish chunk is no token."""
    chunks = [chat({"content": t}) for t in ["a", "b", "中", "c"]]
    last = {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}
    last["usage"] = {"prompt_tokens": 2, "completion_tokens": 6}
    last["timings"] = {"predicted_n": 6}
    rec = run(StreamExpectations(max_tokens=6), [*chunks, event(last), DONE])
    assert rec.outcome == "ok", rec.error
    assert rec.tokens == 4 and stream_row(rec)["tokens"] == 6
    plain = [chat({"content": t}) for t in ["a", "b"]]
    last["usage"] = {"prompt_tokens": 2, "completion_tokens": 2}
    last["timings"] = {"predicted_n": 2}
    rec = run(StreamExpectations(max_tokens=2), [*plain, event(last), DONE])
    assert rec.outcome == "ok", rec.error
    assert rec.tokens == 2


def test_llamacpp_tokens_after_its_last_count_are_tokens_without_text():
    """llama.cpp's finish chunk carries no timings, and under ignore_eos a model that reached
    its end keeps emitting end-of-sequence tokens, which have no text: a real stream sent 34
    chunks (counts 1..34) and then its usage chunk said 64 (predicted_n 64)."""
    texts = [f" w{i}" for i in range(34)]
    chunks = llamacpp(texts, list(range(1, 35)), 64)
    chunks[-3] = chat({}, "length")  # the finish chunk, as llama.cpp sends it: no timings
    rec = run(StreamExpectations(max_tokens=64), chunks)
    assert rec.outcome == "ok", rec.error
    assert rec.tokens == 34 and stream_row(rec)["tokens"] == 64
    # Without the running count (a server that gives none), the same stream is short.
    plain = llamacpp(texts, None, 64)
    rec = run(StreamExpectations(max_tokens=64), plain)
    assert rec.outcome == "silent_truncation"
    assert rec.error == "34 token positions arrived of 64 the server counted"


def test_a_natural_end_may_count_its_end_of_sequence_token():
    """llama.cpp counts the end-of-sequence token that ended the answer: usage is one more than
    the tokens with text. Only for an engine known to (a run sets it for llama.cpp); two more
    is a loss."""
    llama = StreamExpectations(max_tokens=8, forced_length=False, stop_token_counted=True)
    texts = [chat({"content": t}) for t in ["a", "b", "c"]]
    rec = run(llama, [*texts, chat({}, "stop"), usage_chunk(4), DONE])
    assert rec.outcome == "ok", rec.error
    rec = run(FREE, [*texts, chat({}, "stop"), usage_chunk(4), DONE])
    assert rec.outcome == "silent_truncation"  # any other server: one token missing
    rec = run(llama, [*texts, chat({}, "stop"), usage_chunk(5), DONE])
    assert rec.outcome == "silent_truncation"
    rec = run(llama, [*texts, chat({}, "length"), usage_chunk(4), DONE])
    assert rec.outcome == "silent_truncation"  # a length end has no stop token


# --- the Responses API's whole text -----------------------------------------------------------


def _responses(deltas: list[str], final_text: str | None, output_tokens: int) -> bytes:
    def ev(kind: str, **fields: object) -> bytes:
        return f"event: {kind}\n".encode() + event({"type": kind, **fields})

    out = ev("response.created", response={"status": "in_progress"})
    out += b"".join(ev("response.output_text.delta", delta=d) for d in deltas)
    output = (
        []
        if final_text is None
        else [{"type": "message", "content": [{"type": "output_text", "text": final_text}]}]
    )
    response = {
        "status": "incomplete",
        "incomplete_details": {"reason": "max_output_tokens"},
        "output": output,
        "usage": {"input_tokens": 3, "output_tokens": output_tokens},
    }
    return out + ev("response.completed", response=response)


def _run_responses(raw: bytes) -> StreamRecord:
    from streamslo.stream.dialects import tracker_for

    rec = StreamRecord("s", "sse", "T", 1000.0, 10.0)
    tr = Feed(tracker_for("openai-responses", rec, StreamExpectations(max_tokens=6)))
    tr.on_response(10.0, 200, "text/event-stream")
    tr.on_sse_bytes(10.1, raw)
    tr.on_eof(10.2, True)
    return rec


def test_responses_whose_final_text_equals_the_deltas_lost_nothing():
    """vLLM sends no delta for a token its detokenizer holds back (a special token, a byte of
    a character): 4 deltas for 6 tokens, the final response holding the same text."""
    rec = _run_responses(_responses(["a", "b", "c", "d"], "abcd", 6))
    assert rec.outcome == "ok", rec.error
    assert stream_row(rec)["tokens"] == 6
    assert rec.finish_reason == "max_output_tokens"  # completed holding an incomplete response


def test_responses_whose_final_text_differs_lost_a_delta():
    rec = _run_responses(_responses(["a", "b", "d"], "abcd", 6))
    assert rec.outcome == "silent_truncation"
    assert rec.error == "3 token deltas arrived of 6 the server counted"
    rec = _run_responses(_responses(["a", "b", "c", "d"], None, 6))  # no text to compare
    assert rec.outcome == "silent_truncation"
