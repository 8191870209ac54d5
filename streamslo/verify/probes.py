"""Single-stream probes over asyncio (httpx for SSE, websockets for WS), measured by the core.

Each probe sends one streaming request and feeds the bytes, with a ``perf_counter()`` taken as
they are read, into :class:`streamslo.stream.tracker.StreamTracker`: the same state machine the
Locust users use, so a probe's outcome means what it means in a load run (docs/outcomes.md),
under the same caps (:mod:`streamslo.stream.caps`): a bounded error body, a bounded read after
``[DONE]``, a depth-bounded ``/v1/models`` answer.
:func:`health_check` is the third incident's health check: a short streaming request that must
end ``ok`` (a cancelled generation, a cut stream or ``finish_reason: stop`` before
``max_tokens`` all fail it).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

from streamslo.results.columns import stream_row
from streamslo.stream import caps
from streamslo.stream.chunkjson import loads_chunk
from streamslo.stream.dialects import API_PATHS, ENDPOINT_APIS, tracker_for
from streamslo.stream.timing import StreamExpectations, StreamRecord
from streamslo.stream.tracker import StreamTracker
from streamslo.transport.common import ClientLimits
from streamslo.workload.requests import ENDPOINT_PATHS, RequestOptions, build_body, first_model_id

__all__ = [
    "ProbeRequest",
    "assert_stream_ok",
    "describe",
    "health_check",
    "probe_sse",
    "probe_ws",
    "request_body",
]


@dataclass(frozen=True, slots=True)
class ProbeRequest:
    """What a probe asks for (docs/protocol.md)."""

    endpoint: str = "chat"
    """``chat`` (/v1/chat/completions), ``completions`` (/v1/completions) or ``stream`` (/v1/stream)."""
    model: str | None = None
    """The model; None asks ``/v1/models`` and takes the first."""
    prompt: str = "Say hello."
    max_tokens: int = 16
    ignore_eos: bool = True
    include_usage: bool = True
    stall_timeout_s: float = ClientLimits.stall_timeout
    """No token (before the stream: no byte) for this long ends the probe ``stalled``."""
    request_timeout_s: float = 60.0
    """The whole request ends ``timeout`` past this."""
    headers: tuple[tuple[str, str], ...] = ()
    api: str = ""
    """The dialect (``--api`` names); empty: the one :attr:`endpoint` names."""

    def options(self, model: str) -> RequestOptions:
        """The shared request options (:mod:`streamslo.workload.requests`) for this probe."""
        return RequestOptions(
            endpoint=self.endpoint,
            model=model,
            max_tokens=self.max_tokens,
            ignore_eos=self.ignore_eos,
            include_usage=self.include_usage,
            api=self.api,
        )

    @property
    def path(self) -> str:
        if self.endpoint not in ENDPOINT_PATHS:
            raise ValueError(
                f"unknown endpoint {self.endpoint!r}; expected {', '.join(ENDPOINT_PATHS)}"
            )
        return API_PATHS[self.api] if self.api else ENDPOINT_PATHS[self.endpoint]

    def tracker(self, rec: StreamRecord) -> StreamTracker:
        """The tracker of this probe's dialect."""
        return tracker_for(self.api or ENDPOINT_APIS[self.endpoint], rec, self.expectations)

    @property
    def expectations(self) -> StreamExpectations:
        return StreamExpectations(max_tokens=self.max_tokens, ignore_eos=self.ignore_eos)


def request_body(req: ProbeRequest, model: str) -> dict[str, object]:
    """The JSON body of a probe request (also the WS request frame): the same body the load
    users send (:func:`streamslo.workload.requests.build_body`)."""
    body: dict[str, Any] = json.loads(build_body(req.options(model), req.prompt))
    return body


async def _model(client: Any, base_url: str, req: ProbeRequest) -> str:
    if req.model is not None:
        return req.model
    import httpx

    try:
        async with client.stream(
            "GET", base_url.rstrip("/") + "/v1/models", headers=dict(req.headers)
        ) as resp:
            body = bytearray()
            async for part in resp.aiter_raw():
                body += part
                if len(body) > _MODELS_MAX_BYTES:
                    return "default"
            model = (
                first_model_id(loads_chunk(body.decode("utf-8", "replace")))
                if resp.status_code == 200
                else None
            )
        if model is not None:
            return model
    except (httpx.HTTPError, ValueError):
        pass
    return "default"


#: The most of a ``/v1/models`` answer a probe reads.
_MODELS_MAX_BYTES = 1 << 20


