"""Exceptions and exit codes shared by every part of streamslo.

Exception tree::

    StreamSLOError                  base of everything streamslo raises on purpose
    ├── BadInputError               the user's input is wrong (exit code 2)
    │   ├── SLOFileError            an SLO file that does not parse (names file and line)
    │   ├── ResultsError            a results directory that is missing or damaged
    │   └── ServerExtraMissing      the bundled server is asked for without the 'server' extra
    ├── ThresholdFailed             a threshold did not hold (exit code 99)
    └── ProtocolError               a peer (the server under test) broke the wire protocol
        ├── HTTPProtocolError       bytes that are not valid HTTP/1.1 (status line, headers,
        │                           framing, caps on heads and interim responses)
        ├── SSEProtocolError        an event stream past its caps (endless line, giant event)
        └── WSProtocolError         a WebSocket answer or frame we cannot accept (bad
                                    handshake, invalid UTF-8, a flood of control frames)

A :class:`ProtocolError` never reaches the user: the transports turn it into the stream
outcome ``malformed`` with the message in ``error`` (see ``docs/outcomes.md``).

Exit codes follow k6: 0 every threshold held, 99 a threshold failed, 2 bad input,
1 an internal error.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_INTERNAL",
    "EXIT_OK",
    "EXIT_THRESHOLD",
    "BadInputError",
    "HTTPProtocolError",
    "ProtocolError",
    "ResultsError",
    "SLOFileError",
    "SSEProtocolError",
    "ServerExtraMissing",
    "StreamSLOError",
    "ThresholdFailed",
    "WSProtocolError",
]

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_BAD_INPUT = 2
EXIT_THRESHOLD = 99


class StreamSLOError(Exception):
    """Base class of every error streamslo raises on purpose."""


class BadInputError(StreamSLOError):
    """The user's input is wrong: a usage error, a bad file, a bad value (exit code 2)."""


class SLOFileError(BadInputError):
    """An SLO file that does not parse. The message names the file and the line.

    Attributes:
        path: the file.
        line: 1-based line number, or None when the error is not tied to a line.
    """

    def __init__(self, path: str, line: int | None, message: str) -> None:
        self.path = path
        self.line = line
        self.detail = message
        where = f"{path}:{line}" if line is not None else path
        super().__init__(f"{where}: {message}")


class ResultsError(BadInputError):
    """A results directory, or a file in it, that is missing or damaged."""


class ServerExtraMissing(BadInputError):
    """The bundled server (``serve``, ``compare``, ``soak`` without a host, the pytest fixtures)
    is asked for, but the ``server`` extra is not installed. The message names the command."""


class ThresholdFailed(StreamSLOError):
    """A threshold did not hold (exit code 99)."""


class ProtocolError(StreamSLOError):
    """The server's bytes break the protocol, or one of the client's caps on them.

    Raised by the Sans-I/O core (:mod:`streamslo.stream`) and caught by the transports, which
    record the stream as ``malformed`` with this message.
    """


class HTTPProtocolError(ProtocolError):
    """The server's bytes are not valid HTTP/1.1 (or pass a cap on heads).

    Attributes:
        payload: body bytes that the same read carried before the error: a caller processes
            them first, so that what a stream records does not depend on how the bytes were
            split into reads.
    """

    def __init__(self, message: str, payload: bytes = b"") -> None:
        super().__init__(message)
        self.payload = payload


class SSEProtocolError(ProtocolError):
    """The event stream broke a cap of the decoder (an endless line, a giant event).

    Attributes:
        events: the events that the same read completed before the error (processed first by
            a caller, for the same reason as :attr:`HTTPProtocolError.payload`).
    """

    def __init__(self, message: str, events: Sequence[object] = ()) -> None:
        super().__init__(message)
        self.events: Sequence[object] = events


class WSProtocolError(ProtocolError):
    """A WebSocket handshake answer or frame the client cannot accept."""
