"""The proxy's decisions (no I/O): token bucket, delay line, cut rules, closes, selection, all
driven by a scripted clock."""

from __future__ import annotations

import random

import pytest

from streamslo.proxy.config import Direction, Faults
from streamslo.proxy.schedule import (
    Close,
    Eof,
    FaultSchedule,
    Idle,
    Pipe,
    Reset,
    Selector,
    TokenBucket,
    Wait,
    Write,
)


def rng() -> random.Random:
    return random.Random(7)


def drain(pipe: Pipe, t: float, until: float = 1e9) -> tuple[list[tuple[float, object]], float]:
    """Run the pipe like the engine does, jumping the clock over each Wait.

    Returns ([(time, action)], the clock at the end): Writes carry their bytes, terminal
    actions their class."""
    out: list[tuple[float, object]] = []
    while t <= until:
        action = pipe.poll(t)
        if isinstance(action, Wait):
            assert action.seconds > 0
            t += action.seconds
            continue
        if action is Idle:
            break
        out.append((t, action.data if isinstance(action, Write) else action))
        if action in (Eof, Reset, Close):
            break
    return out, t


def data_of(events) -> bytes:
    return b"".join(a for _, a in events if isinstance(a, bytes))


# --- token bucket ----------------------------------------------------------------------------


def test_token_bucket_starts_full_then_paces_at_rate():
    b = TokenBucket(rate=1000, size=100, now=0.0)
    assert b.delay(0.0, 100) == 0
    b.take(0.0, 100)
    assert b.delay(0.0, 100) == pytest.approx(0.1)
    assert b.delay(0.05, 100) == pytest.approx(0.05)
    assert b.delay(0.1, 100) == 0
    # Asking for more than the bucket holds waits only for a full bucket.
    b.take(0.1, 100)
    assert b.delay(0.1, 10_000) == pytest.approx(0.1)


def test_token_bucket_saves_no_more_than_its_size():
    b = TokenBucket(rate=1000, size=50, now=0.0)
    b.take(0.0, 50)
    assert b.delay(100.0, 50) == 0  # an hour idle saves only 50 tokens
    b.take(100.0, 50)
    assert b.delay(100.0, 1) == pytest.approx(0.001)


def test_token_bucket_rejects_nonsense():
    with pytest.raises(ValueError):
        TokenBucket(rate=0, size=10, now=0.0)


# --- pass-through ----------------------------------------------------------------------------


def test_no_faults_writes_at_once_in_order():
    p = Pipe(None, rng(), 0.0)
    p.feed(1.0, b"abc")
    p.feed(1.0, b"def")
    assert p.buffered == 6
    events, _ = drain(p, 1.0)
    assert [a for _, a in events] == [b"abc", b"def"]
    assert all(t == 1.0 for t, _ in events)
    assert p.buffered == 0
    assert p.poll(1.0) is Idle


def test_eof_passes_after_the_data():
    p = Pipe(None, rng(), 0.0)
    p.feed(0.0, b"x")
    p.feed_eof(0.0)
    events, _ = drain(p, 0.0)
    assert [a for _, a in events] == [b"x", Eof]
    p.feed(0.1, b"late")  # nothing after a close
    assert p.poll(0.1) is Idle


# --- latency and jitter ----------------------------------------------------------------------


def test_latency_is_a_delay_line_not_a_throttle():
    p = Pipe(Faults(latency_s=0.2), rng(), 0.0)
    for i in range(10):  # ten pieces, 10 ms apart
        p.feed(i * 0.01, bytes([65 + i]))
    events, _ = drain(p, 0.0)
    times = [t for t, _ in events]
    # each piece leaves 200 ms after it arrived: pieces overlap in flight, none waits for the
    # previous one's delay (a sleep per read would end at 2 s)
    assert times == pytest.approx([0.2 + i * 0.01 for i in range(10)])
    assert data_of(events) == b"ABCDEFGHIJ"


def test_jitter_delays_but_never_reorders():
    f = Faults(latency_s=0.05, jitter_s=0.1)
    p = Pipe(f, random.Random(1), 0.0)
    sent = [f"<{i}>".encode() for i in range(200)]
    for i, piece in enumerate(sent):
        p.feed(i * 0.001, piece)
    events, _ = drain(p, 0.0)
    times = [t for t, _ in events]
    assert times == sorted(times)
    assert data_of(events) == b"".join(sent)
    # every piece is delayed by at least the latency and at most latency + jitter, unless it
    # queued behind a later-jittered piece (then it leaves with that one)
    for i, (t, _) in enumerate(events):
        assert t >= i * 0.001 + 0.05 - 1e-9
    assert max(times) <= 0.199 + 0.05 + 0.1 + 1e-9
    extra = [t - i * 0.001 - 0.05 for i, (t, _) in enumerate(events)]
    assert max(extra) > 0.05  # the jitter did something


