"""The bundled server's /v1/responses and /v1/messages against the dialects' documented event
shapes (read here by a plain line parser, independent of streamslo's core; the app in this
process, tests/server/inprocess.py), and the same streams judged by streamslo's dialect
trackers through its own transport on a real socket: ok, token counts equal to usage,
reasoning deltas first (``--reasoning-tokens``), the times of the first answer and tool tokens."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import httpx
import pytest
from starlette.testclient import TestClient

from streamslo.stream.dialects import tracker_for
from streamslo.stream.timing import StreamRecord
from streamslo.transport.sync import ClientLimits, Target, stream_sse
from streamslo.workload.requests import RequestOptions, build_body
from tests.server.inprocess import app_client
from tests.server.servers import Server, model_server, start_server

N = 10
REASONING = 3


@pytest.fixture(scope="module")
def reasoning_app() -> Iterator[TestClient]:
    """A model whose first :data:`REASONING` tokens are reasoning, in this process."""
    with app_client(token_interval_ms=5, reasoning_tokens=REASONING) as tc:
        yield tc


@pytest.fixture(scope="module")
def reasoning_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The same model on a real socket, for streamslo's own transport."""
    with model_server(tmp_path_factory.mktemp("reasoning"), 5, reasoning=REASONING) as s:
        yield s


def events(
    tc: httpx.Client, path: str, body: dict[str, object], headers: dict[str, str] | None = None
) -> tuple[int, list[tuple[str, dict[str, object]]]]:
    """(status, [(event name, data object)]) read with a plain line parser."""
    out: list[tuple[str, dict[str, object]]] = []
    with tc.stream("POST", path, json=body, headers=headers, timeout=30) as r:
        if r.status_code != 200:
            r.read()
            return r.status_code, [("", r.json())]
        assert r.headers["content-type"].startswith("text/event-stream")
        name, data = "", []
        for line in r.iter_lines():
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].strip())
            elif not line and data:
                out.append((name, json.loads("\n".join(data))))
                name, data = "", []
    return 200, out


RESPONSES = {
    "model": "m",
    "input": [{"role": "user", "content": "tell me a story"}],
    "stream": True,
    "max_output_tokens": N,
    "ignore_eos": True,
    "temperature": 1.0,
}
MESSAGES = {
    "model": "m",
    "messages": [{"role": "user", "content": "tell me a story"}],
    "stream": True,
    "max_tokens": N,
    "ignore_eos": True,
}


def test_responses_events_follow_the_documented_shape(reasoning_app: TestClient) -> None:
    status, evs = events(reasoning_app, "/v1/responses", RESPONSES)
    assert status == 200
    names = [n for n, _ in evs]
    assert all(n == d["type"] for n, d in evs)
    assert names[:2] == ["response.created", "response.in_progress"]
    assert [d["sequence_number"] for _, d in evs] == list(range(len(evs)))
    deltas = [n for n in names if n.endswith(".delta")]
    assert deltas == ["response.reasoning_text.delta"] * REASONING + [
        "response.output_text.delta"
    ] * (N - REASONING)
    assert names[-1] == "response.incomplete"
    final = evs[-1][1]["response"]
    assert isinstance(final, dict)
    assert final["status"] == "incomplete" and final["incomplete_details"] == {
        "reason": "max_output_tokens"
    }
    assert final["usage"]["output_tokens"] == N
    assert final["usage"]["output_tokens_details"]["reasoning_tokens"] == REASONING
    text = "".join(str(d["delta"]) for n, d in evs if n == "response.output_text.delta")
    assert final["output"][-1]["content"][0]["text"] == text


def test_responses_without_ignore_eos_completes_or_runs_out(reasoning_app: TestClient) -> None:
    status, evs = events(
        reasoning_app, "/v1/responses", {**RESPONSES, "ignore_eos": False, "input": "hi"}
    )
    assert status == 200 and evs[-1][0] in ("response.completed", "response.incomplete")


