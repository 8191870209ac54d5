"""Single-stream probes for asyncio code (pytest), measured by the core.

Each probe sends one streaming request through the run's own transport and Sans-I/O exchange
(:func:`streamslo.run.preflight.one_stream`, on a worker thread so the event loop stays free):
the same rules, caps and state machine the Locust users use, so a probe's outcome means what it
means in a load run (docs/outcomes.md): a bounded error body, a bounded read after ``[DONE]``,
a bounded ``/v1/models`` answer.
:func:`health_check` is the third incident's health check: a short streaming request that must
end ``ok`` (a cancelled generation, a cut stream or ``finish_reason: stop`` before
``max_tokens`` all fail it).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

from streamslo.results.columns import stream_row
from streamslo.run.preflight import models_and_owner, one_stream
from streamslo.stream.dialects import API_PATHS
from streamslo.stream.timing import StreamExpectations, StreamRecord, Wire
from streamslo.stream.truth import ForcedLength
from streamslo.transport.common import ClientLimits, Target
from streamslo.workload.requests import ENDPOINT_PATHS, RequestOptions, build_body

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
            forced=(ForcedLength.IGNORE_EOS,) if self.ignore_eos else (),
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

    @property
    def expectations(self) -> StreamExpectations:
        return StreamExpectations(max_tokens=self.max_tokens, forced_length=self.ignore_eos)


def request_body(req: ProbeRequest, model: str) -> dict[str, object]:
    """The JSON body of a probe request (also the WS request frame): the same body the load
    users send (:func:`streamslo.workload.requests.build_body`)."""
    body: dict[str, Any] = json.loads(build_body(req.options(model), req.prompt))
    return body


def _probe(base_url: str, req: ProbeRequest, protocol: Wire) -> StreamRecord:
    """One probe, on this thread: the run's own transport and Sans-I/O exchange."""
    limits = ClientLimits(
        stall_timeout=req.stall_timeout_s,
        request_timeout=req.request_timeout_s,
        connect_timeout=min(req.stall_timeout_s, req.request_timeout_s),
    )
    try:
        target = Target.from_url(base_url, dict(req.headers))
    except ValueError as exc:
        raise ValueError(f"probe: {exc}") from None
    model = req.model
    if model is None:
        _, ids, _ = models_and_owner(target, limits)
        model = ids[0] if ids else "default"
    _ = req.path  # (an unknown endpoint raises here)
    rec, _ = one_stream(
        target, protocol, req.options(model), prompt=req.prompt, limits=limits, label="probe"
    )
    return rec


async def probe_sse(base_url: str, req: ProbeRequest | None = None) -> StreamRecord:
    """Send one SSE streaming request and measure it.

    Args:
        base_url: ``http://host:port`` of the target.
        req: the request (default :class:`ProbeRequest`).

    Returns:
        The finished :class:`StreamRecord` (``outcome`` always set).
    """
    return await asyncio.to_thread(_probe, base_url, req or ProbeRequest(), Wire.SSE)


async def probe_ws(base_url: str, req: ProbeRequest | None = None) -> StreamRecord:
    """Send one request over a WebSocket (``/v1/ws``) and measure it.

    Args:
        base_url: ``http://host:port`` of the target (``ws://`` is derived).
        req: the request (default :class:`ProbeRequest`).

    Returns:
        The finished :class:`StreamRecord`.
    """
    return await asyncio.to_thread(_probe, base_url, req or ProbeRequest(), Wire.WS)


async def health_check(
    base_url: str, *, protocol: Wire = Wire.SSE, max_tokens: int = 8, timeout_s: float = 30.0
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
