"""The one error-grouping rule (streamslo.stream.error_groups): outcome, cause, the text with
its numbers masked; a group shown as its most frequent exact text with the group's count."""

from __future__ import annotations

import pytest

from streamslo.stream.error_groups import (
    MAX_TEXTS,
    NO_TEXT,
    ErrorTally,
    error_key,
    group_counts,
    mask_numbers,
    representative,
    with_similar,
)


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ("61 token positions arrived of 64", "N token positions arrived of N"),
        ("no token for 10.5s after 32 tokens", "no token for Ns after N tokens"),
        ("no response head for 250ms", "no response head for Nms"),
        ("an SSE line grew past 1048576 bytes", "an SSE line grew past N bytes"),
        ("HTTP 503: overloaded", "HTTP 503: overloaded"),  # a status names something
        ("ws close 1011 before [DONE]", "ws close 1011 before [DONE]"),
        ("[Errno 111] Connection refused", "[Errno 111] Connection refused"),
        ("status 429, retry after 2s", "status 429, retry after Ns"),
        ("model gpt2-xl-v3 not found", "model gpt2-xl-v3 not found"),  # inside a name: kept
        ("id p8e2546 3.5x slower", "id p8e2546 3.5x slower"),  # a number glued to a word
    ],
)
def test_counts_sizes_and_durations_are_masked_names_are_not(text: str, masked: str) -> None:
    assert mask_numbers(text) == masked


def test_the_key_is_outcome_cause_and_masked_text() -> None:
    a = error_key("silent_truncation", "positions_missing", "61 of 64 arrived")
    b = error_key("silent_truncation", "positions_missing", "62 of 64 arrived")
    assert a == b
    assert a != error_key("silent_truncation", "counted_short", "61 of 64 arrived")
    assert a != error_key("truncated", "positions_missing", "61 of 64 arrived")
    assert error_key("stalled", None, None) == ("stalled", "", NO_TEXT)
    assert error_key("stalled", float("nan"), "  ") == ("stalled", "", NO_TEXT)
    assert error_key("x", "c", "a  b\n c").text == "a b c"  # whitespace collapsed


def test_a_group_shows_its_most_frequent_text_ties_by_text() -> None:
    assert representative({"b 2": 3, "a 1": 3, "c 3": 1}) == "a 1"
    groups = group_counts(
        [
            ("truncated", "cut", "after 4 of 48 tokens", 5),
            ("truncated", "cut", "after 3 of 48 tokens", 4),
            ("truncated", "cut", "after 4 of 48 tokens", 2),  # the same text, another row
            ("truncated", "no_terminal", "after 4 of 48 tokens", 1),
            ("http_5xx", "http_status", "HTTP 500", 6),
        ]
    )
    assert [(g.key.cause, g.count, g.text, g.texts) for g in groups] == [
        ("cut", 11, "after 4 of 48 tokens", 2),
        ("http_status", 6, "HTTP 500", 1),
        ("no_terminal", 1, "after 4 of 48 tokens", 1),
    ]
    assert with_similar("after 4 of 48 tokens", 2) == "after 4 of 48 tokens (and 1 similar text)"
    assert with_similar("x", 4) == "x (and 3 similar texts)" and with_similar("x", 1) == "x"


def test_a_tally_counts_live_and_keeps_its_texts_bounded() -> None:
    tally = ErrorTally()
    for i in range(MAX_TEXTS + 50):
        tally.add("stalled", "no_token", f"no token for {i}s")
    tally.add("stalled", "no_token", "no token for 7s")
    (view,) = tally.views()
    assert view.count == MAX_TEXTS + 51  # every stream counted
    assert view.texts == MAX_TEXTS  # texts kept: bounded
    assert view.text == "no token for 7s"  # the most frequent of those kept
    # the same rule as over a table of rows
    (same,) = group_counts([("stalled", "no_token", "no token for 7s", 2)])
    assert same.key == view.key
