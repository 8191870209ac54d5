"""The ok family: correct streams in every shape a real server may use."""

from __future__ import annotations

import asyncio

from tests.faulty.catalogue import (
    AS_OK_WS,
    OK_STREAM,
    OK_WS,
    full_stream,
    half,
    register,
    send_tokens,
)
from tests.faulty.constants import (
    SHORT_PAUSE_S,
    TIMED_ITL_S,
    TIMED_TTFT_S,
)
from tests.faulty.responses import Out, Request, SseOut, WsOut, token_text

__all__: list[str] = []


@register("ok", ("ok", "ok"), summary="A correct stream.", sse=OK_STREAM, ws=OK_WS)
async def _ok(out: Out, req: Request) -> None:
    await full_stream(out, req)


@register(
    "ok_crlf",
    ("ok", "ok"),
    summary="Every SSE line ends with CRLF.",
    sse="As ok, but every line (and the blank line ending each event) ends with '\\r\\n'.",
    ws=AS_OK_WS,
)
async def _ok_crlf(out: Out, req: Request) -> None:
    if isinstance(out, SseOut):
        out.eol = "\r\n"
    await full_stream(out, req)


@register(
    "ok_cr",
    ("ok", "ok"),
    summary="Every SSE line ends with a lone CR.",
    sse="As ok, but every line ends with a lone '\\r' (no '\\n' anywhere in the body).",
    ws=AS_OK_WS,
)
async def _ok_cr(out: Out, req: Request) -> None:
    if isinstance(out, SseOut):
        out.eol = "\r"
    await full_stream(out, req)


@register(
    "ok_sse_fields",
    ("ok", "ok"),
    summary="Comments, event:/id:/retry:, unknown fields, 'data:' without a space.",
    sse=(
        "As ok, but each event is preceded by ': faulty comment line', 'event: message', "
        "'id: <i>', 'x-unknown-field: ...' (and 'retry: 3000' on the first); odd events "
        "write 'data:{...}' with no space; each event is followed by a comment-only block "
        "(': keep-alive...' then a blank line), which dispatches nothing per HTML rules."
    ),
    ws=AS_OK_WS,
)
async def _ok_sse_fields(out: Out, req: Request) -> None:
    if isinstance(out, SseOut):
        out.fields = True
    await full_stream(out, req)


@register(
    "ok_multiline_data",
    ("ok", "ok"),
    summary="Each JSON chunk is split over two data: lines.",
    sse=(
        "As ok, but every JSON chunk is written as two 'data:' lines, cut after its first "
        "comma; the HTML rules join them with '\\n', which is valid JSON whitespace. "
        "'[DONE]' stays one line."
    ),
    ws=AS_OK_WS,
)
async def _ok_multiline(out: Out, req: Request) -> None:
    if isinstance(out, SseOut):
        out.multiline = True
    await full_stream(out, req)


@register(
    "ok_dribble",
    ("ok", "ok"),
    summary="Bytes arrive 1-3 at a time, boundaries mid-line and mid-CRLF.",
    sse=(
        "As ok with CRLF line endings, but the body goes out as HTTP chunks of 1, 2, 3, 1, "
        "2, 3... bytes, each piece its own chunk and write (TCP_NODELAY), a piece always "
        "ending right after every '\\r' (so every CRLF is split), 1 ms pause every 2 "
        "pieces. About 1 s for n=16; keep n <= 32."
    ),
    ws=(
        "As ok, but every message is fragmented: a text frame and continuation frames of "
        "16 payload bytes, each frame written in 3 pieces (header split), 1 ms apart."
    ),
)
async def _ok_dribble(out: Out, req: Request) -> None:
    if isinstance(out, SseOut):
        out.eol = "\r\n"
        out.dribble = True
    elif isinstance(out, WsOut):
        out.fragmented = True
    await full_stream(out, req)


