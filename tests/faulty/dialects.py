"""The faulty server's OpenAI Responses (``POST /v1/responses``) and Anthropic Messages
(``POST /v1/messages``) streams: each dialect's events written from its own documentation,
independently of the bundled server, and each dialect's faults.

A request's ``max_output_tokens`` (Responses) or ``max_tokens`` (Messages), default 16, is the
token count ``n``; token ``i`` carries the text ``" t{i}"``. A correct stream with ``ignore_eos``
asked ends the way a forced length ends in the dialect: ``response.incomplete`` with
``incomplete_details.reason: "max_output_tokens"``; ``stop_reason: "max_tokens"``. The scenario is
the request's ``model`` (or the path prefix ``/s/<name>``), as for the chunk dialects.

:data:`DIALECT_EXPECTED` maps (scenario, dialect) to what a correct client reports, assuming
the client settings of :data:`tests.faulty.constants` and ``ignore_eos`` asked.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from tests.faulty.constants import DEFAULT_MAX_TOKENS, STALL_S
from tests.faulty.responses import SseOut, token_text

__all__ = [
    "DIALECTS",
    "DIALECT_ENDPOINTS",
    "DIALECT_EXPECTED",
    "DIALECT_SCENARIOS",
    "DialectStream",
    "anthropic_events",
    "responses_events",
    "run_dialect",
]

#: Path -> dialect name (the ``--api`` name).
DIALECT_ENDPOINTS = {"/v1/responses": "openai-responses", "/v1/messages": "anthropic-messages"}
DIALECTS = tuple(DIALECT_ENDPOINTS.values())

Event = tuple[str, dict[str, Any]]


# ------------------------------------------------------------------ the events, per dialect
def responses_events(
    n: int,
    *,
    reasoning: int = 0,
    tool: int = 0,
    end: str = "incomplete",
    reason: str = "max_output_tokens",
    usage: int | None = None,
    error: str | None = None,
) -> tuple[list[Event], list[Event]]:
    """An OpenAI Responses stream: (the events up to and including the last delta, the
    events after it). ``reasoning`` reasoning deltas, then ``n - reasoning - tool`` text
    deltas, then ``tool`` function-call argument deltas. ``end``: ``completed``,
    ``incomplete`` (with ``reason``) or ``failed`` (with ``error``). ``usage``: the
    output tokens the response reports (default ``n``)."""
    seq = iter(range(1_000_000))
    rid = "resp_faulty"
    base = {
        "id": rid,
        "object": "response",
        "created_at": 1700000000,
        "model": "faulty",
        "output": [],
        "usage": None,
        "error": None,
        "incomplete_details": None,
    }
    head: list[Event] = [
        ("response.created", {"response": {**base, "status": "in_progress"}}),
        ("response.in_progress", {"response": {**base, "status": "in_progress"}}),
    ]
    deltas: list[Event] = []
    answer = n - reasoning - tool
    if reasoning:
        head.append(
            (
                "response.output_item.added",
                {
                    "output_index": 0,
                    "item": {"id": "rs_1", "type": "reasoning", "summary": [], "content": []},
                },
            )
        )
        deltas += [
            (
                "response.reasoning_text.delta",
                {"item_id": "rs_1", "output_index": 0, "content_index": 0, "delta": token_text(i)},
            )
            for i in range(reasoning)
        ]
    deltas.append(
        (
            "response.output_item.added",
            {
                "output_index": 1,
                "item": {
                    "id": "msg_1",
                    "type": "message",
                    "status": "in_progress",
                    "role": "assistant",
                    "content": [],
                },
            },
        )
    )
    deltas.append(
        (
            "response.content_part.added",
            {
                "item_id": "msg_1",
                "output_index": 1,
                "content_index": 0,
                "part": {"type": "output_text", "text": "", "annotations": []},
            },
        )
    )
    deltas += [
        (
            "response.output_text.delta",
            {
                "item_id": "msg_1",
                "output_index": 1,
                "content_index": 0,
                "delta": token_text(reasoning + i),
                "logprobs": [],
            },
        )
        for i in range(answer)
    ]
    if tool:
        deltas.append(
            (
                "response.output_item.added",
                {
                    "output_index": 2,
                    "item": {
                        "id": "fc_1",
                        "type": "function_call",
                        "call_id": "call_1",
                        "name": "lookup",
                        "arguments": "",
                    },
                },
            )
        )
        deltas += [
            (
                "response.function_call_arguments.delta",
                {"item_id": "fc_1", "output_index": 2, "delta": token_text(reasoning + answer + i)},
            )
            for i in range(tool)
        ]
    out = usage if usage is not None else n
    tail: list[Event] = [
        (
            "response.output_text.done",
            {"item_id": "msg_1", "output_index": 1, "content_index": 0, "text": "…"},
        ),
        (
            "response.output_item.done",
            {"output_index": 1, "item": {"id": "msg_1", "type": "message"}},
        ),
    ]
    final = {
        **base,
        "usage": {
            "input_tokens": 3,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": out,
            "output_tokens_details": {"reasoning_tokens": reasoning},
            "total_tokens": 3 + out,
        },
    }
    if end == "completed":
        tail.append(("response.completed", {"response": {**final, "status": "completed"}}))
    elif end == "incomplete":
        tail.append(
            (
                "response.incomplete",
                {
                    "response": {
                        **final,
                        "status": "incomplete",
                        "incomplete_details": {"reason": reason},
                    }
                },
            )
        )
    elif end == "failed":
        tail.append(
            (
                "response.failed",
                {
                    "response": {
                        **base,
                        "status": "failed",
                        "error": {"code": "server_error", "message": error or "failed"},
                    }
                },
            )
        )
    events = head + deltas
    return (
        [(k, {"type": k, **v, "sequence_number": next(seq)}) for k, v in events],
        [(k, {"type": k, **v, "sequence_number": next(seq)}) for k, v in tail],
    )


def anthropic_events(
    n: int,
    *,
    reasoning: int = 0,
    tool: int = 0,
    stop_reason: str = "max_tokens",
    usage: int | None = None,
) -> tuple[list[Event], list[Event]]:
    """An Anthropic Messages stream: (events up to the last delta, the events after it)."""
    head: list[Event] = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_faulty",
                    "type": "message",
                    "role": "assistant",
                    "content": [],
                    "model": "faulty",
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {"input_tokens": 3, "output_tokens": 1},
                },
            },
        ),
    ]
    deltas: list[Event] = []
    index = 0
    answer = n - reasoning - tool

    def block(kind: dict[str, Any], field: str, delta_type: str, first: int, count: int) -> None:
        nonlocal index
        deltas.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": kind},
            )
        )
        if index == 0:
            deltas.append(("ping", {"type": "ping"}))
        deltas.extend(
            (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": delta_type, field: token_text(first + i)},
                },
            )
            for i in range(count)
        )
        if delta_type == "thinking_delta":
            deltas.append(
                (
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "signature_delta", "signature": "c2ln"},
                    },
                )
            )
        deltas.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
        index += 1

    if reasoning:
        block({"type": "thinking", "thinking": ""}, "thinking", "thinking_delta", 0, reasoning)
    block({"type": "text", "text": ""}, "text", "text_delta", reasoning, answer)
    if tool:
        block(
            {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {}},
            "partial_json",
            "input_json_delta",
            reasoning + answer,
            tool,
        )
    out = usage if usage is not None else n
    tail: list[Event] = [
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": out},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    return head + deltas, tail


# ----------------------------------------------------------------------------- scenarios
@dataclass
class DialectStream:
    """One dialect request as a scenario sees it, and where it writes."""

    out: SseOut
    dialect: str
    body: dict[str, Any]

    @property
    def n(self) -> int:
        key = "max_output_tokens" if self.dialect == "openai-responses" else "max_tokens"
        value = self.body.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            return DEFAULT_MAX_TOKENS
        return value

    def events(self, **kw: Any) -> tuple[list[Event], list[Event]]:
        """This dialect's stream (see :func:`responses_events`, :func:`anthropic_events`);
        ``stop``: the length end (default) or ``natural`` (``completed``/``end_turn``), or
        ``filter`` (``content_filter``/``refusal``)."""
        stop = kw.pop("stop", "length")
        if self.dialect == "openai-responses":
            if stop == "natural":
                kw["end"] = "completed"
            elif stop == "filter":
                kw["reason"] = "content_filter"
            return responses_events(self.n, **kw)
        kw.pop("error", None)
        kw["stop_reason"] = {"length": "max_tokens", "natural": "end_turn", "filter": "refusal"}[
            stop
        ]
        return anthropic_events(self.n, **kw)

    @property
    def ws(self) -> bool:
        """Over a WebSocket gateway: one event per text frame (no SSE framing)."""
        return self.out.proto == "ws"

    async def send(self, events: list[Event]) -> None:
        for name, obj in events:
            await self.event(name, obj)

    async def event(self, name: str, obj: dict[str, Any]) -> None:
        data = json.dumps(obj, separators=(",", ":"))
        if self.ws:
            await self.out.data(data)
            return
        await self.out.body(f"event: {name}\ndata: {data}\n\n".encode())

    async def raw(self, data: bytes) -> None:
        """SSE bytes as they are (a comment, ``data: [DONE]``); on WS, the data's text as one
        frame (a comment is not sent)."""
        if not self.ws:
            await self.out.body(data)
        elif data.startswith(b"data: "):
            await self.out.data(data[6:].strip().decode())

    async def end(self) -> None:
        """End the response without a terminal event: SSE, the end of the body; WS, a normal
        close (1000) of the connection."""
        if self.ws:
            await self.out.close_normal()
        else:
            await self.out.finish()


ScenarioFn = Callable[[DialectStream], Awaitable[None]]
DIALECT_SCENARIOS: dict[str, ScenarioFn] = {}
#: (scenario, dialect) -> the outcome a correct client reports.
DIALECT_EXPECTED: dict[tuple[str, str], str] = {}


def _scenario(name: str, responses: str, anthropic: str) -> Callable[[ScenarioFn], ScenarioFn]:
    def add(fn: ScenarioFn) -> ScenarioFn:
        DIALECT_SCENARIOS[name] = fn
        DIALECT_EXPECTED[(name, "openai-responses")] = responses
        DIALECT_EXPECTED[(name, "anthropic-messages")] = anthropic
        return fn

    return add


async def _whole(s: DialectStream, **kw: Any) -> None:
    head, tail = s.events(**kw)
    await s.out.begin()
    await s.send(head + tail)
    await s.out.finish()


@_scenario("ok", "ok", "ok")
async def _ok(s: DialectStream) -> None:
    """The whole stream, ended by the forced length."""
    await _whole(s)


@_scenario("ok_reasoning", "ok", "ok")
async def _ok_reasoning(s: DialectStream) -> None:
    """A quarter of the tokens reasoning, then the answer, then a quarter tool-call arguments;
    5 ms between events."""
    head, tail = s.events(reasoning=max(1, s.n // 4), tool=max(1, s.n // 4))
    await s.out.begin()
    for name, obj in head + tail:
        await s.event(name, obj)
        await asyncio.sleep(0.005)
    await s.out.finish()


@_scenario("ok_split", "ok", "ok")
async def _ok_split(s: DialectStream) -> None:
    """Every event written in two HTTP chunks cut mid-line, 1 ms apart."""
    head, tail = s.events()
    await s.out.begin()
    if s.ws:  # a WebSocket message is whole: nothing to split
        await s.send(head + tail)
        return
    for name, obj in head + tail:
        raw = f"event: {name}\r\ndata: {json.dumps(obj)}\r\n\r\n".encode()
        cut = len(raw) // 2
        await s.out.body(raw[:cut])
        await asyncio.sleep(0.001)
        await s.out.body(raw[cut:])
    await s.out.finish()


@_scenario("natural_end", "ok", "silent_truncation")
async def _natural_end(s: DialectStream) -> None:
    """All n tokens, but ended as if the model stopped (``completed`` / ``end_turn``). Under a
    forced length ``end_turn`` contradicts it; ``completed`` with ``output_tokens`` at
    ``max_output_tokens`` is how vLLM and llama.cpp end a stream at the limit: complete."""
    await _whole(s, stop="natural")


@_scenario("short_natural", "silent_truncation", "silent_truncation")
async def _short(s: DialectStream) -> None:
    """Half the tokens, usage saying half, ``completed`` / ``end_turn`` (incident C's shape)."""
    half = max(1, s.n // 2)
    s.body = {**s.body, "max_output_tokens": half, "max_tokens": half}
    await _whole(s, stop="natural")


@_scenario("filtered", "silent_truncation", "silent_truncation")
async def _filtered(s: DialectStream) -> None:
    """``response.incomplete`` with reason ``content_filter``; Anthropic ``stop_reason: refusal``."""
    await _whole(s, stop="filter")


@_scenario("usage_more", "silent_truncation", "silent_truncation")
async def _usage_more(s: DialectStream) -> None:
    """Usage counts n + 3 output tokens; n deltas arrived."""
    await _whole(s, usage=s.n + 3)


@_scenario("usage_less", "malformed", "malformed")
async def _usage_less(s: DialectStream) -> None:
    """Usage counts n - 1 output tokens; n deltas arrived."""
    await _whole(s, usage=s.n - 1)


@_scenario("cut", "truncated", "truncated")
async def _cut(s: DialectStream) -> None:
    """Half the deltas, then the connection closes mid-body (FIN, chunked body unfinished)."""
    head, _ = s.events()
    await s.out.begin()
    await s.send(head[: len(head) // 2])
    await s.out.drop()


@_scenario("no_terminal", "truncated", "truncated")
async def _no_terminal(s: DialectStream) -> None:
    """Every delta, then the body ends cleanly without the terminal event (WS: close 1000)."""
    head, tail = s.events()
    await s.out.begin()
    await s.send(head + tail[:-1])
    await s.end()


@_scenario("error_midway", "error_event", "error_event")
async def _error_midway(s: DialectStream) -> None:
    """Half the deltas, then the dialect's ``error`` event, then the body ends."""
    head, _ = s.events()
    await s.out.begin()
    await s.send(head[: len(head) // 2])
    if s.dialect == "openai-responses":
        await s.event(
            "error",
            {
                "type": "error",
                "code": "server_error",
                "message": "faulty: engine died",
                "param": None,
                "sequence_number": 999,
            },
        )
    else:
        await s.event(
            "error",
            {
                "type": "error",
                "error": {"type": "overloaded_error", "message": "faulty: engine died"},
            },
        )
    await s.out.finish()


@_scenario("failed", "error_event", "error_event")
async def _failed(s: DialectStream) -> None:
    """Responses: half the deltas, then ``response.failed``; Messages: an ``error`` first thing."""
    head, _ = s.events()
    await s.out.begin()
    if s.dialect == "openai-responses":
        await s.send(head[: len(head) // 2])
        _, tail = s.events(end="failed", error="faulty: response failed")
        await s.send(tail[-1:])
    else:
        await s.event(
            "error", {"type": "error", "error": {"type": "api_error", "message": "faulty: failed"}}
        )
    await s.out.finish()


@_scenario("keepalive", "stalled", "stalled")
async def _keepalive(s: DialectStream) -> None:
    """Half the deltas, then no token: only non-token events (Responses ``response.in_progress``;
    Messages ``ping``) and SSE comments every 0.2 s, for STALL_S, then FIN."""
    head, _ = s.events()
    await s.out.begin()
    await s.send(head[: len(head) // 2])
    loop = asyncio.get_running_loop()
    stop = loop.time() + STALL_S
    while loop.time() < stop and not s.out.closed:
        if s.dialect == "openai-responses":
            await s.event(
                "response.in_progress",
                {"type": "response.in_progress", "response": {"status": "in_progress"}},
            )
        else:
            await s.event("ping", {"type": "ping"})
        await s.raw(b": keep-alive\n\n")
        await asyncio.sleep(0.2)
    await s.out.drop()


@_scenario("empty_deltas", "stalled", "stalled")
async def _empty_deltas(s: DialectStream) -> None:
    """Half the deltas, then deltas with empty text every 0.2 s, for STALL_S, then FIN."""
    head, _ = s.events()
    await s.out.begin()
    await s.send(head[: len(head) // 2])
    loop = asyncio.get_running_loop()
    stop = loop.time() + STALL_S
    while loop.time() < stop and not s.out.closed:
        if s.dialect == "openai-responses":
            await s.event(
                "response.output_text.delta",
                {
                    "type": "response.output_text.delta",
                    "item_id": "msg_1",
                    "output_index": 1,
                    "content_index": 0,
                    "delta": "",
                },
            )
        else:
            await s.event(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": ""},
                },
            )
        await asyncio.sleep(0.2)
    await s.out.drop()


@_scenario("data_after_terminal", "malformed", "malformed")
async def _data_after(s: DialectStream) -> None:
    """The whole stream, then one more delta event after the terminal event."""
    head, tail = s.events()
    await s.out.begin()
    await s.send(head + tail + head[-1:])
    await s.out.finish()


@_scenario("done_after_terminal", "ok", "ok")
async def _done_after(s: DialectStream) -> None:
    """The whole stream, then ``data: [DONE]`` (an OpenAI habit some servers keep): harmless."""
    head, tail = s.events()
    await s.out.begin()
    await s.send(head + tail)
    await s.raw(b"data: [DONE]\n\n")
    await s.out.finish()


@_scenario("http_503", "http_5xx", "http_5xx")
async def _http_503(s: DialectStream) -> None:
    """503 before the stream, with the dialect's error body."""
    await s.out.error_before(503, "faulty: overloaded")


async def run_dialect(out: SseOut, dialect: str, body: dict[str, Any], name: str) -> bool:
    """Run scenario ``name`` of the dialects; False when there is no such scenario."""
    fn = DIALECT_SCENARIOS.get(name)
    if fn is None:
        return False
    await fn(DialectStream(out, dialect, body))
    return True
