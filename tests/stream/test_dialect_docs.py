"""Each dialect as its own documentation describes it, served by a tiny independent server
written here (no streamslo code on the server side), and read by streamslo's client exactly as a
run reads it (the run's transport and the dialect's tracker).

The streams are built from the shapes the dialects' references document (OpenAI's Responses
streaming events; Anthropic's "Streaming Messages" page, its stop reasons and its errors page):
every documented event, field and variant that changes what a stream means. Hosted APIs pack
several tokens into one delta, so the documented examples are read as ``--coalesced-chunks``
and ``--no-ignore-eos`` read them (the stop-reason rules apply, not the delta counts), unless a
case says otherwise.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest

from streamslo.stream.dialects import API_PATHS, tracker_for
from streamslo.stream.timing import StreamExpectations, StreamRecord
from streamslo.transport.sync import ClientLimits, Target, stream_sse

Event = dict[str, Any]
HOSTED = StreamExpectations(max_tokens=64, forced_length=False, coalesced_chunks=True)
FORCED = StreamExpectations(max_tokens=4)

# --------------------------------------------------------------------------- the documents


def responses_stream(
    deltas: list[tuple[str, str]],
    end: str = "response.completed",
    *,
    output_tokens: int | None = None,
    reasoning_tokens: int = 0,
    incomplete_reason: str | None = None,
) -> list[Event]:
    """A Responses stream as the streaming-events reference lays it out: ``response.created``
    and ``response.in_progress`` (a full Response object, status ``in_progress``), the output
    item and content part opened, the deltas (``(event type, text)``), the items closed, then
    the terminal event whose Response carries ``usage``."""
    rid = "resp_doc"
    response: Event = {
        "id": rid,
        "object": "response",
        "created_at": 1741290958,
        "status": "in_progress",
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "max_output_tokens": None,
        "model": "gpt-doc",
        "output": [],
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "reasoning": {"effort": None, "summary": None},
        "store": True,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": None,
        "user": None,
        "metadata": {},
    }
    evs: list[Event] = [
        {"type": "response.created", "response": response},
        {"type": "response.in_progress", "response": response},
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {
                "id": "msg_doc",
                "type": "message",
                "status": "in_progress",
                "role": "assistant",
                "content": [],
            },
        },
        {
            "type": "response.content_part.added",
            "item_id": "msg_doc",
            "output_index": 0,
            "content_index": 0,
            "part": {"type": "output_text", "text": "", "annotations": []},
        },
    ]
    for kind, text in deltas:
        ev: Event = {"type": kind, "item_id": "msg_doc", "output_index": 0, "delta": text}
        if kind == "response.reasoning_summary_text.delta":
            ev["summary_index"] = 0
        elif kind in (
            "response.output_text.delta",
            "response.refusal.delta",
            "response.reasoning_text.delta",
        ):
            ev["content_index"] = 0
        if kind == "response.output_text.delta":
            ev["logprobs"] = []
        evs.append(ev)
    text = "".join(t for k, t in deltas if k == "response.output_text.delta")
    evs += [
        {
            "type": "response.output_text.done",
            "item_id": "msg_doc",
            "output_index": 0,
            "content_index": 0,
            "text": text,
        },
        {
            "type": "response.output_item.done",
            "output_index": 0,
            "item": {"id": "msg_doc", "type": "message", "status": "completed", "content": []},
        },
    ]
    n = len(deltas) if output_tokens is None else output_tokens
    final = {
        **response,
        "status": "completed" if end == "response.completed" else "incomplete",
        "usage": {
            "input_tokens": 36,
            "input_tokens_details": {"cached_tokens": 12},
            "output_tokens": n,
            "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
            "total_tokens": 36 + n,
        },
    }
    if incomplete_reason is not None:
        final["incomplete_details"] = {"reason": incomplete_reason}
    evs.append({"type": end, "response": final})
    return [{**e, "sequence_number": i} for i, e in enumerate(evs)]


def anthropic_stream(
    blocks: list[tuple[Event, list[Event]]],
    stop_reason: str | None = "end_turn",
    output_tokens: int = 15,
    *,
    usage: Event | None = None,
) -> list[Event]:
    """A Messages stream as "Streaming Messages" lays it out: ``message_start`` (a Message with
    empty content and ``usage``), a ``ping``, each content block (start, deltas, stop), one
    ``message_delta`` (stop reason, cumulative ``usage.output_tokens``), ``message_stop``."""
    evs: list[Event] = [
        {
            "type": "message_start",
            "message": {
                "id": "msg_doc",
                "type": "message",
                "role": "assistant",
                "content": [],
                "model": "claude-doc",
                "stop_reason": None,
                "stop_sequence": None,
                "usage": usage or {"input_tokens": 25, "output_tokens": 1},
            },
        }
    ]
    for index, (block, deltas) in enumerate(blocks):
        evs.append({"type": "content_block_start", "index": index, "content_block": block})
        if index == 0:
            evs.append({"type": "ping"})
        evs += [{"type": "content_block_delta", "index": index, "delta": d} for d in deltas]
        evs.append({"type": "content_block_stop", "index": index})
    evs.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": None},
            "usage": {"output_tokens": output_tokens},
        }
    )
    evs.append({"type": "message_stop"})
    return evs


TEXT = {"type": "text", "text": ""}


def text_deltas(*texts: str) -> list[Event]:
    return [{"type": "text_delta", "text": t} for t in texts]


def sse(events: list[Event]) -> bytes:
    """Each event with the SSE event name its ``type`` repeats, as both dialects send."""
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


# ---------------------------------------------------------------------- the tiny server
class _Docs(BaseHTTPRequestHandler):
    """``POST /<case>/v1/...``: answers with the case's canned body, 5 ms between events."""

    cases: ClassVar[dict[str, tuple[int, dict[str, str], bytes]]] = {}
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        case = self.path.split("/")[1]
        status, headers, body = self.cases[case]
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        if status != 200:
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.send_header("connection", "close")
        self.end_headers()
        for event in body.split(b"\n\n"):
            if event:
                piece = event + b"\n\n"
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                self.wfile.flush()
                time.sleep(0.005)
        self.wfile.write(b"0\r\n\r\n")