@register(
    "ok_role_empty",
    ("ok", "ok"),
    summary="Role-only first chunk, chunks without a token, finish in its own chunk (OpenAI shape).",
    sse=(
        "Chat: a first chunk with delta {'role':'assistant','content':''}; completions: a "
        "first chunk with choices []. Then n content chunks, each token followed by a chunk "
        "without a token (chat: delta {} and delta {'content': null} alternately; "
        "completions: choices []). Then a chunk with empty content (chat: delta {}; "
        "completions: text '') and finish_reason 'length', then a chunk with choices [] and "
        "usage (if asked), then [DONE]. Only the n tokens are token positions."
    ),
    ws="The same chunks as frames, then '[DONE]'.",
)
async def _ok_role_empty(out: Out, req: Request) -> None:
    n = req.max_tokens
    ch = out.chunks
    await out.begin()
    no_token = ch.piece("", delta={}) if req.chat else {**ch.piece(""), "choices": []}
    if req.chat:
        await out.chunk(ch.piece("", delta={"role": "assistant", "content": ""}))
    else:
        await out.chunk(no_token)
    for i in range(n):
        await out.chunk(ch.piece(token_text(i)))
        if req.chat and i % 2:
            await out.chunk(ch.piece("", delta={"content": None}))
        else:
            await out.chunk(no_token)
    await out.chunk(ch.piece("", "length", delta={}))
    if req.include_usage:
        await out.chunk(ch.usage_only(n))
    await out.done()
    await out.finish()


@register(
    "ok_usage_separate",
    ("ok", "ok"),
    summary="Usage in a final chunk with choices [] (vLLM style).",
    sse=(
        "n content chunks, the last with finish_reason 'length' and no usage; then a chunk "
        "with choices [] and usage (if asked); then [DONE]."
    ),
    ws="The same chunks as frames, then '[DONE]'.",
)
async def _ok_usage_separate(out: Out, req: Request) -> None:
    n = req.max_tokens
    await out.begin()
    await send_tokens(out, 0, n, finish="length")
    if req.include_usage:
        await out.chunk(out.chunks.usage_only(n))
    await out.done()
    await out.finish()


@register(
    "ok_close_delimited",
    ("ok", "ok"),
    summary="No Transfer-Encoding: the body ends when the server closes (valid HTTP/1.1).",
    sse=(
        "200 text/event-stream with 'connection: close' and neither Content-Length nor "
        "Transfer-Encoding; the ok events; after [DONE] the server closes (FIN), which ends "
        "the body cleanly."
    ),
    ws="As ok, then after '[DONE]' the server closes with 1000 (a normal close).",
)
async def _ok_close_delimited(out: Out, req: Request) -> None:
    if isinstance(out, SseOut):
        out.chunked = False
    await full_stream(out, req)
    if isinstance(out, WsOut):
        await out.close(1000)


@register(
    "ok_short_pause",
    ("ok", "ok"),
    summary=f"One {SHORT_PAUSE_S} s pause mid-stream: under the stall timeout, not a stall.",
    sse=f"As ok, but after k chunks a {SHORT_PAUSE_S} s pause, then the rest.",
    ws=f"As ok, with the same {SHORT_PAUSE_S} s pause after k frames.",
)
async def _ok_short_pause(out: Out, req: Request) -> None:
    n = req.max_tokens
    k = min(half(n), n)
    await out.begin()
    await send_tokens(out, 0, k, finish="length" if k == n else None)
    await out.sleep(SHORT_PAUSE_S)
    await send_tokens(out, k, n, finish="length")
    if req.include_usage:
        await out.chunk(out.chunks.usage_only(n))
    await out.done()
    await out.finish()


@register(
    "timed",
    ("ok", "ok"),
    summary=f"Exact timing: TTFT {TIMED_TTFT_S * 1000:.0f} ms, ITL {TIMED_ITL_S * 1000:.0f} ms.",
    sse=(
        "Headers at once; content chunk i at request-read time + "
        f"{TIMED_TTFT_S} s + i x {TIMED_ITL_S} s (absolute schedule, no drift); the last "
        "with finish_reason 'length' and usage (if asked); [DONE] right after it."
    ),
    ws="The same schedule, from when the request frame was read.",
)
async def _timed(out: Out, req: Request) -> None:
    n = req.max_tokens
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    await out.begin()
    for i in range(n):
        await out.sleep_until(t0 + TIMED_TTFT_S + i * TIMED_ITL_S)
        last = i == n - 1
        await out.chunk(
            out.chunks.piece(
                token_text(i),
                "length" if last else None,
                req.usage_if_asked(n) if last else None,
            )
        )
    await out.done()
    await out.finish()


@register(
    "bare_errors",
    ("ok", "ok"),
    summary="Correct streams; a request whose body is not JSON gets a 400 with an empty body.",
    sse=OK_STREAM + " A body that is not JSON: HTTP 400, Content-Length 0.",
    ws=OK_WS,
    note="For `streamslo check`: its bad-request check fails on the missing error body.",
)
async def _bare_errors(out: Out, req: Request) -> None:
    await full_stream(out, req)
