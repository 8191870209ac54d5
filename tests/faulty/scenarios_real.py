"""Shapes real servers send: vLLM's held-back tokens, streams kept alive without tokens, and
the error objects of vLLM, TGI and SSE ``event: error`` (before and inside the stream)."""

from __future__ import annotations

from typing import Any

from tests.faulty.catalogue import half, register, send_tokens
from tests.faulty.constants import HOLD_MAX_S, KEEPALIVE_INTERVAL_S
from tests.faulty.responses import Out, Request, SseOut, WsOut, token_text
from tests.faulty.wire import dumps, send_json, ws_close_code

__all__ = ["HELD_BACK_EVERY", "KEEPALIVE"]

#: ``ok_vllm_held_back``: every this many tokens, one comes with empty text (held back).
HELD_BACK_EVERY = 3


# vLLM's token positions ------------------------------------------------------------------------


@register(
    "ok_vllm_held_back",
    ("ok", "ok"),
    summary="vLLM 0.32's shape: role chunk, held-back tokens with empty text, usage apart.",
    sse=(
        "Chat: a first chunk with delta {'role':'assistant','content':''}. Then n token chunks: "
        f"every {HELD_BACK_EVERY}rd token, and the last, with empty text (content '' / text ''; "
        "the detokenizer held its bytes back), the others one token of text; the last token's "
        "chunk carries finish_reason 'length'. Then a chunk with choices [] and usage n (if "
        "asked), then [DONE]. n token positions, fewer than n chunks with text."
    ),
    ws="The same chunks as frames, then '[DONE]'.",
)
async def _ok_vllm_held_back(out: Out, req: Request) -> None:
    n = req.max_tokens
    ch = out.chunks
    await out.begin()
    if req.chat:
        await out.chunk(ch.piece("", delta={"role": "assistant", "content": ""}))
    for i in range(n):
        last = i == n - 1
        held = last or i % HELD_BACK_EVERY == HELD_BACK_EVERY - 1
        await out.chunk(ch.piece("" if held else token_text(i), "length" if last else None))
    if req.include_usage:
        await out.chunk(ch.usage_only(n))
    await out.done()
    await out.finish()


# kept alive without tokens ---------------------------------------------------------------------


async def _keep_alive(out: Out, req: Request, kind: str) -> None:
    """Send keep-alives of ``kind`` every KEEPALIVE_INTERVAL_S until the client leaves."""
    ch = out.chunks
    ticks = int(HOLD_MAX_S / KEEPALIVE_INTERVAL_S)
    for tick in range(ticks):
        if kind == "comments":
            if isinstance(out, SseOut):
                await out.body(b": keep-alive\n\n")
            elif isinstance(out, WsOut):
                await out.ws.send_frame(0x9, b"keep-alive")  # ping
        else:
            cycle = tick % 3
            if cycle == 0:
                await out.chunk(
                    ch.piece("", delta={}) if req.chat else {**ch.piece(""), "choices": []}
                )
            elif cycle == 1:
                await out.chunk(
                    ch.usage_only(0) if not req.chat else ch.piece("", delta={"role": "assistant"})
                )
            else:
                await out.data("")  # an empty event / an empty text message
        await out.sleep(KEEPALIVE_INTERVAL_S)
    await out.drop()


@register(
    "keepalive_comments",
    ("stalled", "stalled"),
    summary="Tokens stop; SSE comments (WS: pings) keep the stream alive until the client leaves.",
    sse=f"200 headers, k content chunks, then ': keep-alive' every {KEEPALIVE_INTERVAL_S} s until the client leaves.",
    ws=f"k chunk frames, then a ping every {KEEPALIVE_INTERVAL_S} s until the client leaves.",
)
async def _keepalive_comments(out: Out, req: Request) -> None:
    await out.begin()
    await send_tokens(out, 0, half(req.max_tokens))
    await _keep_alive(out, req, "comments")


@register(
    "keepalive_empty_deltas",
    ("stalled", "stalled"),
    summary="Tokens stop; chunks without a token keep the stream alive until the client leaves.",
    sse=(
        f"200 headers, k content chunks, then every {KEEPALIVE_INTERVAL_S} s in turn: a chunk "
        "with delta {} (completions: choices []), a role-only chunk (completions: a usage-only "
        "chunk), an empty data event; until the client leaves."
    ),
    ws="The same as frames (the empty event as an empty text message).",
)
async def _keepalive_empty_deltas(out: Out, req: Request) -> None:
    await out.begin()
    await send_tokens(out, 0, half(req.max_tokens))
    await _keep_alive(out, req, "chunks")