@pytest.fixture(scope="module")
def docs_server() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Docs)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


_n = iter(range(1_000_000))


def read(
    server: ThreadingHTTPServer,
    api: str,
    body: bytes,
    expect: StreamExpectations = HOSTED,
    status: int = 200,
    headers: dict[str, str] | None = None,
) -> StreamRecord:
    """Serve ``body`` as one case and read it the way a run of ``--api api`` does."""
    case = f"c{next(_n)}"
    _Docs.cases[case] = (status, headers or {}, body)
    url = f"http://127.0.0.1:{server.server_address[1]}/{case}"
    rec = StreamRecord(case, "sse", "docs", time.time(), time.perf_counter())
    stream_sse(
        Target.from_url(url),
        API_PATHS[api],
        b'{"stream": true}',
        tracker_for(api, rec, expect),
        ClientLimits(stall_timeout=5, request_timeout=10),
    )
    return rec


# ------------------------------------------------------------------------- Anthropic
def test_anthropic_basic_stream(docs_server):
    """The page's basic example: message_start (usage.output_tokens 1, not final), ping,
    two text deltas, message_delta with the cumulative output_tokens, message_stop."""
    rec = read(
        docs_server,
        "anthropic-messages",
        sse(anthropic_stream([(TEXT, text_deltas("Hello", "!"))])),
    )
    assert rec.outcome == "ok", rec.error
    assert (rec.tokens, rec.usage_completion_tokens, rec.finish_reason) == (2, 15, "end_turn")
    assert rec.usage_prompt_tokens == 25


@pytest.mark.parametrize(
    ("stop_reason", "outcome"),
    [
        ("end_turn", "ok"),
        ("max_tokens", "ok"),
        ("stop_sequence", "ok"),
        ("tool_use", "ok"),
        ("pause_turn", "ok"),
        ("refusal", "silent_truncation"),
        ("model_context_window_exceeded", "silent_truncation"),
    ],
)
def test_anthropic_every_documented_stop_reason(docs_server, stop_reason, outcome):
    """Every stop_reason of "Handling stop reasons": the ordinary ends are ok; a refusal or a
    full context window cut the answer short (docs/outcomes.md)."""
    body = sse(anthropic_stream([(TEXT, text_deltas("a", "b"))], stop_reason))
    rec = read(docs_server, "anthropic-messages", body)
    assert (rec.outcome, rec.finish_reason) == (outcome, stop_reason), rec.error


@pytest.mark.parametrize("stop_reason", ["end_turn", "stop_sequence", "refusal", "pause_turn"])
def test_anthropic_forced_length_accepts_only_max_tokens(docs_server, stop_reason):
    deltas = text_deltas("a", "b", "c", "d")
    rec = read(
        docs_server,
        "anthropic-messages",
        sse(anthropic_stream([(TEXT, deltas)], stop_reason, 4)),
        FORCED,
    )
    assert rec.outcome == "silent_truncation", rec.error
    ok = read(
        docs_server,
        "anthropic-messages",
        sse(anthropic_stream([(TEXT, deltas)], "max_tokens", 4)),
        FORCED,
    )
    assert ok.outcome == "ok", ok.error


