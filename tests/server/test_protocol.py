"""docs/protocol.md on both transports, against the fixed-mode app in this process
(tests/server/inprocess.py: what the app sends, not when; the socket's side is in
test_limits.py, test_hardening.py and test_drain.py)."""

from __future__ import annotations

import os

import pytest
from starlette.testclient import TestClient

from tests.server.inprocess import ws_requests
from tests.server.streams import sse

CHAT = {
    "model": "streamslo-tiny",
    "messages": [{"role": "user", "content": "tell me a story"}],
    "stream": True,
    "max_tokens": 12,
    "ignore_eos": True,
    "stream_options": {"include_usage": True},
    "seed": 7,
    "temperature": 1.0,
}
COMPLETION = {
    "prompt": "Explain quantum entanglement",
    "stream": True,
    "max_tokens": 9,
    "ignore_eos": True,
    "seed": 3,
}


def test_sse_chat_stream_has_one_token_per_chunk_usage_and_done(fixed_app: TestClient) -> None:
    res = sse(fixed_app, "/v1/chat/completions", CHAT)
    assert res.status == 200 and res.done and res.error is None
    assert res.chunks[0]["object"] == "chat.completion.chunk"
    assert res.chunks[0]["choices"][0]["delta"] == {"role": "assistant"}
    assert res.content_chunks == 12
    assert res.finish_reason == "length"
    assert res.usage is not None and res.usage["completion_tokens"] == 12
    assert res.usage["total_tokens"] == res.usage["prompt_tokens"] + 12
    ids = {c["id"] for c in res.chunks}
    assert len(ids) == 1 and all(c["model"] == "streamslo-tiny" for c in res.chunks)


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/stream"])
def test_sse_completion_endpoints(fixed_app: TestClient, path: str) -> None:
    res = sse(fixed_app, path, COMPLETION)
    assert res.done and res.content_chunks == 9 and res.finish_reason == "length"
    assert all(c["object"] == "text_completion" for c in res.chunks)
    assert res.usage is None  # not asked for


def test_v1_stream_streams_by_default_with_default_max_tokens(fixed_app: TestClient) -> None:
    res = sse(
        fixed_app,
        "/v1/stream",
        {"prompt": "Explain quantum entanglement", "ignore_eos": True},
    )
    assert res.done and res.content_chunks == 64


def test_without_ignore_eos_finish_is_stop_or_length(fixed_app: TestClient) -> None:
    body = {**COMPLETION, "ignore_eos": False, "max_tokens": 200, "temperature": 2.0, "seed": 11}
    res = sse(fixed_app, "/v1/completions", body)
    assert res.done and res.finish_reason in ("stop", "length")
    assert res.content_chunks <= 200
    assert res.finish_reason == "stop" or res.content_chunks == 200


def test_non_streaming_json(fixed_app: TestClient) -> None:
    r = fixed_app.post("/v1/chat/completions", json={**CHAT, "stream": False})
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "chat.completion"
    assert body["usage"]["completion_tokens"] == 12
    assert body["choices"][0]["finish_reason"] == "length"
    streamed = sse(fixed_app, "/v1/chat/completions", CHAT)
    assert body["choices"][0]["message"]["content"] == streamed.text  # same seed, same text


def test_ws_chat_then_completion_on_one_connection(fixed_app: TestClient) -> None:
    chat, comp = ws_requests(fixed_app, [CHAT, COMPLETION])
    assert chat.done and chat.content_chunks == 12 and chat.finish_reason == "length"
    assert chat.usage is not None and chat.usage["completion_tokens"] == 12
    assert comp.done and comp.content_chunks == 9
    assert comp.chunks[0]["object"] == "text_completion"


def test_determinism_across_transports_and_runs(fixed_app: TestClient) -> None:
    a = sse(fixed_app, "/v1/chat/completions", CHAT).text
    b = sse(fixed_app, "/v1/chat/completions", CHAT).text
    (c,) = ws_requests(fixed_app, [CHAT])
    assert a == b == c.text and a
    other = sse(fixed_app, "/v1/chat/completions", {**CHAT, "seed": 8}).text
    assert other != a
    greedy = {**CHAT, "temperature": 0, "seed": 1}
    g1 = sse(fixed_app, "/v1/chat/completions", greedy).text
    g2 = sse(fixed_app, "/v1/chat/completions", {**greedy, "seed": 2}).text
    assert g1 == g2  # temperature 0 is greedy: the seed does not matter


def test_health_models_metrics_debug(fixed_app: TestClient) -> None:
    h = fixed_app.get("/healthz").json()
    assert h["status"] == "ok" and h["server"] == "streamslo-target"
    assert h["mode"] == "fixed" and h["faults"] == [] and h["pid"] == os.getpid()
    assert fixed_app.get("/readyz").status_code == 200
    models = fixed_app.get("/v1/models").json()
    assert models["object"] == "list" and models["data"][0]["id"] == "streamslo-tiny"
    sse(fixed_app, "/v1/completions", COMPLETION)
    text = fixed_app.get("/metrics").text
    for name in (
        "streamslo_active_streams",
        "streamslo_tokens_total",
        "streamslo_stream_outcomes_total",
        "streamslo_request_seconds_bucket",
        "streamslo_event_loop_lag_seconds_bucket",
        "streamslo_write_backlog_bytes",
        "streamslo_engine_step_seconds_bucket",
        "streamslo_engine_batch_size_bucket",
        "streamslo_worker_restarts_total",
    ):
        assert name in text, name
    stalls = fixed_app.get("/debug/stalls").json()
    assert {"stalls", "by_cause", "recent"} <= set(stalls)
    workers = fixed_app.get("/debug/workers").json()
    assert workers["worker_restarts_total"] == 0
