"""The finished-stream event and its listeners (streamslo.loadgen.listeners), without Locust."""

from __future__ import annotations

import pytest

from streamslo.loadgen.listeners import (
    Hook,
    LocustStats,
    RelayFlush,
    RelayRow,
    StreamFailure,
    WriteRow,
    csv_safe_record,
)
from streamslo.stream.cause import Cause
from streamslo.stream.outcome import Outcome
from streamslo.stream.timing import StreamRecord


def _rec(outcome: str = "ok", **kw) -> StreamRecord:
    rec = StreamRecord(
        stream_id="p1-1", protocol="sse", user_class="U", started_at=100.0, t0=0.0, **kw
    )
    rec.outcome = outcome
    rec.ttft_s, rec.e2e_s, rec.gap_s, rec.bytes = 0.05, 0.5, [0.01, 0.03], 123
    return rec


def test_a_hook_runs_its_listeners_in_order_and_lets_one_go():
    hook: Hook[int] = Hook()
    seen: list[tuple[str, int]] = []
    first = hook.add_listener(lambda v: seen.append(("a", v)))
    hook.add_listener(lambda v: seen.append(("b", v)))
    hook.fire(1)
    hook.remove_listener(first)
    hook.fire(2)
    assert seen == [("a", 1), ("b", 1), ("b", 2)] and len(hook) == 1
    with pytest.raises(ValueError):
        hook.remove_listener(first)


def test_a_listener_that_raises_stops_the_event_and_reaches_the_caller():
    hook: Hook[int] = Hook()
    seen: list[int] = []

    def boom(v: int) -> None:
        raise OSError("disk full")

    hook.add_listener(boom)
    hook.add_listener(seen.append)
    with pytest.raises(OSError, match="disk full"):
        hook.fire(1)
    assert seen == []


def _stats(mode: str, rec: StreamRecord) -> list[dict]:
    fired: list[dict] = []
    LocustStats(lambda **kw: fired.append(kw), mode)(rec)
    return fired


def test_locust_stats_per_stream():
    fired = _stats("per-stream", _rec())
    assert [(f["name"], round(f["response_time"], 6)) for f in fired] == [
        ("token ttft", 50.0),
        ("token itl", 20.0),
        ("token max_gap", 30.0),
        ("stream", 500.0),
    ]
    assert {f["request_type"] for f in fired} == {"SSE"}
    assert fired[-1]["response_length"] == 123 and fired[-1]["exception"] is None


def test_locust_stats_per_gap_off_and_failures():
    assert [f["name"] for f in _stats("per-gap", _rec())] == [
        "token ttft",
        "token itl",
        "token itl",
        "stream",
    ]
    assert [f["name"] for f in _stats("off", _rec())] == ["token ttft", "stream"]
    assert _stats("per-stream", _rec(Outcome.CANCELLED)) == []
    assert [f["name"] for f in _stats("per-stream", _rec("client_cancelled"))] == [
        "token ttft",
        "token itl",
        "token max_gap",
    ]
    bad = _rec("truncated")
    bad.error = "x" * 100 + " after 12 tokens"
    bad.cause = Cause.CUT
    exc = _stats("per-stream", bad)[-1]["exception"]
    assert isinstance(exc, StreamFailure)
    assert str(exc) == "truncated (cut): " + "x" * 100 + " after N tokens"  # the group
    assert exc.text == bad.error  # the exact text travels with it (shown per group)


def test_rows_are_made_safe_for_a_spreadsheet_before_they_leave():
    rec = _rec("error")
    rec.error = "=HYPERLINK(1)"
    added: list[StreamRecord] = []

    class Sink:
        running = True

        def add(self, r: StreamRecord) -> None:
            added.append(r)

    WriteRow(Sink())(rec)  # type: ignore[arg-type]
    RelayRow(Sink())(rec)  # type: ignore[arg-type]
    assert [r.error for r in added] == [csv_safe_record(rec).error] * 2
    assert added[0].error != rec.error and rec.error == "=HYPERLINK(1)"


def test_a_worker_sends_its_stats_then_its_final_batch_only_at_the_end():
    calls: list[str] = []

    class Sender:
        running = True

        def flush(self, final: bool = False) -> None:
            calls.append(f"flush final={final}")

    listener = RelayFlush(Sender(), lambda: calls.append("stats"))  # type: ignore[arg-type]
    listener(False)
    assert calls == []
    listener(True)
    assert calls == ["stats", "flush final=True"]


def test_one_way_of_failing_is_one_row_of_locusts_failures():
    """Locust groups failures by their message, the group of the one rule: outcome, cause, the
    text with counts and durations as N (the exact text stays in streams.csv), statuses and
    close codes kept."""
    from streamslo.loadgen.listeners import failure_text

    a = failure_text(
        "silent_truncation",
        "positions_missing",
        "34 token positions arrived of 64 the server counted",
    )
    b = failure_text(
        "silent_truncation",
        "positions_missing",
        "12 token positions arrived of 64 the server counted",
    )
    assert a == b
    assert (
        a
        == "silent_truncation (positions_missing): N token positions arrived of N the server counted"
    )
    assert failure_text("http_5xx", "http_status", "HTTP 503: overloaded") == (
        "http_5xx (http_status): HTTP 503: overloaded"
    )
    assert failure_text("truncated", "cut", "ws close 1011 before [DONE]").endswith(
        "ws close 1011 before [DONE]"
    )
    assert failure_text("stalled", "", "") == "stalled: (no error text recorded)"
    # the cause splits what the words alone would not
    assert failure_text("malformed", "bad_message", "x") != failure_text(
        "malformed", "broken_framing", "x"
    )


def test_the_owners_listeners_are_replaced_and_an_outside_listener_stays():
    """The recorder rewires its own listeners whenever one comes or goes (the relay, each test
    start); a listener someone else added must survive that (it was dropped before)."""
    from streamslo.loadgen.listeners import Hook

    seen: list[str] = []
    hook: Hook[int] = Hook()
    hook.set_own([lambda v: seen.append(f"writer {v}")])
    hook.add_listener(lambda v: seen.append(f"outside {v}"))
    hook.fire(1)
    hook.set_own([lambda v: seen.append(f"relay {v}"), lambda v: seen.append(f"stats {v}")])
    hook.fire(2)
    assert seen == ["writer 1", "outside 1", "relay 2", "stats 2", "outside 2"]
    assert len(hook) == 3