def test_anthropic_thinking_signature_and_tool_use(docs_server):
    """Extended thinking (thinking_delta, then the signature_delta just before the block's
    stop), a text block, then a tool_use block whose input_json_delta pieces start with an
    empty one: thinking deltas are reasoning tokens, partial_json pieces tool tokens, the
    signature and the empty piece nothing."""
    blocks = [
        (
            {"type": "thinking", "thinking": "", "signature": ""},
            [
                {"type": "thinking_delta", "thinking": "Let me think"},
                {"type": "thinking_delta", "thinking": " about it."},
                {"type": "signature_delta", "signature": "EqQBCgIYAh"},
            ],
        ),
        (TEXT, text_deltas("Okay", ", checking")),
        (
            {"type": "tool_use", "id": "toolu_doc", "name": "get_weather", "input": {}},
            [
                {"type": "input_json_delta", "partial_json": ""},
                {"type": "input_json_delta", "partial_json": '{"location":'},
                {"type": "input_json_delta", "partial_json": ' "Paris"}'},
            ],
        ),
    ]
    rec = read(docs_server, "anthropic-messages", sse(anthropic_stream(blocks, "tool_use", 89)))
    assert rec.outcome == "ok", rec.error
    assert (rec.tokens, rec.reasoning_tokens, rec.tool_tokens) == (6, 2, 2)
    assert rec.ttft_s is not None and rec.ttfo_s is not None and rec.ttftc_s is not None
    assert rec.ttft_s < rec.ttfo_s < rec.ttftc_s
    assert rec.finish_reason == "tool_use"


def test_anthropic_prompt_tokens_include_the_cache(docs_server):
    """With prompt caching, input_tokens counts only the tokens neither read from nor written
    to the cache: the prompt is their sum; the cache hits are cache_read_input_tokens."""
    usage = {
        "input_tokens": 5,
        "cache_creation_input_tokens": 100,
        "cache_read_input_tokens": 2000,
        "output_tokens": 1,
    }
    body = sse(anthropic_stream([(TEXT, text_deltas("hi"))], usage=usage))
    rec = read(docs_server, "anthropic-messages", body)
    assert rec.outcome == "ok", rec.error
    assert (rec.usage_prompt_tokens, rec.cached_tokens) == (2105, 2000)


