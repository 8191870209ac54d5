"""Streams that break: truncated, silently truncated, error events, malformed."""

from __future__ import annotations

from tests.faulty.catalogue import (
    AS_OK_SSE,
    AS_OK_WS,
    full_stream,
    full_until_done,
    half,
    register,
    send_tokens,
)
from tests.faulty.constants import (
    GIANT_EVENT_BYTES,
)
from tests.faulty.responses import Out, Request, SseOut, WsOut, token_text
from tests.faulty.wire import dumps

__all__: list[str] = []

# truncated -----------------------------------------------------------------------------------


@register(
    "truncated_close",
    ("truncated", "truncated"),
    summary="The server hangs up (FIN) mid-stream.",
    sse=(
        "200 headers, k content chunks, then FIN at an HTTP-chunk boundary: no [DONE], no "
        "0-length chunk, so the chunked body is unfinished."
    ),
    ws="k chunk frames, then FIN with no close frame (the client sees 1006).",
)
async def _truncated_close(out: Out, req: Request) -> None:
    await out.begin()
    await send_tokens(out, 0, half(req.max_tokens))
    await out.drop()


@register(
    "truncated_mid_chunk",
    ("truncated", "truncated"),
    summary="The server hangs up in the middle of an HTTP chunk / a WS frame.",
    sse=(
        "200 headers, k content chunks, then the chunk-size line of the next event and half "
        "of its bytes, then FIN."
    ),
    ws="k chunk frames, then the header of the next frame and half its payload, then FIN.",
)
async def _truncated_mid_chunk(out: Out, req: Request) -> None:
    k = half(req.max_tokens)
    await out.begin()
    await send_tokens(out, 0, k)
    await out.partial(out.chunks.piece(token_text(k)))


@register(
    "truncated_reset",
    ("truncated", "truncated"),
    summary="The server resets the connection (RST) mid-stream.",
    sse="200 headers, k content chunks, a 100 ms pause, then RST (SO_LINGER 0).",
    ws="k chunk frames, a 100 ms pause, then RST.",
)
async def _truncated_reset(out: Out, req: Request) -> None:
    await out.begin()
    await send_tokens(out, 0, half(req.max_tokens))
    await out.reset()


@register(
    "close_1000_midway",
    ("truncated", "truncated"),
    summary="A clean end mid-stream: body ends / WS close 1000, before [DONE].",
    sse="200 headers, k content chunks, then the 0-length chunk (a clean end), no [DONE].",
    ws="k chunk frames, then close 1000 with no '[DONE]'.",
)
async def _close_1000_midway(out: Out, req: Request) -> None:
    await out.begin()
    await send_tokens(out, 0, half(req.max_tokens))
    await out.close_normal()


@register(
    "close_1011_midway",
    ("truncated", "truncated"),
    summary="WS close 1011 after some content (no error frame).",
    sse="As truncated_close: k content chunks, then FIN mid-body.",
    ws="k chunk frames, then close 1011 (after content: truncated, not http_5xx).",
)
async def _close_1011_midway(out: Out, req: Request) -> None:
    await out.begin()
    await send_tokens(out, 0, half(req.max_tokens))
    if isinstance(out, WsOut):
        await out.close(1011, "internal error")
    else:
        await out.drop()


@register(
    "no_done",
    ("truncated", "truncated"),
    summary="Everything but [DONE]; the body ends cleanly.",
    sse=(
        "As ok (n chunks, finish_reason 'length', usage if asked) but no [DONE]: the "
        "0-length chunk ends the body cleanly."
    ),
    ws="n chunk frames as in ok, then close 1000 with no '[DONE]'.",
    note="A client run with --no-done-marker reports ok on both.",
)
async def _no_done(out: Out, req: Request) -> None:
    n = req.max_tokens
    await out.begin()
    await send_tokens(out, 0, n, finish="length", usage=req.usage_if_asked(n))
    await out.close_normal()


# silent truncation ---------------------------------------------------------------------------


@register(
    "early_stop",
    ("silent_truncation", "silent_truncation"),
    summary="finish_reason 'stop' early, under ignore_eos.",
    sse=(
        "k content chunks, the last with finish_reason 'stop' and usage.completion_tokens = "
        "k (if asked), then [DONE]."
    ),
    ws="The same as frames, then '[DONE]'.",
    note="Silent under --coalesced-chunks too (rule a).",
)
async def _early_stop(out: Out, req: Request) -> None:
    k = half(req.max_tokens)
    await out.begin()
    await send_tokens(out, 0, k, finish="stop", usage=req.usage_if_asked(k))
    await out.done()
    await out.finish()


