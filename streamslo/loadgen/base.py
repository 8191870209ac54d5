"""The stream user base class: one task, one stream at a time, measured by the shared core.

A user holds one stream open at a time (closed loop); hundreds of users hold hundreds of
streams. Subclasses only say which transport and whether they read slowly.
"""

from __future__ import annotations

from typing import Any, ClassVar

from locust import User, task

from streamslo.loadgen.recorder import RunRecorder, get_recorder
from streamslo.stream.timing import StreamRecord
from streamslo.stream.tracker import StreamTracker
from streamslo.transport.sync import ClientLimits, SSEConnection, WSConnection, stream_sse
from streamslo.workload import WS_PATH, build_body

__all__ = ["StreamUser", "run_one_stream"]


def run_one_stream(
    recorder: RunRecorder,
    protocol: str,
    user_class: str,
    limits: ClientLimits,
    ws: WSConnection | None = None,
    scheduled_at: float | None = None,
    sse: SSEConnection | None = None,
) -> StreamRecord:
    """Run one request to its end and record it (also when the run cancels it).

    Args:
        recorder: the process's recorder.
        protocol: ``sse`` or ``ws``.
        user_class: the label for ``streams.csv``.
        limits: timeouts and read behaviour.
        ws: the WebSocket connection to use (``ws`` only; reused between requests).
        scheduled_at: open loop: when the arrival process scheduled this request.
        sse: the HTTP connection to use (``sse`` only; kept alive between requests).
    """
    req = recorder.request
    body = build_body(req, recorder.prompts.next())
    rec = recorder.new_record(protocol, user_class, scheduled_at)
    tracker = StreamTracker(rec, req.expectations(), limits.max_event_bytes)
    try:
        if protocol == "ws":
            conn = ws if ws is not None else WSConnection(recorder.target, WS_PATH, limits)
            try:
                conn.request(body, tracker)
            finally:
                if ws is None:
                    conn.close()
        elif sse is not None:
            sse.request(req.path, body, tracker)
        else:
            stream_sse(recorder.target, req.path, body, tracker, limits)
    finally:
        recorder.finish(rec)
    return rec


class StreamUser(User):
    """Holds one stream at a time against an OpenAI-compatible streaming server."""

    abstract = True
    protocol: ClassVar[str] = "sse"
    """``sse`` or ``ws``."""
    slow: ClassVar[bool] = False
    """Read slowly, so the server feels back-pressure."""

    def __init__(self, environment: Any) -> None:
        super().__init__(environment)
        self.recorder = get_recorder(environment)
        opts = self.recorder.opts
        self.limits = opts.slow_limits if self.slow else opts.limits
        self._think = opts.think_time
        self._ws: WSConnection | None = None
        self._sse: SSEConnection | None = None

    def wait_time(self) -> float:  # type: ignore[override]
        return self._think

    @task
    def stream(self) -> None:
        if self.protocol == "ws" and self._ws is None:
            self._ws = WSConnection(self.recorder.target, WS_PATH, self.limits)
        if self.protocol == "sse" and self._sse is None:
            self._sse = SSEConnection(self.recorder.target, self.limits)
        run_one_stream(self.recorder, self.protocol, type(self).__name__, self.limits, self._ws, sse=self._sse)

    def on_stop(self) -> None:
        for conn in (self._ws, self._sse):
            if conn is not None:
                conn.close()
        self._ws = self._sse = None
