"""hypothesis over WebSocket conversations on a real socket: text and binary frames, fragmented
messages, invalid UTF-8, bad and deep JSON, wrong types, messages over the size limit, pings,
many requests on one connection, a close or a dropped socket mid-request; under Uvicorn and
once under Gunicorn. Every refusal is an error frame with a 4xx code and a close that is not
the server's fault (never 1011); afterwards the server is alive with no worker lost."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from tests.server.fuzz import FUZZ_CONFIG, FuzzServer, assert_survived
from tests.server.test_fuzz_http import BODIES

#: Close codes a client may cause: normal, protocol error, not UTF-8, bad request, too big,
#: try later. 1011 would be the server's own fault.
CLIENT_CAUSED = {1000, 1002, 1007, 1008, 1009, 1013}

Frame = tuple[str, object]
_text = BODIES.map(lambda b: b.decode("utf-8", "replace"))
FRAMES: st.SearchStrategy[Frame] = st.one_of(
    _text.map(lambda t: ("text", t)),
    _text.map(lambda t: ("text", t)),
    st.binary(max_size=200).map(lambda b: ("text-bytes", b)),  # often not UTF-8
    st.binary(max_size=200).map(lambda b: ("binary", b)),
    st.lists(st.text(max_size=30), min_size=1, max_size=5).map(lambda p: ("fragments", p)),
    _text.map(lambda t: ("fragments", [t[: len(t) // 2], t[len(t) // 2 :]])),
    st.just(("text", "x" * (FUZZ_CONFIG.max_body_bytes + 1))),
    st.binary(max_size=20).map(lambda b: ("ping", b)),
)


def _send(ws: object, frame: Frame, i: int) -> bool:
    """Send frame number ``i``; False when it carried no message (a ping)."""
    kind, data = frame
    if kind == "ping":
        # The client refuses two pings in flight with the same payload: make each unique.
        ws.ping(bytes(data) + i.to_bytes(2, "big"))  # type: ignore[arg-type, attr-defined]
        return False
    if kind == "text-bytes":
        ws.send(data, text=True)  # type: ignore[attr-defined]
    elif kind == "fragments":
        ws.send(iter(data))  # type: ignore[attr-defined, call-overload]
    else:
        ws.send(data)  # type: ignore[attr-defined]
    return True


@given(
    frames=st.lists(FRAMES, min_size=1, max_size=6),
    ending=st.sampled_from(["read", "read", "close", "drop"]),
)
@settings(
    max_examples=120,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
def test_any_ws_conversation_is_answered_without_a_server_fault(
    fuzz_server: FuzzServer, frames: list[Frame], ending: str
) -> None:
    answered = 0
    messages = 0
    code = None
    with connect(fuzz_server.server.ws_url, max_size=None, open_timeout=30) as ws:
        try:
            for i, frame in enumerate(frames):
                messages += _send(ws, frame, i)
                fuzz_server.sent["ws"] += 1
            if ending == "drop":
                ws.socket.close()
                return
            if ending == "close":
                return
            while answered < messages:
                msg = ws.recv(timeout=20)
                if msg == "[DONE]":
                    answered += 1
                    continue
                chunk = json.loads(msg)
                if "error" in chunk:
                    assert 400 <= chunk["error"]["code"] < 500, chunk
        except ConnectionClosed as exc:
            code = exc.rcvd.code if exc.rcvd else None
    if code is not None:
        fuzz_server.answers[code] += 1
        assert code in CLIENT_CAUSED, code
    else:
        fuzz_server.answers[1000] += 1


def test_the_server_survived_the_ws_fuzz(fuzz_server: FuzzServer) -> None:
    assert fuzz_server.sent["ws"] >= 120
    assert_survived(fuzz_server)