def _record(protocol: str) -> StreamRecord:
    return StreamRecord(
        stream_id=f"probe-{uuid.uuid4().hex[:12]}",
        protocol=protocol,
        user_class="probe",
        started_at=time.time(),
        t0=time.perf_counter(),
    )


async def probe_sse(base_url: str, req: ProbeRequest | None = None) -> StreamRecord:
    """Send one SSE streaming request and measure it.

    Args:
        base_url: ``http://host:port`` of the target.
        req: the request (default :class:`ProbeRequest`).

    Returns:
        The finished :class:`StreamRecord` (``outcome`` always set).
    """
    import httpx

    req = req or ProbeRequest()
    timeout = httpx.Timeout(req.stall_timeout_s)
    async with httpx.AsyncClient(timeout=timeout) as client:
        model = await _model(client, base_url, req)
        rec = _record("sse")
        tracker = req.tracker(rec)
        tracker.stall_timeout = req.stall_timeout_s

        async def trace(name: str, info: Any) -> None:
            if name == "connection.connect_tcp.complete":
                tracker.on_connected(time.perf_counter())

        url = base_url.rstrip("/") + req.path
        try:
            async with asyncio.timeout(req.request_timeout_s):
                async with client.stream(
                    "POST",
                    url,
                    json=request_body(req, model),
                    headers=dict(req.headers),
                    extensions={"trace": trace},
                ) as resp:
                    t = time.perf_counter()
                    if not 200 <= resp.status_code < 300:
                        tracker.on_http_error(t, resp.status_code, await _error_body(resp))
                        return rec
                    tracker.on_response(t, resp.status_code, resp.headers.get("content-type"))
                    await _read_sse(resp, tracker)
        except TimeoutError:
            tracker.on_deadline(time.perf_counter(), req.request_timeout_s)
        except httpx.TimeoutException as exc:
            t = time.perf_counter()
            if isinstance(exc, httpx.ConnectTimeout):
                tracker.on_transport_error(t, exc)
            else:
                tracker.on_stall(t, req.stall_timeout_s)
        except httpx.RemoteProtocolError as exc:
            t = time.perf_counter()
            if rec.status is None:
                tracker.on_transport_error(t, exc)
            else:
                tracker.on_eof(t, body_complete=False)
        except (httpx.TransportError, OSError) as exc:
            tracker.on_transport_error(time.perf_counter(), exc)
    return rec


async def _error_body(resp: Any) -> bytes:
    """At most :data:`caps.MAX_ERROR_BODY_BYTES` of a non-2xx body, read for at most
    :data:`caps.ERROR_BODY_WAIT_S`: enough for the error message, never a whole flood."""
    body = bytearray()
    try:
        async with asyncio.timeout(caps.ERROR_BODY_WAIT_S):
            async for part in resp.aiter_raw():
                body += part
                if len(body) >= caps.MAX_ERROR_BODY_BYTES:
                    break
    except TimeoutError:
        pass
    return bytes(body[: caps.MAX_ERROR_BODY_BYTES])


def _no_token_for_too_long(tracker: StreamTracker, t: float) -> bool:
    """Keep-alives arrive but no token for the stall timeout: ``stalled`` (docs/outcomes.md;
    a read timeout alone would let comments or pings hold the probe to its deadline)."""
    stall = tracker.stall_timeout
    if stall is None or tracker.finished or t - tracker.progress_t < stall:
        return False
    tracker.on_stall(t, stall)
    return True


async def _read_sse(resp: Any, tracker: StreamTracker) -> None:
    if tracker.finished:
        return
    chunks = resp.aiter_raw()
    async for data in chunks:
        t = time.perf_counter()
        tracker.on_sse_bytes(t, data)
        if not tracker.wants_bytes:
            return  # ended before [DONE], or too much after it: nothing more to read
        if tracker.reading_after_done:
            break
        if _no_token_for_too_long(tracker, t):
            return
    else:
        tracker.on_eof(time.perf_counter(), body_complete=True)
        return
    # After [DONE]: a short, bounded read to the body's end (more data there is malformed).
    try:
        async with asyncio.timeout(caps.AFTER_DONE_WAIT_S):
            async for data in chunks:
                tracker.on_sse_bytes(time.perf_counter(), data)
                if not tracker.wants_bytes:
                    return
    except TimeoutError:
        tracker.stop_reading()
        return
    tracker.on_eof(time.perf_counter(), body_complete=True)


def _ws_url(base_url: str) -> str:
    base = base_url.rstrip("/")
    if base.startswith("https://"):
        return "wss://" + base[len("https://") :] + "/v1/ws"
    if base.startswith("http://"):
        return "ws://" + base[len("http://") :] + "/v1/ws"
    return base + "/v1/ws"


