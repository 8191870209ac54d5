"""A read that is one whole text frame skips the ``websockets`` protocol object
(``WSReader.receive``'s hot path); every stream must end exactly as it does through the
protocol object (the hot path off), whatever the frames and however they were split into reads.

Generated frames: text (chat chunks, ``[DONE]``, invalid UTF-8, empty), binary, fragments and
continuations, pings, closes; payload lengths around the 7-bit and 16-bit length forms (125,
126, 127); masked frames and frames with RSV bits (both protocol errors from a server); each
frame a read of its own, or the whole answer cut at random points.
"""

from __future__ import annotations

import dataclasses
import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.version import version as websockets_version

from streamslo.stream import ws as ws_module
from streamslo.stream.timing import StreamExpectations
from tests.stream.drive import Burst, drive_ws, new_ws_protocol

CHUNK = '{"choices":[{"index":0,"delta":{"content":"%s"},"finish_reason":%s}]}'


def frame(opcode: int, payload: bytes, fin: bool = True, mask: bool = False, rsv: int = 0) -> bytes:
    head = bytes([(0x80 if fin else 0) | rsv << 4 | opcode])
    n = len(payload)
    m = 0x80 if mask else 0
    if n < 126:
        head += bytes([m | n])
    elif n < 1 << 16:
        head += bytes([m | 126]) + struct.pack("!H", n)
    else:
        head += bytes([m | 127]) + struct.pack("!Q", n)
    if mask:
        key = b"\x01\x02\x03\x04"
        head += key
        payload = bytes(b ^ key[i % 4] for i, b in enumerate(payload))
    return head + payload


@st.composite
def text_payload(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(("token", "token", "finish", "done", "bad-utf8", "sized", "empty")))
    if kind == "token":
        return (CHUNK % (draw(st.sampled_from(("a", "é", "tok"))), "null")).encode()
    if kind == "finish":
        return (CHUNK % ("", '"stop"')).encode()
    if kind == "done":
        return b"[DONE]"
    if kind == "bad-utf8":
        return b'{"x": "\xff\xfe"}'
    if kind == "empty":
        return b""
    size = draw(st.sampled_from((124, 125, 126, 127, 200, 70000)))
    body = CHUNK % ("p" * max(0, size - len(CHUNK % ("", "null"))), "null")
    return body.encode()[:size].ljust(size, b" ")


@st.composite
def one_frame(draw: st.DrawFn) -> bytes:
    kind = draw(
        st.sampled_from(
            ("text",) * 8 + ("binary", "ping", "close", "fragment", "masked", "rsv", "cont")
        )
    )
    if kind == "text":
        return frame(1, draw(text_payload()))
    if kind == "binary":
        return frame(2, b"\x00\x01")
    if kind == "ping":
        return frame(9, b"hi")
    if kind == "close":
        return frame(8, struct.pack("!H", 1000))
    if kind == "fragment":
        payload = draw(text_payload())
        return frame(1, payload[:3], fin=False) + frame(0, payload[3:])
    if kind == "masked":
        return frame(1, draw(text_payload()), mask=True)
    if kind == "rsv":
        return frame(1, draw(text_payload()), rsv=4)
    return frame(0, b"stray")


@st.composite
def answer(draw: st.DrawFn) -> list[bytes]:
    """One request's answer, as reads."""
    frames = draw(st.lists(one_frame(), min_size=1, max_size=8))
    if draw(st.booleans()):
        frames.append(frame(1, b"[DONE]"))
    if draw(st.booleans()):
        return frames  # a frame a read, as a server writes them
    whole = b"".join(frames)
    cuts = sorted(draw(st.lists(st.integers(1, max(1, len(whole) - 1)), max_size=4)))
    return [whole[a:b] for a, b in zip([0, *cuts], [*cuts, len(whole)], strict=True) if b > a]


def ended(reads: list[bytes], whole_frames: bool) -> dict[str, Any]:
    if whole_frames and not ws_module.whole_frames_tested(websockets_version):
        pytest.skip(f"websockets {websockets_version}: the path is off (untested there)")
    saved = ws_module._WHOLE_FRAMES
    ws_module._WHOLE_FRAMES = whole_frames
    try:
        bursts = [Burst(0.1 + 0.01 * i, [r]) for i, r in enumerate(reads)]
        rec = drive_ws([], bursts, 0.1 + 0.01 * len(reads), StreamExpectations(max_tokens=6))
    finally:
        ws_module._WHOLE_FRAMES = saved
    out = dataclasses.asdict(rec)
    out["gap_s"], out["gap_t"] = list(rec.gap_s), list(rec.gap_t)
    return out


@settings(max_examples=300, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(answer())
def test_whole_frames_end_as_the_protocol_object_ends_them(reads: list[bytes]) -> None:
    assert ended(reads, True) == ended(reads, False)


def test_the_hot_path_is_on() -> None:
    """On with the installed websockets: a release outside WHOLE_FRAMES_TESTED fails here until
    these tests have run with it and the range is widened (the path itself turns off)."""
    assert ws_module.whole_frames_tested(websockets_version), (
        f"websockets {websockets_version} is outside the whole-frames path's tested range "
        f"{ws_module.WHOLE_FRAMES_TESTED}: run tests/stream with it, then widen the range"
    )
    assert ws_module._WHOLE_FRAMES


@pytest.mark.parametrize(
    ("version", "tested"),
    [
        ("14.2", False),
        ("15.0.1", False),  # cur_size, max_size: the path's reads would fail there
        ("16.0", True),
        ("17.4", True),
        ("17.10.1", True),
        ("18.0", False),
        ("18.0rc1", False),
        ("dev", False),
    ],
)
def test_the_hot_path_is_on_only_for_the_tested_websockets(version: str, tested: bool) -> None:
    assert ws_module.whole_frames_tested(version) is tested


def test_the_protocol_attributes_the_hot_path_reads_are_there() -> None:
    """The undocumented attributes the path reads, on an open protocol, as it expects them at
    rest (a websockets inside the range that renamed one fails here, not in a load run)."""
    if not ws_module.whole_frames_tested(websockets_version):
        pytest.skip(f"websockets {websockets_version}: the path is off (see the test above)")
    proto, accept = new_ws_protocol()
    proto.receive_data(accept)
    proto.events_received()
    assert proto.current_size is None
    assert isinstance(proto.reader.buffer, bytearray) and not proto.reader.buffer
    assert proto.parser_exc is None
    assert proto.extensions == []
    assert (proto.max_message_size, proto.max_fragment_size) == (1 << 16, None)
    # A partial frame held, a fragmented message under way: what the path checks for.
    proto.receive_data(frame(1, b"abc", fin=False) + frame(0, b"def")[:3])
    proto.events_received()
    assert proto.current_size == 3 and proto.reader.buffer


def test_a_read_after_a_partial_frame_goes_through_the_protocol_object() -> None:
    """The path is not taken while the protocol object holds a partial frame: here the rest of
    a frame whose 16-bit length is 0x0081 begins with 0x81, the first byte of a whole text
    frame, and the payload's first byte would read as a length."""
    token = (CHUNK % ("a", "null")).encode()
    done = frame(1, b"[DONE]")
    whole = frame(1, token)
    big = frame(1, token.ljust(0x81))
    assert big[:4] == b"\x81\x7e\x00\x81"
    reads = [whole, whole + big[:3], big[3:] + done]
    assert ended(reads, True) == ended(reads, False)
    assert ended(reads, True)["tokens"] == 3  # (it ends malformed: [DONE] with no stop reason)
