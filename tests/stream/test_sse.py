"""The SSE decoder against the HTML standard's rules, with input split at every boundary."""

from __future__ import annotations

import pytest

from streamslo.stream.sse import SSEDecoder, SSEProtocolError


def decode(data: bytes, splits: list[int] | None = None) -> list[tuple[str, str, str | None]]:
    dec = SSEDecoder()
    pieces = []
    if splits is None:
        pieces = [data]
    else:
        prev = 0
        for s in splits:
            pieces.append(data[prev:s])
            prev = s
        pieces.append(data[prev:])
    out = []
    for p in pieces:
        out += [(e.event, e.data, e.id) for e in dec.feed(p)]
    return out


STREAMS = {
    "lf": b"data: a\n\ndata: b\n\n",
    "crlf": b"data: a\r\n\r\ndata: b\r\n\r\n",
    "cr": b"data: a\r\rdata: b\r\r",
    "mixed": b"data: a\r\n\ndata: b\r\r\n",
}


@pytest.mark.parametrize("name", sorted(STREAMS))
def test_line_endings_split_everywhere(name):
    data = STREAMS[name]
    expected = [("message", "a", None), ("message", "b", None)]
    assert decode(data) == expected
    for i in range(len(data) + 1):
        assert decode(data, [i]) == expected, f"split at {i}"
    assert decode(data, list(range(1, len(data)))) == expected  # one byte at a time


def test_crlf_split_between_cr_and_lf_is_one_line_end():
    # "data: a\r" | "\n\r\n": without the pending-CR rule this would dispatch twice.
    assert decode(b"data: a\r\n\r\n", [8]) == [("message", "a", None)]
    assert decode(b"data: x\r\ndata: y\r\n\r\n", [8]) == [("message", "x\ny", None)]


def test_multiline_data_comments_fields():
    data = b': comment\nevent: tick\nid: 7\nretry: 100\ndata: {"a":\ndata:  1}\n\n'
    assert decode(data) == [("tick", '{"a":\n 1}', "7")]


def test_field_without_space_and_without_colon():
    assert decode(b"data:x\n\ndata\n\n") == [("message", "x", None), ("message", "", None)]


def test_event_without_data_is_not_dispatched_and_fields_reset():
    assert decode(b"event: a\n\ndata: b\n\n") == [("message", "b", None)]


def test_unfinished_event_at_end_is_not_dispatched():
    dec = SSEDecoder()
    assert dec.feed(b"data: partial\n") == []
    assert dec.in_event


def test_bom_is_skipped_even_when_split():
    assert decode(b"\xef\xbb\xbfdata: a\n\n", [1]) == [("message", "a", None)]
    assert decode(b"\xef\xbb\xbfdata: a\n\n", [2]) == [("message", "a", None)]


def test_other_unicode_line_breaks_are_not_line_ends():
    data = "data: a\x0bb\u2028c\x85d\x0ce\n\n".encode()
    assert decode(data) == [("message", "a\x0bb\u2028c\x85d\x0ce", None)]


def test_utf8_split_inside_a_character():
    data = "data: héllo €\n\n".encode()
    for i in range(len(data) + 1):
        assert decode(data, [i]) == [("message", "héllo €", None)]


def test_id_with_nul_is_ignored():
    assert decode(b"id: 1\ndata: a\n\nid: x\x00y\ndata: b\n\n") == [
        ("message", "a", "1"),
        ("message", "b", "1"),
    ]


def test_endless_line_is_bounded():
    dec = SSEDecoder(max_event_bytes=1000)
    with pytest.raises(SSEProtocolError):
        for _ in range(100):
            dec.feed(b"x" * 100)
    assert dec.pending_bytes <= 1100


def test_giant_event_is_refused():
    dec = SSEDecoder(max_event_bytes=1000)
    with pytest.raises(SSEProtocolError):
        dec.feed(b"data: " + b"y" * 600 + b"\ndata: " + b"y" * 600 + b"\n")


def _reference(data: bytes) -> list[tuple[str, str, str | None]]:
    """A direct, slow transcription of the HTML standard's rules, for cross-checking."""
    text = data.decode("utf-8", "replace")
    if text.startswith("\ufeff"):
        text = text[1:]
    lines, cur, i = [], [], 0
    while i < len(text):
        c = text[i]
        if c in "\r\n":
            lines.append("".join(cur))
            cur = []
            if c == "\r" and text[i + 1 : i + 2] == "\n":
                i += 1
        else:
            cur.append(c)
        i += 1
    out, buf, event, last_id = [], None, None, None
    for line in lines:
        if line == "":
            if buf is not None:
                out.append((event or "message", "\n".join(buf), last_id))
            buf, event = None, None
        elif line.startswith(":"):
            continue
        else:
            field, sep, value = line.partition(":")
            if sep and value.startswith(" "):
                value = value[1:]
            if field == "data":
                buf = [*(buf or []), value]
            elif field == "event":
                event = value
            elif field == "id" and "\x00" not in value:
                last_id = value
    return out


def test_random_streams_match_the_reference_split_anywhere():
    import random

    rng = random.Random(1234)
    pieces = [
        'data: {"x": 1}',
        "data:x",
        "data",
        ": c",
        "event: e",
        "id: 9",
        "retry: 5",
        "data: é€",
        "foo: bar",
        "",
    ]
    ends = ["\n", "\r\n", "\r"]
    for _ in range(300):
        lines = [rng.choice(pieces) for _ in range(rng.randint(1, 12))]
        data = "".join(line + rng.choice(ends if rng.random() < 0.3 else ["\n"]) for line in lines)
        data += "\n\n" if rng.random() < 0.7 else ""
        raw = data.encode()
        expected = _reference(raw)
        assert decode(raw) == expected, raw
        cuts = (
            sorted(rng.sample(range(1, len(raw)), k=min(len(raw) - 1, rng.randint(1, 6))))
            if len(raw) > 1
            else []
        )
        assert decode(raw, cuts) == expected, (raw, cuts)