async def probe_ws(base_url: str, req: ProbeRequest | None = None) -> StreamRecord:
    """Send one request over a WebSocket (``/v1/ws``) and measure it.

    Args:
        base_url: ``http://host:port`` of the target (``ws://`` is derived).
        req: the request (default :class:`ProbeRequest`).

    Returns:
        The finished :class:`StreamRecord`.
    """
    import httpx
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

    req = req or ProbeRequest()
    async with httpx.AsyncClient(timeout=httpx.Timeout(req.stall_timeout_s)) as client:
        model = await _model(client, base_url, req)
    rec = _record("ws")
    tracker = req.tracker(rec)
    tracker.stall_timeout = req.stall_timeout_s
    try:
        async with asyncio.timeout(req.request_timeout_s):
            async with connect(
                _ws_url(base_url),
                open_timeout=req.stall_timeout_s,
                ping_interval=None,
                additional_headers=dict(req.headers),
                max_size=caps.DEFAULT_MAX_EVENT_BYTES,
                # The stream ends at its [DONE]; closing then waits only briefly for the
                # server's close (a server flooding frames must not hold the probe).
                close_timeout=caps.AFTER_DONE_WAIT_S,
            ) as ws:
                t = time.perf_counter()
                tracker.on_connected(t)
                tracker.on_ws_accepted(t)
                await ws.send(json.dumps(request_body(req, model)))
                while not tracker.finished:
                    try:
                        msg = await asyncio.wait_for(ws.recv(), req.stall_timeout_s)
                    except TimeoutError:
                        tracker.on_stall(time.perf_counter(), req.stall_timeout_s)
                        break
                    t = time.perf_counter()
                    if isinstance(msg, bytes):
                        tracker.on_ws_binary(t, len(msg))
                    else:
                        tracker.on_ws_text(t, msg)
                    if _no_token_for_too_long(tracker, t):
                        break
    except TimeoutError:
        tracker.on_deadline(time.perf_counter(), req.request_timeout_s)
    except InvalidStatus as exc:
        body = (exc.response.body or b"")[: caps.MAX_ERROR_BODY_BYTES]
        tracker.on_http_error(time.perf_counter(), exc.response.status_code, body)
    except ConnectionClosed as exc:
        rcvd = exc.rcvd
        tracker.on_ws_close(
            time.perf_counter(), rcvd.code if rcvd else None, rcvd.reason if rcvd else ""
        )
    except (InvalidHandshake, OSError) as exc:
        t = time.perf_counter()
        if rec.status is None:
            tracker.on_transport_error(t, exc)
        else:
            tracker.on_protocol_error(t, f"{type(exc).__name__}: {exc}")
    return rec


async def health_check(
    base_url: str, *, protocol: str = "sse", max_tokens: int = 8, timeout_s: float = 30.0
) -> StreamRecord:
    """The third incident's health check: one short streaming request that must end ``ok``.

    Args:
        base_url: ``http://host:port`` of the target.
        protocol: ``sse`` or ``ws``.
        max_tokens: tokens asked for (``ignore_eos``, so exactly that many must arrive).
        timeout_s: the whole request's deadline.

    Returns:
        The finished :class:`StreamRecord`; check it with :func:`assert_stream_ok`.

    Raises:
        ValueError: an unknown protocol.
    """
    req = ProbeRequest(
        max_tokens=max_tokens, request_timeout_s=timeout_s, stall_timeout_s=min(10.0, timeout_s)
    )
    if protocol == "sse":
        return await probe_sse(base_url, req)
    if protocol == "ws":
        return await probe_ws(base_url, req)
    raise ValueError(f"unknown protocol {protocol!r}; expected sse or ws")


def describe(rec: StreamRecord) -> str:
    """One line about a probed stream: outcome, tokens, timings, error."""
    row = stream_row(rec)
    parts = [
        f"{rec.protocol} probe {rec.stream_id}: {rec.outcome}",
        f"status {rec.status}",
        f"{row['tokens']} tokens",
    ]
    if rec.expected_tokens is not None:
        parts[-1] += f" of {rec.expected_tokens}"
    if rec.finish_reason is not None:
        parts.append(f"finish_reason {rec.finish_reason!r}")
    for key in ("ttft_ms", "max_gap_ms", "e2e_ms"):
        if row[key] is not None:
            parts.append(f"{key} {row[key]}")
    if rec.error:
        parts.append(f"error: {rec.error}")
    return ", ".join(parts)


def assert_stream_ok(rec: StreamRecord) -> None:
    """Raise AssertionError, with :func:`describe`'s line, unless the stream ended ``ok``."""
    if rec.outcome != "ok":
        raise AssertionError(describe(rec))
