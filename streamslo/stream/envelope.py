"""A WebSocket gateway's own message envelope around OpenAI chunks, Sans-I/O.

By default a WebSocket server speaks the bundled protocol (``docs/protocol.md``): the request
frame is the OpenAI request body, each answer frame one OpenAI chunk, then ``[DONE]``. A gateway
that wraps them in its own JSON is described by three run options (``docs/servers.md``):

- ``--ws-request-template FILE``: a JSON document holding the string ``"{{request}}"`` once;
  each request frame is that document with the request body in its place;
- ``--ws-chunk-path data.chunk``: where each answer message holds the chunk (dotted keys; the
  value may be the chunk object, or its JSON text);
- ``--ws-done-message TEXT``: the message that ends a request: the exact text (default
  ``[DONE]``), or, when TEXT is a JSON object, any JSON message that contains its key/values
  (``{"type": "done"}`` matches ``{"type": "done", "id": 7}``). A chunk path whose value is
  ``"[DONE]"`` ends the request too.

A message that is not the done message and holds no chunk at the path is judged as the chunk
itself would be: an ``error`` object at its top level is the stream's error, anything else is
``malformed`` (the message says which path was missing).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streamslo.errors import BadInputError
from streamslo.stream.chunkjson import loads_chunk
from streamslo.stream.chunks import DialectReader, Machine, OpenAIChunks
from streamslo.stream.counts import EndRules
from streamslo.stream.outcome import Outcome
from streamslo.stream.sse import DEFAULT_MAX_EVENT_BYTES
from streamslo.stream.timing import StreamExpectations, StreamRecord, Wire
from streamslo.stream.tracker import StreamTracker

__all__ = ["PLACEHOLDER", "Enveloped", "WSEnvelope"]

#: The string a request template holds where the request body goes.
PLACEHOLDER = "{{request}}"
_DONE = "[DONE]"


@dataclass(frozen=True)
class WSEnvelope:
    """How requests are wrapped and answers unwrapped (the default wraps nothing)."""

    request_template: str | None = None
    """The template's JSON text (holding ``"{{request}}"`` once), or None: the body as is."""
    chunk_path: tuple[str, ...] = ()
    """Keys from the message to the chunk; empty: the message is the chunk."""
    done_message: str = _DONE
    _pattern: dict[str, Any] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def plain(self) -> bool:
        """Nothing to wrap or unwrap: the bundled protocol."""
        return self.request_template is None and not self.chunk_path and self.done_message == _DONE

    @classmethod
    def from_options(
        cls, template_file: str | None, chunk_path: str | None, done_message: str
    ) -> WSEnvelope:
        """Build from the run options.

        Raises:
            BadInputError: an unreadable template, one that is not JSON or does not hold the
                placeholder string exactly once (the message names the file).
        """
        template = None
        if template_file:
            path = Path(template_file)
            try:
                template = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise BadInputError(f"--ws-request-template: cannot read {path} ({exc})") from None
            try:
                json.loads(template)
            except ValueError as exc:
                raise BadInputError(
                    f"{path}: the WebSocket request template is not JSON ({exc})"
                ) from None
            if template.count(f'"{PLACEHOLDER}"') != 1:
                raise BadInputError(
                    f'{path}: the template must hold the string "{PLACEHOLDER}" exactly once'
                )
        keys = tuple(k for k in (chunk_path or "").split(".") if k)
        return cls(template, keys, done_message or _DONE)

    def wrap(self, body: bytes) -> bytes:
        """The request frame for one request body."""
        if self.request_template is None:
            return body
        return self.request_template.replace(f'"{PLACEHOLDER}"', body.decode()).encode()

    def tracker(
        self,
        record: StreamRecord,
        expect: StreamExpectations,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        collect_text: bool = False,
    ) -> StreamTracker:
        """A tracker for one request: OpenAI's chunks, unwrapped from this envelope first unless
        it is the plain protocol."""
        dialect = None if self.plain else Enveloped(self, OpenAIChunks())
        return StreamTracker(record, expect, max_event_bytes, collect_text, dialect)

    def __post_init__(self) -> None:
        try:
            pattern = json.loads(self.done_message)
        except ValueError:
            pattern = None
        object.__setattr__(self, "_pattern", pattern if isinstance(pattern, dict) else None)

    def unwrap(self, message: str) -> str | None:
        """What the tracker judges for one answer message: ``[DONE]``, the chunk's JSON text,
        the message itself (not JSON, or an ``error`` at its top level: the tracker judges
        it), or None when a JSON message holds no chunk at the path. Never raises."""
        if message.strip() == self.done_message.strip():
            return _DONE
        pattern = self._pattern
        if not self.chunk_path and pattern is None:
            return message
        try:
            obj = loads_chunk(message)
        except ValueError:
            return message  # not JSON: the tracker says so
        if not isinstance(obj, dict):
            return message
        if pattern is not None and all(k in obj and obj[k] == v for k, v in pattern.items()):
            return _DONE
        value: Any = obj
        for key in self.chunk_path:
            value = value.get(key) if isinstance(value, dict) else None
        if isinstance(value, str):
            return value  # the chunk's JSON text, or "[DONE]"
        if isinstance(value, dict):
            return json.dumps(value)
        if "error" in obj:
            return message
        return None


class Enveloped:
    """A dialect object whose WebSocket messages are unwrapped first, then read by ``inner``
    (SSE events are read as they are)."""

    __slots__ = ("_envelope", "_inner")

    def __init__(self, envelope: WSEnvelope, inner: DialectReader) -> None:
        self._envelope = envelope
        self._inner = inner

    @property
    def terminal(self) -> str:
        return self._inner.terminal

    @property
    def rules(self) -> EndRules:
        return self._inner.rules

    @property
    def after_end(self) -> str | None:
        return self._inner.after_end

    def read(self, m: Machine, t: float, data: str, event: str) -> None:
        if m.rec.protocol != Wire.WS:
            self._inner.read(m, t, data, event)
            return
        inner = self._envelope.unwrap(data)
        if inner is None:
            where = ".".join(self._envelope.chunk_path)
            m.finish(t, Outcome.MALFORMED, f"no chunk at {where} in the message: {data[:80]!r}")
            return
        self._inner.read(m, t, inner, event)