@register(
    "keepalive_before_first",
    ("stalled", "stalled"),
    summary="Headers, then only SSE comments (WS: pings): no first token ever.",
    sse=f"200 headers, then ': keep-alive' every {KEEPALIVE_INTERVAL_S} s until the client leaves.",
    ws=f"After the request frame, a ping every {KEEPALIVE_INTERVAL_S} s until the client leaves.",
)
async def _keepalive_before_first(out: Out, req: Request) -> None:
    await out.begin()
    await _keep_alive(out, req, "comments")


# error shapes ----------------------------------------------------------------------------------

#: Each in-band error shape: (scenario suffix, the object, the message a client must report).
VLLM_ERROR: dict[str, Any] = {
    "object": "error",
    "message": "faulty-vllm: the engine core died",
    "type": "InternalServerError",
    "param": None,
    "code": 500,
}
TGI_ERROR: dict[str, Any] = {
    "error": "faulty-tgi: request failed during generation",
    "error_type": "generation",
}
SSE_ERROR_TEXT = "faulty-sse: upstream overloaded"


@register(
    "error_vllm_object",
    ("error_event", "error_event"),
    summary="vLLM's in-band error object after some content.",
    sse=f"k content chunks, then 'data: {dumps(VLLM_ERROR)}', then [DONE].",
    ws="k chunk frames, then the same object as a frame, then close 1011.",
)
async def _error_vllm_object(out: Out, req: Request) -> None:
    await out.begin()
    await send_tokens(out, 0, half(req.max_tokens))
    await out.chunk(VLLM_ERROR)
    await out.after_error(500)


@register(
    "error_tgi",
    ("error_event", "error_event"),
    summary="TGI's in-band error ({'error': str, 'error_type': str}) after some content.",
    sse=f"k content chunks, then 'data: {dumps(TGI_ERROR)}', then the 0-length chunk (no [DONE]).",
    ws="k chunk frames, then the same object as a frame, then close 1011.",
)
async def _error_tgi(out: Out, req: Request) -> None:
    await out.begin()
    await send_tokens(out, 0, half(req.max_tokens))
    await out.chunk(TGI_ERROR)
    if isinstance(out, WsOut):
        await out.after_error(500)
    else:
        await out.finish()


@register(
    "error_sse_event",
    ("error_event", "error_event"),
    summary="An SSE 'event: error' whose data is plain text (WS: the text as an error object).",
    sse=f"k content chunks, then 'event: error' + 'data: {SSE_ERROR_TEXT}', then the 0-length chunk.",
    ws="k chunk frames, then {'error': {'message': ...}} as a frame, then close 1011.",
)
async def _error_sse_event(out: Out, req: Request) -> None:
    await out.begin()
    await send_tokens(out, 0, half(req.max_tokens))
    if isinstance(out, SseOut):
        await out.body(f"event: error\ndata: {SSE_ERROR_TEXT}\n\n".encode())
        await out.finish()
    else:
        await out.chunk({"error": {"message": SSE_ERROR_TEXT}})
        await out.after_error(500)


async def _error_before(out: Out, status: int, obj: dict[str, Any]) -> None:
    if isinstance(out, WsOut):
        await out.chunk(obj)
        await out.close(ws_close_code(status))
        return
    assert isinstance(out, SseOut)
    out.ended = True
    await send_json(out.conn, status, obj, keep_alive=out.keep_alive)


@register(
    "error_before_vllm",
    ("http_5xx", "http_5xx"),
    summary="HTTP 500 whose body is vLLM's error object (WS: that object, then close 1011).",
    sse=f"500 application/json '{dumps(VLLM_ERROR)}'.",
    ws="The object as a frame before any content, then close 1011.",
)
async def _error_before_vllm(out: Out, req: Request) -> None:
    await _error_before(out, 500, VLLM_ERROR)


@register(
    "error_before_tgi",
    ("http_4xx", "http_4xx"),
    summary="HTTP 422 whose body is TGI's error (WS: that object with code 422, then close 1008).",
    sse="422 application/json {'error': 'faulty-tgi: ...', 'error_type': 'validation'}.",
    ws="The object (with code 422) as a frame before any content, then close 1008.",
)
async def _error_before_tgi(out: Out, req: Request) -> None:
    obj = {
        "error": "faulty-tgi: Input validation error: max_new_tokens too large",
        "error_type": "validation",
    }
    if isinstance(out, WsOut):
        obj["code"] = 422
    await _error_before(out, 422, obj)


KEEPALIVE = ("keepalive_comments", "keepalive_empty_deltas", "keepalive_before_first")
