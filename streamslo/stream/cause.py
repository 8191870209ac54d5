"""Why a stream ended as it did: the typed cause beside its :class:`~streamslo.stream.outcome.Outcome`
(docs/outcomes.md, "Causes").

The stream core decides a stream's outcome and its cause together, once, where it decides
(:meth:`~streamslo.stream.tracker.StreamTracker.finish`); every other part of the tool (``check``,
the preflight's contract probes, the server hints, Locust's failure grouping, the error tables)
reads :attr:`~streamslo.stream.timing.StreamRecord.cause` instead of matching the words of
:attr:`~streamslo.stream.timing.StreamRecord.error`, which is for people. The numbers a cause
speaks of are the record's own fields: ``tokens`` (the positions that arrived),
``usage_completion_tokens`` (the tokens the server counted), ``expected_tokens`` (a forced
length), ``status`` (an HTTP status or a WebSocket close code), ``finish_reason``.

Each outcome has a cause it takes when nothing more precise is said (:func:`default_cause`);
``silent_truncation`` always says which rule found it.
"""

from __future__ import annotations

from enum import StrEnum

from streamslo.stream.outcome import Outcome

__all__ = ["CAUSES", "CONNECT_CAUSES", "Cause", "connect_cause", "default_cause", "status_cause"]


class Cause(StrEnum):
    """Why one request ended as it did (``streams.csv``'s ``cause``)."""

    COMPLETE = "complete"
    """``ok``: the terminal marker, a stop reason and counts that add up."""
    # --- before a stream began
    NO_CONNECTION = "no_connection"
    """``connect_error``: the connection failed in another way (reset, closed before any
    answer)."""
    DNS_FAILED = "dns_failed"
    """``connect_error``: the host name does not resolve."""
    REFUSED = "refused"
    """``connect_error``: nothing listens on the port."""
    UNREACHABLE = "unreachable"
    """``connect_error``: no route to the host or its network."""
    CONNECT_TIMEOUT = "connect_timeout"
    """``connect_error``: no connection within the connect timeout."""
    TLS_FAILED = "tls_failed"
    """``connect_error``: the TLS handshake failed (a server that speaks plain HTTP, another
    protocol)."""
    TLS_UNTRUSTED = "tls_untrusted"
    """``connect_error``: the server's certificate is not trusted."""
    HTTP_STATUS = "http_status"
    """``http_4xx`` / ``http_5xx``: a non-2xx status (``status``), a refused WebSocket handshake,
    or an error frame / close before the first content chunk (``status``: its code)."""
    UNAUTHORIZED = "unauthorized"
    """``http_4xx``: 401 or 403, the server wants (other) credentials."""
    NOT_FOUND = "not_found"
    """``http_4xx``: 404 or 405, no such path (or method)."""
    UNKNOWN_MODEL = "unknown_model"
    """``http_4xx``: a 400, 404 or 422 whose message names the model."""
    RATE_LIMITED = "rate_limited"
    """``http_4xx``: 429, or WebSocket close 1013 (try again later)."""
    NOT_A_STREAM = "not_a_stream"
    """``malformed``: a 2xx whose body is not an event stream."""
    # --- the transport
    CUT = "cut"
    """``truncated``: the connection was reset or closed mid-body, or a WebSocket closed
    without the terminal marker (or with an abnormal code)."""
    NO_TERMINAL = "no_terminal"
    """``truncated``: the body ended cleanly, but before the terminal marker."""
    BROKEN_FRAMING = "broken_framing"
    """``malformed``: bytes that break HTTP, SSE or WebSocket framing, or pass a cap."""
    # --- what the stream said
    BAD_MESSAGE = "bad_message"
    """``malformed``: a message the dialect cannot read (not JSON, a wrong shape)."""
    DATA_AFTER_END = "data_after_end"
    """``malformed``: data after the terminal marker."""
    NO_STOP_REASON = "no_stop_reason"
    """The stream ended without a stop reason: ``malformed`` after a terminal marker,
    ``truncated`` at the clean end of a body that has no marker (``--no-done-marker``)."""
    OVER_MAX_TOKENS = "over_max_tokens"
    """``malformed``: more token positions than ``max_tokens``."""
    OVER_USAGE = "over_usage"
    """``malformed``: more token positions than the server counted."""
    SERVER_ERROR = "server_error"
    """``error_event``: an error object inside the stream."""
    GAVE_UP = "gave_up"
    """``error_event``: the stop reason says the server gave up (``abort``, ``error``...)."""
    # --- silent truncations (the terminal marker came, content is missing)
    STOPPED_EARLY = "stopped_early"
    """A stop reason other than the length's while the length was forced."""
    COUNTED_SHORT = "counted_short"
    """The server's own count is below the forced length."""
    POSITIONS_MISSING = "positions_missing"
    """Fewer token positions arrived than the server counted (or than a forced length, with
    no count): tokens were lost on the way."""
    WITHHELD = "withheld"
    """A stop reason that says content was withheld (``content_filter``, ``refusal``)."""
    UNKNOWN_STOP = "unknown_stop"
    """A dialect that names every stop reason gave one it does not name."""
    REFERENCE_PREFIX = "reference_prefix"
    """An ordinary stop while the text is a strict prefix of its reference reply."""
    # --- waits
    NO_HEAD = "no_head"
    """``stalled``: no response head (WebSocket: no handshake answer) for the stall timeout."""
    NO_FIRST_TOKEN = "no_first_token"
    """``stalled``: the stream began, and no first token came within its bound."""
    NO_TOKEN = "no_token"
    """``stalled``: no token for the stall timeout after the first."""
    DEADLINE = "deadline"
    """``timeout``: still streaming at the request's deadline."""
    # --- the load test's own doing
    STOPPED_BY_TEST = "stopped_by_test"
    """``cancelled``: the load test stopped the stream (the run's end, after the drain)."""
    CLIENT_HANGUP = "client_hangup"
    """``client_cancelled``: the client hung up on purpose (``--cancel-after``)."""

    def __str__(self) -> str:
        return self.value