def test_messages_events_follow_the_documented_shape(reasoning_app: TestClient) -> None:
    status, evs = events(
        reasoning_app, "/v1/messages", MESSAGES, headers={"anthropic-version": "2023-06-01"}
    )
    assert status == 200
    names = [n for n, _ in evs]
    assert all(n == d["type"] for n, d in evs)
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]
    kinds = [d["delta"]["type"] for n, d in evs if n == "content_block_delta"]  # type: ignore[index]
    assert kinds == ["thinking_delta"] * REASONING + ["signature_delta"] + ["text_delta"] * (
        N - REASONING
    )
    starts = [d["content_block"]["type"] for n, d in evs if n == "content_block_start"]  # type: ignore[index]
    assert starts == ["thinking", "text"]
    assert names.count("content_block_stop") == 2
    delta = evs[-2][1]
    assert delta["delta"] == {"stop_reason": "max_tokens", "stop_sequence": None}
    assert delta["usage"] == {"output_tokens": N}


def test_messages_requires_max_tokens_with_anthropic_errors(reasoning_app: TestClient) -> None:
    body = {k: v for k, v in MESSAGES.items() if k != "max_tokens"}
    status, evs = events(reasoning_app, "/v1/messages", body)
    assert status == 400
    err = evs[0][1]
    assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    assert "max_tokens" in err["error"]["message"]  # type: ignore[index]


@pytest.mark.parametrize("api", ["openai-chat", "openai-responses", "anthropic-messages"])
def test_streamslo_reads_each_dialect(reasoning_server: Server, api: str) -> None:
    opts = RequestOptions(api=api, max_tokens=N)
    rec = StreamRecord(api, "sse", "test", time.time(), time.perf_counter())
    tracker = tracker_for(api, rec, opts.expectations())
    stream_sse(
        Target.from_url(reasoning_server.url),
        opts.path,
        build_body(opts, "hello"),
        tracker,
        ClientLimits(stall_timeout=10, request_timeout=30),
    )
    assert rec.outcome == "ok", rec.error
    assert rec.tokens == N == rec.usage_completion_tokens
    assert rec.reasoning_tokens == REASONING and rec.tool_tokens == 0
    assert rec.ttft_s is not None and rec.ttfo_s is not None
    # The answer starts after the reasoning tokens: TTFO is TTFT plus their gaps, exactly
    # (the gaps' size is the machine's; their count and sum are the stream's).
    assert rec.ttfo_s == pytest.approx(rec.ttft_s + sum(rec.gap_s[:REASONING]), abs=1e-9)
    # (Not strictly later: on a loaded machine the last reasoning token and the first answer
    # token can arrive in one read, and share its stamp.)
    assert rec.ttfo_s >= rec.ttft_s
    assert len(rec.gap_s) == N - 1


@pytest.fixture(scope="module")
def keyed_app() -> Iterator[TestClient]:
    with app_client(api_key_env="DIALECT_KEY", env={"DIALECT_KEY": "sekrit"}) as tc:
        yield tc


def test_api_key_in_x_api_key(keyed_app: TestClient) -> None:
    assert events(keyed_app, "/v1/messages", MESSAGES)[0] == 401
    status, evs = events(keyed_app, "/v1/messages", MESSAGES, headers={"x-api-key": "sekrit"})
    assert status == 200 and evs[-1][0] == "message_stop"


TOOL = 3


@pytest.fixture(scope="module")
def tool_app() -> Iterator[TestClient]:
    """A model whose first 2 tokens are reasoning and last :data:`TOOL` a tool call's
    arguments, in this process."""
    with app_client(token_interval_ms=5, reasoning_tokens=2, tool_call_tokens=TOOL) as tc:
        yield tc


@pytest.fixture(scope="module")
def tool_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The same model on a real socket, for streamslo's own transport."""
    with model_server(tmp_path_factory.mktemp("tools"), 5, reasoning=2, tool=TOOL) as s:
        yield s


@pytest.mark.parametrize("api", ["openai-chat", "openai-responses", "anthropic-messages"])
def test_tool_calling_mode(tool_server: Server, api: str) -> None:
    """--tool-call-tokens: the last tokens are tool-call argument deltas in each dialect's own
    shape; streamslo counts them as tool tokens, and the stream is still ok."""
    opts = RequestOptions(api=api, max_tokens=N)
    rec = StreamRecord(api, "sse", "test", time.time(), time.perf_counter())
    stream_sse(
        Target.from_url(tool_server.url),
        opts.path,
        build_body(opts, "hello"),
        tracker_for(api, rec, opts.expectations()),
        ClientLimits(stall_timeout=10, request_timeout=30),
    )
    assert rec.outcome == "ok", rec.error
    assert (rec.tokens, rec.reasoning_tokens, rec.tool_tokens) == (N, 2, TOOL)
    assert rec.usage_completion_tokens == N
    # (Equal where the last answer token and the first tool token shared a read.)
    assert rec.ttftc_s is not None and rec.ttfo_s is not None and rec.ttftc_s >= rec.ttfo_s


