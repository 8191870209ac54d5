"""The scenario catalogue's machinery: :class:`Scenario`, the :data:`SCENARIOS` registry and
:func:`register`, and the helpers scenarios share. The scenarios themselves live in the
``scenarios_*`` modules, one per family; :mod:`tests.faulty.scenarios` loads them all."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from tests.faulty.responses import Out, Request, token_text
from tests.faulty.wire import Conn

__all__ = [
    "AS_OK_SSE",
    "AS_OK_WS",
    "OK_STREAM",
    "OK_WS",
    "SCENARIOS",
    "HandshakeFn",
    "RunFn",
    "Scenario",
    "full_stream",
    "full_until_done",
    "half",
    "register",
    "send_tokens",
]

RunFn = Callable[[Out, Request], Awaitable[None]]
HandshakeFn = Callable[[Conn], Awaitable[None]]


@dataclass(frozen=True)
class Scenario:
    """One deliberate behaviour, precisely described, with the outcome it must produce."""

    name: str
    summary: str
    sse: str  # exactly what happens on SSE
    ws: str  # exactly what happens on WebSocket
    expected_sse: str
    expected_ws: str | None  # None: the protocol does not settle it (see UNSETTLED)
    run: RunFn
    handshake: HandshakeFn | None = None  # WS, path-selected: acts on the handshake
    note: str = ""


#: The catalogue, in a stable order (``ok`` first: it is the first of ``/v1/models``).
SCENARIOS: dict[str, Scenario] = {}


def register(
    name: str,
    expected: tuple[str, str | None],
    *,
    summary: str,
    sse: str,
    ws: str,
    handshake: HandshakeFn | None = None,
    note: str = "",
) -> Callable[[RunFn], RunFn]:
    def add(fn: RunFn) -> RunFn:
        SCENARIOS[name] = Scenario(
            name=name,
            summary=summary,
            sse=sse,
            ws=ws,
            expected_sse=expected[0],
            expected_ws=expected[1],
            run=fn,
            handshake=handshake,
            note=note,
        )
        return fn

    return add


def half(n: int) -> int:
    return max(1, n // 2)


async def send_tokens(
    out: Out,
    first: int,
    stop: int,
    *,
    finish: str | None = None,
    usage: int | None = None,
    interval: float = 0.0,
) -> None:
    """Content chunks ``first..stop-1``; the last carries ``finish`` and ``usage``.

    With no token to send but a finish or usage to give, one empty chunk carries them.
    """
    ch = out.chunks
    if first >= stop:
        if finish is not None or usage is not None:
            await out.chunk(ch.piece("", finish, usage))
        return
    for i in range(first, stop):
        last = i == stop - 1
        await out.chunk(ch.piece(token_text(i), finish if last else None, usage if last else None))
        if interval and not last:
            await out.sleep(interval)


async def full_stream(out: Out, req: Request) -> None:
    """The whole ``ok`` stream: n chunks, ``length`` and usage on the last, ``[DONE]``."""
    n = req.max_tokens
    await out.begin()
    await send_tokens(out, 0, n, finish="length", usage=req.usage_if_asked(n))
    await out.done()
    await out.finish()


OK_STREAM = (
    "200 text/event-stream, chunked, one HTTP chunk per event; n content chunks, one token "
    "each; the last has finish_reason 'length' and usage (if asked); 'data: [DONE]'; the "
    "0-length chunk; the connection stays open (keep-alive)."
)
OK_WS = "n chunk frames as in ok, then '[DONE]'; the connection stays open for the next request."
AS_OK_WS = "Same as ok (this fault is SSE framing only)."
AS_OK_SSE = "Same as ok (this fault is WebSocket only)."


async def full_until_done(out: Out, req: Request) -> None:
    n = req.max_tokens
    await out.begin()
    await send_tokens(out, 0, n, finish="length", usage=req.usage_if_asked(n))
    await out.done()