def test_jitter_is_seeded():
    def times(seed: int) -> list[float]:
        p = Pipe(Faults(jitter_s=0.1), random.Random(seed), 0.0)
        for i in range(20):
            p.feed(i * 0.01, b"x")
        return [t for t, _ in drain(p, 0.0)[0]]

    assert times(3) == times(3)
    assert times(3) != times(4)


# --- bandwidth -------------------------------------------------------------------------------


def test_bandwidth_paces_bytes():
    p = Pipe(Faults(bandwidth=1000, burst=100), rng(), 0.0)
    p.feed(0.0, b"a" * 1000)
    events, end = drain(p, 0.0)
    assert data_of(events) == b"a" * 1000
    assert all(len(a) <= 100 for _, a in events)
    # the first 100 bytes leave at once (full bucket), the other 900 at 1000 B/s
    assert end == pytest.approx(0.9)
    assert events[-1][0] == pytest.approx(0.9)


def test_bandwidth_default_bucket_is_20ms():
    assert Faults(bandwidth=5000).bucket_size == 100
    assert Faults(bandwidth=10).bucket_size == 1


def test_latency_then_bandwidth():
    p = Pipe(Faults(latency_s=0.5, bandwidth=100, burst=10), rng(), 0.0)
    p.feed(0.0, b"b" * 20)
    events, _ = drain(p, 0.0)
    assert [t for t, _ in events] == pytest.approx([0.5, 0.6])


# --- byte-count cuts ---------------------------------------------------------------------------


def test_reset_after_lets_exactly_n_bytes_through_then_resets():
    p = Pipe(Faults(reset_after=10), rng(), 0.0)
    p.feed(0.0, b"0123456")
    assert p.fired is None
    p.feed(0.1, b"789abcdef")
    assert p.fired == "reset"
    assert p.passed == 10 and p.dropped == 6
    events, _ = drain(p, 0.0)
    assert data_of(events) == b"0123456789"
    assert events[-1][1] is Reset


def test_reset_after_exact_count_does_not_fire_without_a_further_byte():
    p = Pipe(Faults(reset_after=4), rng(), 0.0)
    p.feed(0.0, b"abcd")
    p.feed_eof(0.0)
    events, _ = drain(p, 0.0)
    assert [a for _, a in events] == [b"abcd", Eof]
    assert p.fired is None


def test_reset_after_zero_resets_on_the_first_byte():
    p = Pipe(Faults(reset_after=0), rng(), 0.0)
    assert p.poll(0.0) is Idle  # nothing yet: the server has not answered
    p.feed(0.3, b"HTTP/1.1 200 OK\r\n")
    events, _ = drain(p, 0.0)
    assert [a for _, a in events] == [Reset]
    assert events[0][0] == 0.3


def test_reset_is_delayed_like_the_data():
    p = Pipe(Faults(reset_after=2, latency_s=0.1), rng(), 0.0)
    p.feed(0.0, b"abc")
    events, _ = drain(p, 0.0)
    assert events == [(pytest.approx(0.1), b"ab"), (pytest.approx(0.1), Reset)]


def test_blackhole_darkens_both_flows_and_swallows_the_upstream_close():
    s = FaultSchedule(Faults(blackhole_after=5), rng(), 0.0)
    s.feed(False, 0.0, b"request")  # up: not faulted with direction down
    s.feed(True, 0.1, b"0123456789")
    assert s.blackholed and s.down.fired == "blackhole"
    assert data_of(drain(s.down, 0.1)[0]) == b"01234"
    s.feed(False, 0.2, b"next request")  # discarded: the connection is dark both ways
    assert s.up.dropped == len(b"next request")
    s.feed_eof(True, 0.3)  # the upstream hangs up: swallowed, the client keeps hearing silence
    s.feed_reset(True, 0.3)
    assert s.down.poll(10.0) is Idle
    s.feed_eof(False, 5.0)  # the client gives up: the connection ends
    assert s.down.poll(5.0) is Close