def test_tool_events_follow_the_documented_shape(tool_app: TestClient) -> None:
    _, evs = events(tool_app, "/v1/responses", {**RESPONSES, "ignore_eos": True})
    names = [n for n, _ in evs]
    assert names.count("response.function_call_arguments.delta") == TOOL
    added = [d["item"] for n, d in evs if n == "response.output_item.added"]
    assert [i["type"] for i in added] == ["reasoning", "message", "function_call"]  # type: ignore[index]
    assert "response.function_call_arguments.done" in names
    _, evs = events(tool_app, "/v1/messages", MESSAGES)
    starts = [d["content_block"]["type"] for n, d in evs if n == "content_block_start"]  # type: ignore[index]
    assert starts == ["thinking", "text", "tool_use"]
    parts = [
        d["delta"]["partial_json"]
        for n, d in evs
        if n == "content_block_delta"  # type: ignore[index]
        and d["delta"]["type"] == "input_json_delta"
    ]  # type: ignore[index]
    assert len(parts) == TOOL


# ------------------------------------------------- the documented shapes, field by field
#: The Response object's required fields (the OpenAI reference; nullable ones included).
RESPONSE_FIELDS = {
    "id",
    "object",
    "created_at",
    "status",
    "error",
    "incomplete_details",
    "instructions",
    "metadata",
    "model",
    "output",
    "parallel_tool_calls",
    "temperature",
    "tool_choice",
    "tools",
    "top_p",
    "usage",
}


def test_every_response_object_has_the_required_fields(tool_app: TestClient) -> None:
    _, evs = events(tool_app, "/v1/responses", RESPONSES)
    responses = [d["response"] for n, d in evs if "response" in d]
    assert [n for n, d in evs if "response" in d] == [
        "response.created",
        "response.in_progress",
        "response.incomplete",
    ]
    for r in responses:
        assert isinstance(r, dict) and set(r) >= RESPONSE_FIELDS, RESPONSE_FIELDS - set(r)  # type: ignore[arg-type]
        assert r["object"] == "response" and r["tools"] == [] and r["parallel_tool_calls"] is True  # type: ignore[index]
    final = responses[-1]
    assert isinstance(final, dict)
    usage = final["usage"]
    assert set(usage) == {
        "input_tokens",
        "input_tokens_details",
        "output_tokens",
        "output_tokens_details",
        "total_tokens",
    }
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    # A response cut by the length leaves its last item "incomplete", as the response.
    statuses = [(i["type"], i["status"]) for i in final["output"] if i["type"] != "reasoning"]
    assert statuses == [("message", "completed"), ("function_call", "incomplete")]
    for name, d in evs:
        if name.startswith("response.") and name.endswith(".delta"):
            assert {"item_id", "output_index", "delta", "sequence_number"} <= set(d)
        if name in ("response.output_text.delta", "response.reasoning_text.delta"):
            assert "content_index" in d


def test_tool_arguments_are_json_in_every_dialect(tool_app: TestClient) -> None:
    """The argument deltas build a JSON object (OpenAI's ``arguments``; Anthropic's
    ``partial_json`` whose whole is the tool_use ``input``), as the official SDKs parse them."""
    _, evs = events(tool_app, "/v1/responses", RESPONSES)
    args = "".join(str(d["delta"]) for n, d in evs if n == "response.function_call_arguments.delta")
    done = [d for n, d in evs if n == "response.function_call_arguments.done"]
    assert isinstance(json.loads(args), dict) and done[0]["arguments"] == args
    _, evs = events(tool_app, "/v1/messages", MESSAGES)
    parts = "".join(
        str(d["delta"]["partial_json"])  # type: ignore[index]
        for n, d in evs
        if n == "content_block_delta" and d["delta"]["type"] == "input_json_delta"  # type: ignore[index]
    )
    assert isinstance(json.loads(parts), dict)
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "max_tokens": N,
        "ignore_eos": True,
    }
    with tool_app.stream("POST", "/v1/chat/completions", json=body) as r:
        chat = "".join(
            call["function"].get("arguments", "")
            for line in r.iter_lines()
            if line.startswith("data: {")
            for choice in json.loads(line[6:])["choices"]
            for call in choice["delta"].get("tool_calls", [])
        )
    assert isinstance(json.loads(chat), dict)


