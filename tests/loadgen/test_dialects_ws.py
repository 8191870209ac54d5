"""The event dialects over WebSocket: a gateway (the faulty server's ``/v1/ws``) streams OpenAI
Responses or Anthropic Messages events, one event per text frame, and the run's WebSocket
transport reads them with the dialect's tracker, as the WebSocket Locust user does.

The gateway takes a Responses request as OpenAI's WebSocket mode frames it
(``{"type": "response.create", ...}``, here through ``--ws-request-template``) or bare, and a
Messages body on a connection whose handshake carried ``anthropic-version``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from streamslo.stream.dialects import ANTHROPIC_VERSION, tracker_for
from streamslo.stream.envelope import WSEnvelope
from streamslo.stream.timing import StreamRecord
from streamslo.transport.sync import ClientLimits, Target, WSConnection
from streamslo.workload.requests import WS_PATH, RequestOptions, build_body
from tests.faulty.constants import REQUEST_TIMEOUT_S, STALL_TIMEOUT_S
from tests.faulty.dialects import DIALECT_EXPECTED
from tests.faulty.process import FaultyServer
from tests.loadgen.helpers import streams, streamslo_run

N = 8
APIS = ["openai-responses", "anthropic-messages"]
TEMPLATE = '{"type": "response.create", "response": "{{request}}"}'

#: scenario -> what a WebSocket reader reports, where it differs from SSE (DIALECT_EXPECTED).
WS_DIFFERS = {
    # An error before the dialect's first event: the stream never began (as an OpenAI error
    # frame before the first chunk): the error's type gives the status (api_error: 500).
    ("failed", "anthropic-messages"): "http_5xx",
}
#: Scenarios whose faults are SSE bytes after the terminal event: on WebSocket they are stray
#: frames of the connection, not of the stream (the stream itself ended ok).
SSE_ONLY = {"data_after_terminal", "done_after_terminal"}
SCENARIOS = sorted({name for name, _ in DIALECT_EXPECTED} - SSE_ONLY)


def ws_stream(
    server: FaultyServer, scenario: str, api: str, envelope: WSEnvelope | None = None
) -> StreamRecord:
    headers = {"anthropic-version": ANTHROPIC_VERSION} if api == "anthropic-messages" else {}
    target = Target.from_url(server.url(scenario), headers)
    opts = RequestOptions(api=api, max_tokens=N)
    rec = StreamRecord(scenario, "ws", "test", time.time(), time.perf_counter())
    limits = ClientLimits(stall_timeout=STALL_TIMEOUT_S, request_timeout=REQUEST_TIMEOUT_S)
    conn = WSConnection(target, WS_PATH, limits)
    try:
        body = build_body(opts, "hello")
        conn.request(
            (envelope or WSEnvelope()).wrap(body), tracker_for(api, rec, opts.expectations())
        )
    finally:
        conn.close()
    return rec


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_each_dialect_fault_over_websocket(faulty_server, scenario: str, api: str) -> None:
    rec = ws_stream(faulty_server, scenario, api)
    expected = WS_DIFFERS.get((scenario, api), DIALECT_EXPECTED[(scenario, api)])
    assert rec.outcome == expected, rec.error
    if expected == "ok":
        assert rec.tokens == N == rec.usage_completion_tokens
    if expected == "truncated":
        terminal = "response.completed" if api == "openai-responses" else "message_stop"
        assert terminal in rec.error


def test_the_responses_websocket_mode_frame(faulty_server) -> None:
    """``--ws-request-template`` wraps the body as OpenAI's WebSocket mode frames it."""
    env = WSEnvelope(request_template=TEMPLATE)
    assert json.loads(env.wrap(b'{"input": "x"}'))["type"] == "response.create"
    for scenario, outcome in [("ok", "ok"), ("cut", "truncated"), ("error_midway", "error_event")]:
        rec = ws_stream(faulty_server, scenario, "openai-responses", env)
        assert rec.outcome == outcome, rec.error


def test_a_connection_carries_one_dialect_stream_after_another(faulty_server) -> None:
    """After a terminal event the connection is reused for the next request."""
    api = "anthropic-messages"
    target = Target.from_url(
        faulty_server.url("ok_reasoning"), {"anthropic-version": ANTHROPIC_VERSION}
    )
    opts = RequestOptions(api=api, max_tokens=N)
    conn = WSConnection(target, WS_PATH, ClientLimits(stall_timeout=2, request_timeout=10))
    recs = []
    try:
        for i in range(3):
            rec = StreamRecord(f"s{i}", "ws", "test", time.time(), time.perf_counter())
            conn.request(build_body(opts, "hi"), tracker_for(api, rec, opts.expectations()))
            recs.append(rec)
    finally:
        conn.close()
    assert [r.outcome for r in recs] == ["ok"] * 3, [r.error for r in recs]
    assert all(r.reasoning_tokens == N // 4 and r.tool_tokens == N // 4 for r in recs)
    assert recs[1].connect_s is None and recs[2].connect_s is None


@pytest.mark.load
@pytest.mark.parametrize("api", APIS)
def test_a_websocket_run_per_dialect(faulty_server, tmp_path: Path, api: str) -> None:
    """``streamslo run --protocol ws --api ...``: the WebSocket Locust user against the
    gateway's dialect mix: every outcome as the dialect says, nothing cancelled."""
    out = tmp_path / "run"
    args = ["--ws-request-template", str(tmp_path / "t.json")] if api == "openai-responses" else []
    (tmp_path / "t.json").write_text(TEMPLATE)
    r = streamslo_run(
        faulty_server.url("mix_dialect"),
        str(out),
        "--protocol",
        "ws",
        "--api",
        api,
        "--users",
        "6",
        "--duration",
        "5",
        "--max-tokens",
        "8",
        "--stall-timeout",
        "1",
        "--request-timeout",
        "4",
        "--drain",
        "6",
        "--no-preflight",
        *args,
        timeout=150,
    )
    assert r.returncode in (0, 99), r.stdout + r.stderr
    s = streams(out)
    from tests.faulty.scenarios import MIXES

    expected = {
        WS_DIFFERS.get((name, api), DIALECT_EXPECTED[(name, api)])
        for name in MIXES["mix_dialect"]
        if name not in SSE_ONLY
    }
    got = set(s["outcome"])
    assert "cancelled" not in got
    assert "ok" in got and "truncated" in got and "error_event" in got, got
    assert got <= expected | {"malformed"}, got - expected
