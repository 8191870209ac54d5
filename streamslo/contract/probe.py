"""One probe request at a time, judged by the run's own tracker: what the preflight, the contract
probes (:mod:`streamslo.contract.learn`), ``check`` and the pytest probes send before (or
beside) a load.

A probe is the run's own request (:func:`streamslo.workload.requests.build_body`), sent over the
run's transport (:mod:`streamslo.transport`) on a connection of its own and judged by the same
tracker (:mod:`streamslo.stream.tracker`), so that its outcome and cause mean what they mean in
the run.
"""

from __future__ import annotations

import itertools
import time

from streamslo.errors import ProtocolError
from streamslo.stream.chunkjson import loads_chunk
from streamslo.stream.dialects import EVENT_APIS, tracker_for
from streamslo.stream.envelope import WSEnvelope
from streamslo.stream.timing import StreamExpectations, StreamRecord, Wire
from streamslo.stream.tracker import StreamTracker
from streamslo.transport.common import ClientLimits, Target
from streamslo.transport.fetch import fetch
from streamslo.transport.sse import stream_sse
from streamslo.transport.ws import WSConnection
from streamslo.workload.requests import (
    WS_PATH,
    RequestOptions,
    build_body,
    first_model_id,
    first_model_owner,
)

__all__ = ["PROBE_LIMITS", "list_models", "models_and_owner", "one_stream"]

#: Time limits of a probe request: a wrong target fails well under 10 s.
PROBE_LIMITS = ClientLimits(
    stall_timeout=5.0, request_timeout=8.0, connect_timeout=3.0, tls_timeout=1.0
)

_seq = itertools.count(1)


def list_models(
    target: Target, limits: ClientLimits = PROBE_LIMITS
) -> tuple[int | None, list[str]]:
    """``GET /v1/models``: the status (None: no answer) and the model ids listed."""
    status, ids, _ = models_and_owner(target, limits)
    return status, ids


def models_and_owner(
    target: Target, limits: ClientLimits = PROBE_LIMITS
) -> tuple[int | None, list[str], str | None]:
    """``GET /v1/models``: the status (None: no answer), the model ids listed, and who serves
    the first (``owned_by``: the engine, docs/servers.md)."""
    try:
        status, body = fetch(target, "/v1/models", timeout=limits.request_timeout, limits=limits)
    except (OSError, ProtocolError, ValueError):
        return None, [], None
    if status != 200:
        return status, [], None
    try:
        listing = loads_chunk(body.decode("utf-8", "replace"))
    except ValueError:
        return status, [], None
    data = listing.get("data") if isinstance(listing, dict) else None
    ids = (
        [str(m["id"]) for m in data if isinstance(m, dict) and "id" in m]
        if isinstance(data, list)
        else []
    )
    if not ids and first_model_id(listing):
        ids = [str(first_model_id(listing))]
    return status, ids, first_model_owner(listing)


def one_stream(
    target: Target,
    protocol: Wire,
    request: RequestOptions,
    *,
    prompt: str = "Say hello.",
    envelope: WSEnvelope | None = None,
    limits: ClientLimits = PROBE_LIMITS,
    collect_text: bool = False,
    label: str = "preflight",
    expect: StreamExpectations | None = None,
) -> tuple[StreamRecord, StreamTracker]:
    """One streaming request on its own connection, judged by the run's tracker.

    Args:
        target: the server.
        protocol: ``sse`` or ``ws``.
        request: how the request is built and judged (its ``max_tokens`` included).
        prompt: the user message.
        envelope: the WebSocket envelope (plain by default).
        limits: time limits.
        collect_text: keep the answer's text (``tracker.text``).
        label: the record's user class and the start of its stream id.
        expect: how the stream is judged (default: as the request asks).

    Returns:
        The finished record and its tracker.
    """
    env = envelope or WSEnvelope()
    rec = StreamRecord(
        stream_id=f"{label}-{next(_seq)}",
        protocol=protocol,
        user_class=label,
        started_at=time.time(),
        t0=time.perf_counter(),
    )
    if expect is None:
        expect = request.expectations()
    body = build_body(request, prompt)
    tracker: StreamTracker
    if request.dialect in EVENT_APIS:  # typed events, on either transport (as a run reads them)
        tracker = tracker_for(request.dialect, rec, expect, limits.max_event_bytes, collect_text)
    elif protocol == "ws":
        tracker = env.tracker(rec, expect, limits.max_event_bytes, collect_text)
    else:
        tracker = StreamTracker(rec, expect, limits.max_event_bytes, collect_text)
    if protocol == "ws":
        conn = WSConnection(target, WS_PATH, limits)
        try:
            conn.request(env.wrap(body), tracker)
        finally:
            conn.close()
    else:
        stream_sse(target, request.path, body, tracker, limits)
    return rec, tracker