def test_messages_blocks_and_usage_follow_the_documented_shape(reasoning_app: TestClient) -> None:
    _, evs = events(reasoning_app, "/v1/messages", MESSAGES)
    start = evs[0][1]["message"]
    assert isinstance(start, dict)
    assert {
        "id",
        "type",
        "role",
        "content",
        "model",
        "stop_reason",
        "stop_sequence",
        "usage",
    } <= set(start)
    usage = start["usage"]
    assert {"input_tokens", "output_tokens", "cache_read_input_tokens"} <= set(usage)
    thinking = [
        d["content_block"]
        for n, d in evs
        if n == "content_block_start" and d["content_block"]["type"] == "thinking"  # type: ignore[index]
    ]
    assert thinking == [{"type": "thinking", "thinking": "", "signature": ""}]
    # the signature_delta comes just before the thinking block's stop
    names = [(n, d.get("delta", {}).get("type")) for n, d in evs]  # type: ignore[union-attr]
    sig = names.index(("content_block_delta", "signature_delta"))
    assert names[sig + 1][0] == "content_block_stop"


@pytest.mark.parametrize(
    ("method", "path", "headers", "status", "etype"),
    [
        ("POST", "/v1/messages", {}, 401, "authentication_error"),
        ("GET", "/v1/messages", {"x-api-key": "sekrit"}, 405, "invalid_request_error"),
    ],
)
def test_messages_http_errors_have_the_anthropic_shape(
    keyed_app: TestClient,
    method: str,
    path: str,
    headers: dict[str, str],
    status: int,
    etype: str,
) -> None:
    """Every error on /v1/messages, the access guard's and the router's included:
    ``{"type": "error", "error": {"type", "message"}, "request_id"}`` and a ``request-id``
    header (Anthropic's errors page)."""
    r = keyed_app.request(method, path, json=MESSAGES, headers=headers)
    assert r.status_code == status
    body = r.json()
    assert body["type"] == "error" and body["error"]["type"] == etype
    assert body["request_id"].startswith("req_") and r.headers["request-id"] == body["request_id"]
    if status == 401:
        assert "x-api-key" in body["error"]["message"]
    # The OpenAI paths keep OpenAI's shape.
    r = keyed_app.post("/v1/responses", json=RESPONSES)
    assert r.status_code == 401 and set(r.json()) == {"error"}


@pytest.fixture(scope="module")
def cancelling_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Incident C in every dialect: generation cut after 1 s, ended as a natural stop (long
    enough that a first token delayed by a loaded machine still comes before the cut)."""
    s = start_server(
        [
            "--mode",
            "fixed",
            "--token-interval-ms",
            "20",
            "--fault",
            "silent-cancel",
            "--cancel-after",
            "1.0",
        ],
        tmp_path_factory.mktemp("cancel"),
    )
    yield s
    s.stop()


@pytest.mark.parametrize(
    ("api", "reason"),
    [
        ("openai-chat", "stop"),
        ("openai-completions", "stop"),
        ("openai-responses", "completed"),
        ("anthropic-messages", "end_turn"),
    ],
)
def test_the_same_incident_in_every_dialect(
    cancelling_server: Server, api: str, reason: str
) -> None:
    """The silent-cancel fault ends each dialect's stream the way that dialect ends a natural
    stop, after fewer tokens than asked: every dialect's reader sees the same silent
    truncation."""
    opts = RequestOptions(api=api, max_tokens=200)  # 4 s at 20 ms a token, cut at 1 s
    rec = StreamRecord(api, "sse", "test", time.time(), time.perf_counter())
    stream_sse(
        Target.from_url(cancelling_server.url),
        opts.path,
        build_body(opts, "hello"),
        tracker_for(api, rec, opts.expectations()),
        ClientLimits(stall_timeout=10, request_timeout=30),
    )
    assert rec.outcome == "silent_truncation", rec.error
    assert rec.finish_reason == reason and 0 < rec.tokens < 200
    assert rec.tokens == rec.usage_completion_tokens  # an honest usage: only the stop says it