@register(
    "usage_overcount",
    ("silent_truncation", "silent_truncation"),
    summary="usage.completion_tokens (= n) exceeds the content chunks sent (n // 2).",
    sse=(
        "n // 2 content chunks, the last with finish_reason 'length' and usage "
        "completion_tokens = n (always, even if not asked), then [DONE]. With n // 2 = 0, "
        "one empty chunk carries the finish_reason and usage. Use n >= 2."
    ),
    ws="The same as frames, then '[DONE]'.",
    note="Rule (b); under --coalesced-chunks (rule a only) it is ok.",
)
async def _usage_overcount(out: Out, req: Request) -> None:
    n = req.max_tokens
    await out.begin()
    await send_tokens(out, 0, n // 2, finish="length", usage=n)
    await out.done()
    await out.finish()


@register(
    "missing_chunks_no_usage",
    ("silent_truncation", "silent_truncation"),
    summary="Fewer content chunks than max_tokens, finish 'length', no usage at all.",
    sse=(
        "n // 2 content chunks, the last with finish_reason 'length', never any usage "
        "(even if asked), then [DONE]. With n // 2 = 0, one empty chunk carries the "
        "finish_reason. Use n >= 2."
    ),
    ws="The same as frames, then '[DONE]'.",
    note="Rule (b) with no usage, under ignore_eos.",
)
async def _missing_chunks_no_usage(out: Out, req: Request) -> None:
    await out.begin()
    await send_tokens(out, 0, req.max_tokens // 2, finish="length")
    await out.done()
    await out.finish()


# error events ----------------------------------------------------------------------------------


@register(
    "error_midstream",
    ("error_event", "error_event"),
    summary="An error object after some content.",
    sse=(
        'k content chunks, then \'data: {"error":{"message","type":"server_error",'
        "\"code\":500}}', then [DONE] and the 0-length chunk (vLLM's shape)."
    ),
    ws="k chunk frames, then an error frame (code 500), then close 1011.",
)
async def _error_midstream(out: Out, req: Request) -> None:
    await out.begin()
    await send_tokens(out, 0, half(req.max_tokens))
    await out.error_event(500, "faulty: the engine died mid-stream")
    await out.after_error(500)


@register(
    "error_first_500",
    ("error_event", "http_5xx"),
    summary="An error (code 500) before any content.",
    sse="200 headers, at once an error event (code 500), then [DONE]: the stream began.",
    ws="An error frame (code 500) before any content, then close 1011.",
)
async def _error_first_500(out: Out, req: Request) -> None:
    await out.begin()
    await out.error_event(500, "faulty: the engine failed before the first token")
    await out.after_error(500)


@register(
    "error_first_400",
    ("error_event", "http_4xx"),
    summary="An error (code 400) before any content.",
    sse="200 headers, at once an error event (code 400), then [DONE]: the stream began.",
    ws="An error frame (code 400) before any content, then close 1008.",
)
async def _error_first_400(out: Out, req: Request) -> None:
    await out.begin()
    await out.error_event(400, "faulty: the request was rejected after the headers")
    await out.after_error(400)


# malformed ---------------------------------------------------------------------------------------

_BAD_JSON = '{"id":"cmpl-faulty-bad","choices":[{not json'


@register(
    "bad_json",
    ("malformed", "malformed"),
    summary="A data line / text frame that is not JSON.",
    sse=f"k content chunks, then 'data: {_BAD_JSON}', then the rest as in ok and [DONE].",
    ws=f"k chunk frames, then a text frame '{_BAD_JSON}', then the rest and '[DONE]'.",
)
async def _bad_json(out: Out, req: Request) -> None:
    n = req.max_tokens
    k = half(n)
    await out.begin()
    await send_tokens(out, 0, k)
    await out.data(_BAD_JSON)
    await send_tokens(out, k, n, finish="length", usage=req.usage_if_asked(n))
    await out.done()
    await out.finish()


@register(
    "data_after_done",
    ("malformed", None),
    summary="A content chunk after [DONE].",
    sse="The ok stream, [DONE], then one more content chunk event, then the 0-length chunk.",
    ws="The ok frames, '[DONE]', one more chunk frame, then close 1000.",
)
async def _data_after_done(out: Out, req: Request) -> None:
    n = req.max_tokens
    await full_until_done(out, req)
    await out.chunk(out.chunks.piece(token_text(n)))
    if isinstance(out, WsOut):
        await out.close(1000)
    else:
        await out.finish()


@register(
    "done_no_finish",
    ("malformed", "malformed"),
    summary="[DONE] arrives but no chunk ever had a finish_reason.",
    sse="n content chunks, all with finish_reason null (usage on the last if asked), [DONE].",
    ws="The same as frames, then '[DONE]'.",
)
async def _done_no_finish(out: Out, req: Request) -> None:
    n = req.max_tokens
    await out.begin()
    await send_tokens(out, 0, n, usage=req.usage_if_asked(n))
    await out.done()
    await out.finish()


@register(
    "extra_chunks",
    ("malformed", "malformed"),
    summary="More content chunks (n + 2) than max_tokens and than usage (n).",
    sse=(
        "n + 2 content chunks, the last with finish_reason 'length' and usage "
        "completion_tokens = n (if asked), then [DONE]."
    ),
    ws="The same as frames, then '[DONE]'.",
)
async def _extra_chunks(out: Out, req: Request) -> None:
    n = req.max_tokens
    await out.begin()
    await send_tokens(out, 0, n + 2, finish="length", usage=req.usage_if_asked(n))
    await out.done()
    await out.finish()


@register(
    "json_body",
    ("malformed", "ok"),
    summary="A 200 whose body is application/json, not an event stream.",
    sse=(
        "200 application/json with Content-Length: a whole non-streaming completion "
        "(chat.completion / text_completion) of n tokens; keep-alive."
    ),
    ws=AS_OK_WS,
)
async def _json_body(out: Out, req: Request) -> None:
    if isinstance(out, SseOut):
        await out.json_response(out.chunks.completion(req.max_tokens))
    else:
        await full_stream(out, req)


@register(
    "endless_line",
    ("malformed", "malformed"),
    summary="One line (WS: one frame) that never ends.",
    sse=(
        "200 headers, then 'data: {\"id\":\"' and 'x' bytes with no newline, in 64 KiB "
        "HTTP chunks as fast as the client reads, up to 64 MiB, then FIN. (Bytes of a line "
        "that never ends are not progress: a client must reach its line cap within its stall "
        "timeout, so the line comes at full speed.)"
    ),
    ws=(
        "A text frame whose header announces 64 MiB, then its payload at the same pace "
        "(never completed), then FIN. A client with websockets' default max_size (1 MiB) "
        "rejects it at the header with close 1009."
    ),
    note="Assumes the client caps one SSE line/event and one WS message well below 64 MiB.",
)
async def _endless_line(out: Out, req: Request) -> None:
    await out.begin()
    await out.endless_line()


@register(
    "giant_event",
    ("malformed", "malformed"),
    summary="One 8 MiB event / frame.",
    sse=(
        "200 headers, one content chunk, then one content chunk whose text is 8 MiB of 'x' "
        "(a single 'data:' line, one HTTP chunk), then the other n - 1 chunks and [DONE]."
    ),
    ws="The same as frames (one 8 MiB text frame), then '[DONE]'.",
    note=(
        "Malformed either way: a client that caps events below 8 MiB rejects it, and one "
        "that does not sees n + 1 content chunks."
    ),
)
async def _giant_event(out: Out, req: Request) -> None:
    n = req.max_tokens
    await out.begin()
    await send_tokens(out, 0, 1, finish="length" if n == 1 else None)
    await out.chunk(out.chunks.piece("x" * GIANT_EVENT_BYTES))
    await send_tokens(out, 1, n, finish="length", usage=req.usage_if_asked(n))
    await out.done()
    await out.finish()


@register(
    "ws_binary_frame",
    ("ok", "malformed"),
    summary="A binary frame in a WebSocket stream.",
    sse=AS_OK_SSE,
    ws=(
        "k chunk frames, then chunk k as a binary frame (its JSON as UTF-8 bytes), then "
        "chunks k+1.. as text frames and '[DONE]'."
    ),
)
async def _ws_binary_frame(out: Out, req: Request) -> None:
    if not isinstance(out, WsOut):
        await full_stream(out, req)
        return
    n = req.max_tokens
    k = min(half(n), n - 1)
    await send_tokens(out, 0, k)
    await out.binary(dumps(out.chunks.piece(token_text(k))).encode())
    await send_tokens(out, k + 1, n, finish="length", usage=req.usage_if_asked(n))
    await out.done()