def test_anthropic_error_event_mid_stream(docs_server):
    """The page's example error event (overloaded_error, HTTP 529 outside a stream)."""
    events = anthropic_stream([(TEXT, text_deltas("a"))])[:5]
    events.append({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    rec = read(docs_server, "anthropic-messages", sse(events))
    assert rec.outcome == "error_event" and "Overloaded" in rec.error


@pytest.mark.parametrize(
    ("status", "etype", "outcome"),
    [
        (400, "invalid_request_error", "http_4xx"),
        (401, "authentication_error", "http_4xx"),
        (429, "rate_limit_error", "http_4xx"),
        (529, "overloaded_error", "http_5xx"),
    ],
)
def test_anthropic_http_errors(docs_server, status, etype, outcome):
    """The errors page's shape: {"type": "error", "error": {"type", "message"}, "request_id"}."""
    body = json.dumps(
        {
            "type": "error",
            "error": {"type": etype, "message": f"doc {etype}"},
            "request_id": "req_1",
        }
    ).encode()
    rec = read(
        docs_server,
        "anthropic-messages",
        body,
        status=status,
        headers={"content-type": "application/json", "request-id": "req_1"},
    )
    assert rec.outcome == outcome and rec.status == status
    assert rec.error == f"HTTP {status}: doc {etype}"


def test_anthropic_without_message_stop_is_truncated(docs_server):
    events = anthropic_stream([(TEXT, text_deltas("a", "b"))])[:-1]
    rec = read(docs_server, "anthropic-messages", sse(events))
    assert rec.outcome == "truncated" and "message_stop" in rec.error


# ------------------------------------------------------------------------- Responses
def test_responses_text_stream(docs_server):
    deltas = [("response.output_text.delta", t) for t in ("Hi", " there", "!")]
    rec = read(docs_server, "openai-responses", sse(responses_stream(deltas, output_tokens=9)))
    assert rec.outcome == "ok", rec.error
    assert (rec.tokens, rec.usage_completion_tokens, rec.finish_reason) == (3, 9, "completed")
    assert (rec.usage_prompt_tokens, rec.cached_tokens) == (36, 12)


def test_responses_every_delta_kind(docs_server):
    """Reasoning summary deltas are reasoning tokens; refusal deltas answer tokens; function
    call argument deltas (and the hosted MCP and code interpreter tools' inputs) tool tokens."""
    deltas = [
        ("response.reasoning_summary_text.delta", "**Thinking**"),
        ("response.reasoning_text.delta", "step one"),
        ("response.output_text.delta", "Sure"),
        ("response.refusal.delta", "I can't help with that part"),
        ("response.function_call_arguments.delta", '{"city":'),
        ("response.function_call_arguments.delta", '"Paris"}'),
        ("response.mcp_call_arguments.delta", '{"q": 1}'),
        ("response.code_interpreter_call_code.delta", "print(1)"),
    ]
    rec = read(
        docs_server,
        "openai-responses",
        sse(responses_stream(deltas, reasoning_tokens=2)),
        StreamExpectations(max_tokens=64, forced_length=False),
    )
    assert rec.outcome == "ok", rec.error
    assert (rec.tokens, rec.reasoning_tokens, rec.tool_tokens) == (8, 2, 4)
    assert rec.usage_completion_tokens == 8


@pytest.mark.parametrize(
    ("reason", "expect", "outcome"),
    [
        ("max_output_tokens", HOSTED, "ok"),
        ("max_output_tokens", FORCED, "ok"),
        ("content_filter", HOSTED, "silent_truncation"),
        ("content_filter", FORCED, "silent_truncation"),
    ],
)
def test_responses_incomplete_reasons(docs_server, reason, expect, outcome):
    """response.incomplete: only the length (max_output_tokens) is a complete stream."""
    deltas = [("response.output_text.delta", t) for t in ("a", "b", "c", "d")]
    body = sse(responses_stream(deltas, "response.incomplete", incomplete_reason=reason))
    rec = read(docs_server, "openai-responses", body, expect)
    assert (rec.outcome, rec.finish_reason) == (outcome, reason), rec.error


def test_responses_completed_under_a_forced_length(docs_server):
    deltas = [("response.output_text.delta", t) for t in ("a", "b")]
    rec = read(docs_server, "openai-responses", sse(responses_stream(deltas)), FORCED)
    assert rec.outcome == "silent_truncation", rec.error


def test_responses_failed_and_error(docs_server):
    """response.failed carries the error in its Response; the error event is flat
    ({"type": "error", "code", "message", "param", "sequence_number"})."""
    events = responses_stream([("response.output_text.delta", "a")])[:5]
    failed = {
        "type": "response.failed",
        "sequence_number": 5,
        "response": {
            **events[0]["response"],
            "status": "failed",
            "error": {"code": "server_error", "message": "The model failed"},
        },
    }
    rec = read(docs_server, "openai-responses", sse([*events, failed]))
    assert rec.outcome == "error_event" and "The model failed" in rec.error
    error = {
        "type": "error",
        "code": "ERR_SOMETHING",
        "message": "Something went wrong",
        "param": None,
        "sequence_number": 5,
    }
    rec = read(docs_server, "openai-responses", sse([*events, error]))
    assert rec.outcome == "error_event" and "Something went wrong" in rec.error


def test_responses_without_terminal_is_truncated(docs_server):
    events = responses_stream([("response.output_text.delta", "a")])[:-1]
    rec = read(docs_server, "openai-responses", sse(events))
    assert rec.outcome == "truncated" and "response.completed" in rec.error


# --------------------------------------------------------------------- OpenAI chat
@pytest.mark.parametrize("key", ["reasoning_content", "reasoning"])
def test_chat_reasoning_fields(docs_server, key):
    """DeepSeek's and vLLM's ``reasoning_content``, and the ``reasoning`` field newer vLLM and
    OpenRouter send: reasoning tokens before the answer's ``content``."""

    def chunk(delta: Event, finish: str | None = None) -> Event:
        return {
            "id": "chatcmpl-doc",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    chunks = [
        chunk({"role": "assistant", "content": ""}),
        chunk({key: "think"}),
        chunk({key: " more"}),
        chunk({"content": "Answer"}),
        chunk({"content": "."}, "stop"),
    ]
    body = b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks) + b"data: [DONE]\n\n"
    rec = read(
        docs_server, "openai-chat", body, StreamExpectations(max_tokens=64, forced_length=False)
    )
    assert rec.outcome == "ok", rec.error
    assert (rec.tokens, rec.reasoning_tokens) == (4, 2)
    assert rec.ttfo_s is not None and rec.ttft_s is not None and rec.ttfo_s > rec.ttft_s