#: Every cause name, in the documented order.
CAUSES: tuple[str, ...] = tuple(c.value for c in Cause)

_DEFAULT: dict[Outcome, Cause] = {
    Outcome.OK: Cause.COMPLETE,
    Outcome.TRUNCATED: Cause.CUT,
    Outcome.SILENT_TRUNCATION: Cause.POSITIONS_MISSING,
    Outcome.ERROR_EVENT: Cause.SERVER_ERROR,
    Outcome.MALFORMED: Cause.BAD_MESSAGE,
    Outcome.STALLED: Cause.NO_TOKEN,
    Outcome.TIMEOUT: Cause.DEADLINE,
    Outcome.HTTP_4XX: Cause.HTTP_STATUS,
    Outcome.HTTP_5XX: Cause.HTTP_STATUS,
    Outcome.CONNECT_ERROR: Cause.NO_CONNECTION,
    Outcome.CANCELLED: Cause.STOPPED_BY_TEST,
    Outcome.CLIENT_CANCELLED: Cause.CLIENT_HANGUP,
}


def default_cause(outcome: Outcome) -> Cause:
    """The cause an outcome takes when the code that decided it names none."""
    return _DEFAULT[outcome]


#: The causes of a connection that never carried an answer.
CONNECT_CAUSES: frozenset[Cause] = frozenset(
    {
        Cause.NO_CONNECTION,
        Cause.DNS_FAILED,
        Cause.REFUSED,
        Cause.UNREACHABLE,
        Cause.CONNECT_TIMEOUT,
        Cause.TLS_FAILED,
        Cause.TLS_UNTRUSTED,
    }
)


def connect_cause(exc: BaseException) -> Cause:
    """Why a connection failed, by the exception's type (and errno): never by its words."""
    import errno
    import socket
    import ssl

    if isinstance(exc, socket.gaierror):
        return Cause.DNS_FAILED
    if isinstance(exc, ConnectionRefusedError):
        return Cause.REFUSED
    if isinstance(exc, ssl.SSLCertVerificationError):
        return Cause.TLS_UNTRUSTED
    if isinstance(exc, ssl.SSLError):
        return Cause.TLS_FAILED
    if isinstance(exc, TimeoutError):  # (socket.timeout is TimeoutError)
        return Cause.CONNECT_TIMEOUT
    if isinstance(exc, OSError) and exc.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH):
        return Cause.UNREACHABLE
    return Cause.NO_CONNECTION


def status_cause(status: int, message: str) -> Cause:
    """What a non-2xx answer says of the request: credentials, no such path, an unknown model
    (a 400, 404 or 422 whose message names the model: the only place its words are read),
    slow down, or just its status."""
    if status in (401, 403):
        return Cause.UNAUTHORIZED
    if status in (400, 404, 422) and "model" in message.lower():
        return Cause.UNKNOWN_MODEL
    if status in (404, 405):
        return Cause.NOT_FOUND
    if status == 429:
        return Cause.RATE_LIMITED
    return Cause.HTTP_STATUS
