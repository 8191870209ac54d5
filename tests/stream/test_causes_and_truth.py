"""Each stream's typed cause is decided where its outcome is (no caller reads the error's words
to decide again); a reference reply judges an ordinary stop; what a run can see follows from its
requests."""

from __future__ import annotations

import json

import pytest

from streamslo.stream.cause import CAUSES, Cause, default_cause
from streamslo.stream.exchange import SSEExchange
from streamslo.stream.outcome import OUTCOMES, Outcome
from streamslo.stream.timing import StreamExpectations, StreamRecord
from streamslo.stream.tracker import StreamTracker
from streamslo.stream.truth import CHECKS, ForcedLength, Truth, forcing_text, parse_forcing


def chunk(text: str | None = None, finish: str | None = None, usage: int | None = None) -> str:
    obj: dict[str, object] = {
        "object": "chat.completion.chunk",
        "choices": [
            {
                "index": 0,
                "delta": {} if text is None else {"content": text},
                "finish_reason": finish,
            }
        ],
    }
    if usage is not None:
        obj = {
            "object": "chat.completion.chunk",
            "choices": [],
            "usage": {"completion_tokens": usage},
        }
    return json.dumps(obj)


def stream(
    texts: list[str],
    finish: str | None,
    expect: StreamExpectations,
    usage: int | None = None,
    done: bool = True,
) -> StreamRecord:
    rec = StreamRecord("s", "sse", "t", 0.0, 0.0)
    tr = StreamTracker(rec, expect, collect_text=True)
    tr.begin(0.01, 200)
    t = 0.01
    for text in texts:
        t += 0.01
        tr.message(t, chunk(text))
    if finish is not None:
        tr.message(t, chunk(None, finish))
    if usage is not None:
        tr.message(t, chunk(usage=usage))
    if done:
        tr.message(t, "[DONE]")
    else:
        tr.end(t)  # the body's clean end, for a run without a terminal marker
    return rec


FORCED = StreamExpectations(max_tokens=4)
FREE = StreamExpectations(max_tokens=4, forced_length=False)


@pytest.mark.parametrize(
    ("texts", "finish", "expect", "usage", "outcome", "cause"),
    [
        (["a", "b", "c", "d"], "length", FORCED, 4, "ok", "complete"),
        (["a", "b"], "stop", FORCED, 2, "silent_truncation", "stopped_early"),
        (["a", "b", "c", "d"], "length", FORCED, 3, "malformed", "over_usage"),
        (["a", "b"], "length", FORCED, 2, "silent_truncation", "counted_short"),
        (["a", "b"], "stop", FREE, 4, "silent_truncation", "positions_missing"),
        (["a"], "content_filter", FREE, 1, "silent_truncation", "withheld"),
        (["a"], "abort", FREE, 1, "error_event", "gave_up"),
        (["a"], None, FREE, None, "malformed", "no_stop_reason"),
    ],
)
def test_the_cause_is_decided_with_the_outcome(texts, finish, expect, usage, outcome, cause):
    rec = stream(texts, finish, expect, usage)
    assert (rec.outcome, rec.cause) == (outcome, cause), rec.error


def test_a_body_without_a_terminal_marker_that_ends_before_a_stop_reason_is_a_cut():
    """With --no-done-marker the stop reason is the only sign of a whole answer: a body that
    ended before it was cut (a gateway that gave up and closed cleanly)."""
    expect = StreamExpectations(max_tokens=4, done_marker=False)
    rec = stream(["a", "b"], None, expect, done=False)
    assert (rec.outcome, rec.cause) == (Outcome.TRUNCATED, Cause.NO_STOP_REASON)
    whole = stream(["a", "b", "c", "d"], "length", expect, done=False)
    assert (whole.outcome, whole.cause) == (Outcome.OK, Cause.COMPLETE)


def test_the_exchange_names_a_clean_end_before_the_marker_and_a_close_mid_body():
    head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    body = b"data: " + chunk("a").encode() + b"\n\n"
    for tail, cause in ((b"0\r\n\r\n", Cause.NO_TERMINAL), (b"", Cause.CUT)):
        rec = StreamRecord("s", "sse", "t", 0.0, 0.0)
        ex = SSEExchange(StreamTracker(rec, FORCED), stall_timeout=5, request_timeout=30)
        ex.receive(0.1, head + b"%x\r\n%s\r\n" % (len(body), body) + tail)
        ex.receive(0.2, b"")
        assert (rec.outcome, rec.cause) == (Outcome.TRUNCATED, cause)


@pytest.mark.parametrize(
    ("texts", "finish", "reference", "outcome", "verdict"),
    [
        (["Hello", " there"], "stop", "Hello there", "ok", "match"),
        (["Hello"], "stop", "Hello there", "silent_truncation", "prefix"),
        (["Hel", "lo"], "length", "Hello there", "ok", "match"),  # its own length ended it
        (["Goodbye"], "stop", "Hello there", "ok", "diverged"),
    ],
)
def test_an_ordinary_stop_is_judged_against_its_reference(
    texts, finish, reference, outcome, verdict
):
    expect = StreamExpectations(max_tokens=8, forced_length=False, reference=reference)
    rec = stream(texts, finish, expect)
    assert (rec.outcome, rec.reference) == (outcome, verdict), rec.error
    if verdict == "prefix":
        assert rec.cause == Cause.REFERENCE_PREFIX
        assert "its reference reply" in rec.error


def test_every_outcome_has_a_default_cause_and_causes_are_unique():
    assert len(CAUSES) == len(set(CAUSES))
    for o in OUTCOMES:
        assert default_cause(Outcome(o)) in Cause


def test_the_truth_follows_the_requests():
    t = Truth.of(forced=(ForcedLength.IGNORE_EOS,))
    assert t.missing == [] and t.silent_stop == "a forced length (ignore_eos)"
    assert t.lost_chunk == "one token per chunk, against the server's usage"
    merged = Truth.of(forced=(ForcedLength.MIN_NEW_TOKENS,), coalesced=True, done_marker=False)
    assert merged.cut == "the stop reason at the body's end" and merged.missing == ["lost_chunk"]
    blind = Truth.of(forced=(), usage=False, no_forcing="nothing works")
    assert blind.missing == ["silent_stop", "lost_chunk"]
    assert blind.why_not["silent_stop"] == "nothing works"
    assert blind.lines()[1] == "cannot see a silent stop: nothing works"
    ref = Truth.of(forced=(), reference="16 prompts")
    assert ref.silent_stop == "reference replies (16 prompts)"
    assert Truth.from_dict(ref.as_dict()) == ref
    assert Truth.from_dict({"no": "truth"}) is None
    assert set(CHECKS) == {"cut", "silent_stop", "lost_chunk"}


def test_the_forcing_reads_and_writes_its_means():
    assert parse_forcing("min_tokens+ignore_eos") == (
        ForcedLength.MIN_TOKENS,
        ForcedLength.IGNORE_EOS,
    )
    assert parse_forcing("none") == () and forcing_text(()) == "none"
    assert (
        forcing_text((ForcedLength.IGNORE_EOS, ForcedLength.MIN_TOKENS)) == "ignore_eos+min_tokens"
    )
    with pytest.raises(ValueError, match="'eos' is no forced length"):
        parse_forcing("eos")
    with pytest.raises(ValueError, match="none cannot be joined"):
        parse_forcing("none+min_tokens")