def test_client_reset_on_blackholed_connection_resets():
    s = FaultSchedule(Faults(blackhole_after=0), rng(), 0.0)
    s.feed(True, 0.0, b"x")
    s.feed_reset(False, 1.0)
    assert s.down.poll(1.0) is Reset


def test_smaller_count_wins():
    p = Pipe(Faults(reset_after=100, blackhole_after=3), rng(), 0.0)
    p.feed(0.0, b"abcdef")
    assert p.fired == "blackhole"
    p2 = Pipe(Faults(reset_after=3, blackhole_after=100), rng(), 0.0)
    p2.feed(0.0, b"abcdef")
    assert p2.fired == "reset"


def test_reset_darkens_the_other_flow():
    s = FaultSchedule(Faults(reset_after=1), rng(), 0.0)
    s.feed(True, 0.0, b"ab")
    s.feed(False, 0.0, b"more request")
    assert s.up.passed == 0 and s.up.dropped == 12


# --- slow close ------------------------------------------------------------------------------


def test_slow_close_holds_the_close_back():
    p = Pipe(Faults(slow_close_s=2.0), rng(), 0.0)
    p.feed(1.0, b"data: [DONE]\n\n")
    p.feed_eof(1.0)
    assert p.slow_close_pending
    events, _ = drain(p, 1.0)
    assert events[0] == (1.0, b"data: [DONE]\n\n")  # the data is not held back
    assert events[1] == (pytest.approx(3.0), Eof)
    assert not p.slow_close_pending


def test_source_reset_is_passed_on_after_the_data():
    p = Pipe(Faults(latency_s=0.1), rng(), 0.0)
    p.feed(0.0, b"abc")
    p.feed_reset(0.05)
    events, _ = drain(p, 0.0)
    assert events == [(pytest.approx(0.1), b"abc"), (pytest.approx(0.15), Reset)]


# --- direction -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("direction", "down_delayed", "up_delayed"),
    [("down", True, False), ("up", False, True), ("both", True, True)],
)
def test_direction(direction, down_delayed, up_delayed):
    s = FaultSchedule(Faults(latency_s=1.0, direction=Direction(direction)), rng(), 0.0)
    s.feed(True, 0.0, b"d")
    s.feed(False, 0.0, b"u")
    assert isinstance(s.down.poll(0.0), Wait) == down_delayed
    assert isinstance(s.up.poll(0.0), Wait) == up_delayed


def test_room_is_bounded_by_max_buffer():
    p = Pipe(Faults(latency_s=1.0), rng(), 0.0)
    p.feed(0.0, b"x" * 1000)
    assert not p.has_room(1000)
    assert p.has_room(1001)
    drain(p, 0.0)
    assert p.has_room(1)


# --- which connections ---------------------------------------------------------------------


def test_every_nth_connection():
    sel = Selector(Faults(latency_s=0.1, every=3))
    assert [sel.choose(i)[0] for i in range(1, 10)] == [False, False, True] * 3


def test_probability_is_seeded_and_close_to_p():
    picks = [
        Selector(Faults(latency_s=0.1, probability=0.3, seed=5)).choose(i)[0]
        for i in range(1, 2001)
    ]
    again = [
        Selector(Faults(latency_s=0.1, probability=0.3, seed=5)).choose(i)[0]
        for i in range(1, 2001)
    ]
    other = [
        Selector(Faults(latency_s=0.1, probability=0.3, seed=6)).choose(i)[0]
        for i in range(1, 2001)
    ]
    assert picks == again and picks != other
    assert sum(picks) / len(picks) == pytest.approx(0.3, abs=0.04)


def test_no_fault_set_faults_nothing():
    assert not Selector(Faults()).choose(1)[0]
    assert Selector(Faults(slow_close_s=1)).choose(1)[0]


def test_each_flow_has_its_own_jitter_sequence():
    """With jitter both ways, a flow's delays do not depend on how the reads of the two flows
    interleave."""
    f = Faults(jitter_s=0.1, direction=Direction.BOTH)

    def down_times(interleave: bool) -> list[float]:
        s = FaultSchedule(f, random.Random(9), 0.0)
        for i in range(10):
            if interleave:
                s.feed(False, i * 0.01, b"u")
            s.feed(True, i * 0.01, b"d")
        return [t for t, _ in drain(s.down, 0.0)[0]]

    assert down_times(True) == down_times(False)
