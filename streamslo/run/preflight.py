"""Before any load: one short streaming request per protocol in use, so that a wrong target
fails in seconds with its cause and its fix instead of after a whole run of failures
(``docs/cli.md``, ``--no-preflight`` turns it off).

The request is the run's own (:func:`streamslo.workload.requests.build_body`, a small ``max_tokens``),
sent over the run's transport (:mod:`streamslo.transport`) and judged by the same tracker
(:mod:`streamslo.stream.tracker`), so its outcome means what it means in the run
(``docs/outcomes.md``). Only what says *the target is wrong* stops the run
(:class:`PreflightFailed`, exit code 2): no connection (refused, DNS, TLS, timeout), a
scheme that is not http(s), 401/403, 404 (a wrong path or an unknown model), another 4xx that
rejects the request itself, a 2xx whose body is not an event stream, an answer that is not
HTTP at all (TLS on a plain port: only when the bytes start a TLS record). A server that
answers but misbehaves (a cut stream, a lying usage, a 5xx, a 429) is what a load test is for:
it is reported as a note and the run goes on. A server that spoke HTTP and broke its answer
(a bad header, a cut head) gets up to :data:`PREFLIGHT_TRIES` tries; the run goes on, with a
warning that says how many answers were broken.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

from streamslo.contract.probe import PROBE_LIMITS, list_models, models_and_owner, one_stream
from streamslo.errors import BadInputError, ProtocolError
from streamslo.stream.cause import Cause
from streamslo.stream.dialects import API_PATHS, Dialect
from streamslo.stream.envelope import WSEnvelope
from streamslo.stream.timing import StreamRecord, Wire
from streamslo.transport.common import ClientLimits, Target, connect
from streamslo.transport.fetch import fetch
from streamslo.workload.engines import adapt_request
from streamslo.workload.requests import WS_PATH, RequestOptions

__all__ = [
    "PREFLIGHT_HEADER",
    "PREFLIGHT_MAX_TOKENS",
    "PREFLIGHT_TRIES",
    "Diagnosis",
    "PreflightFailed",
    "PreflightResult",
    "diagnose",
    "first_bytes",
    "judge",
    "list_models",
    "models_and_owner",
    "one_stream",
    "parse_target",
    "preflight",
]

#: The header every preflight request carries, so that a server's logs (and tests) can tell
#: it from the load.
PREFLIGHT_HEADER = "X-Streamslo-Preflight"

#: ``max_tokens`` of a preflight request: enough to see a few tokens and the end marker.
PREFLIGHT_MAX_TOKENS = 4

#: Tries a server gets that spoke HTTP and broke its answer (one good answer is enough).
PREFLIGHT_TRIES = 3

#: Time limits of a preflight request: a wrong target fails well under 10 s.
PREFLIGHT_LIMITS = PROBE_LIMITS


@dataclass(frozen=True)
class Diagnosis:
    """What a failed preflight request says about the target."""

    cause: str
    """What went wrong, in the server's or the system's words."""
    fix: str
    """What to change."""
    fatal: bool = True
    """The target is wrong (stop before any load); False: the server answered, the run goes on."""
    retry: bool = False
    """The server spoke HTTP and broke this answer: ask again (:data:`PREFLIGHT_TRIES`)."""


@dataclass(frozen=True)
class PreflightResult:
    """One preflight request."""

    protocol: Wire
    url: str
    record: StreamRecord
    seconds: float
    diagnosis: Diagnosis | None
    engine: str | None = None
    """The engine ``/v1/models`` named (its ``owned_by``), if any."""
    adapted: tuple[str, ...] = ()
    """How the run's requests were adapted to that engine (docs/servers.md)."""

    def describe(self) -> str:
        rec = self.record
        status = f"HTTP {rec.status}, " if rec.status else ""
        return (
            f"preflight {self.protocol} {self.url}: {status}{rec.outcome}, {rec.tokens} tokens "
            f"in {self.seconds:.2f} s"
        )


class PreflightFailed(BadInputError):
    """The preflight found the target wrong (exit code 2); the message holds cause and fix.
    ``protocol`` names the wire that showed it (``sse``, ``ws``), or ``url`` for the URL
    itself."""

    def __init__(self, protocol: str, url: str, diagnosis: Diagnosis, note: str = "") -> None:
        self.protocol = protocol
        self.url = url
        self.diagnosis = diagnosis
        tail = f"\n  ({note})" if note else ""
        super().__init__(
            f"preflight ({protocol}) {url}: {diagnosis.cause}\n  fix: {diagnosis.fix}{tail}"
        )


def parse_target(url: str, headers: dict[str, str] | None = None, insecure: bool = False) -> Target:
    """The target of ``url``.

    Raises:
        PreflightFailed: not an http(s) URL (``ftp://``, no host).
    """
    try:
        return Target.from_url(url, headers, insecure)
    except ValueError:
        scheme = url.split("://", 1)[0] if "://" in url else ""
        cause = (
            f"{scheme}:// is not HTTP"
            if scheme and scheme not in ("http", "https")
            else "no host in the URL"
        )
        raise PreflightFailed(
            "url",
            url,
            Diagnosis(
                f"not an http(s) URL ({cause})",
                "give --host as http://HOST:PORT or https://HOST[:PORT][/prefix]",
            ),
        ) from None


def _speaks_plain_http(target: Target) -> bool:
    """Whether an https target's port answers plain HTTP (a TLS handshake there fails or hangs)."""
    plain = replace(target, scheme="http", ssl_context=None)
    try:
        status, _ = fetch(plain, "/v1/models", timeout=3.0)
    except (OSError, ProtocolError, ValueError):
        return False
    return 100 <= status < 600


def _connect_cause(target: Target, rec: StreamRecord) -> Diagnosis:
    """Why there is no connection, by the record's cause (its error's words are only shown)."""
    error = rec.error
    where = f"{target.host}:{target.port}"
    cause = rec.cause
    if cause == Cause.DNS_FAILED:
        return Diagnosis(
            f"cannot resolve the host {target.host!r} ({error})",
            "check the host name in --host (a typo?), or use its IP address",
        )
    if cause == Cause.TLS_UNTRUSTED:
        return Diagnosis(
            f"the server's TLS certificate is not trusted ({error})",
            "install its CA, or pass --insecure to skip verification (test servers only)",
        )
    if cause == Cause.TLS_FAILED:
        return Diagnosis(
            f"TLS handshake failed ({error})", "check the scheme (http:// or https://) and the port"
        )
    if cause == Cause.REFUSED:
        return Diagnosis(
            f"connection refused at {where} ({error}): nothing listens there",
            "start the server, or fix the port in --host",
        )
    if cause == Cause.CONNECT_TIMEOUT:
        return Diagnosis(
            f"no connection to {where} within {PREFLIGHT_LIMITS.connect_timeout:g} s ({error})",
            "check the host and port, and any firewall in between",
        )
    if cause == Cause.UNREACHABLE:
        return Diagnosis(
            f"{where} is unreachable ({error})", "check the host in --host and the network"
        )
    return Diagnosis(f"cannot connect to {where} ({error})", "check --host")


_API_PATHS_TEXT = ", ".join(f"{api}: {path}" for api, path in API_PATHS.items())


def diagnose(
    protocol: Wire,
    rec: StreamRecord,
    target: Target,
    request: RequestOptions,
    models: Sequence[str] = (),
) -> Diagnosis | None:
    """What a preflight request's record says about the target; None when it ended ``ok``.

    Args:
        protocol: ``sse`` or ``ws``.
        rec: the finished record.
        target: the server.
        request: what was asked (the path, the model).
        models: what ``/v1/models`` lists (for an unknown model).
    """
    outcome, error, status = rec.outcome, rec.error, rec.status
    if outcome == "ok":
        return None
    if outcome == "connect_error" and rec.connect_s is None:
        return _no_connection(target, rec)
    if outcome == "http_4xx" or (status is not None and 400 <= status < 500):
        return _refused(protocol, rec, request, models)
    if rec.cause == Cause.NOT_A_STREAM:
        return Diagnosis(
            f"answered {error}: not a streaming endpoint",
            "point --host at an OpenAI-compatible server that streams (text/event-stream); "
            "check the path and --endpoint",
        )
    if outcome == "malformed" and rec.status is None:  # the answer's head did not parse
        return _broken_head(target, error)
    # The server answered: whatever went wrong is what the run measures.
    return Diagnosis(
        f"{outcome}" + (f" ({error})" if error else ""), "the run goes on", fatal=False
    )


def _no_connection(target: Target, rec: StreamRecord) -> Diagnosis:
    """No connection: why (DNS, refused, TLS on a plain port, a timeout...)."""
    found = _connect_cause(target, rec)
    if (
        target.scheme == "https"
        and rec.cause not in (Cause.REFUSED, Cause.DNS_FAILED)
        and _speaks_plain_http(target)
    ):
        return Diagnosis(
            f"TLS handshake failed ({rec.error}): the server speaks plain HTTP",
            f"use http://{target.host_header}{target.prefix}",
        )
    return found


def _refused(
    protocol: Wire,
    rec: StreamRecord,
    request: RequestOptions,
    models: Sequence[str],
) -> Diagnosis:
    """A 4xx before the stream, by its cause: credentials, an unknown model, a wrong path, a
    request the server refuses."""
    error, status, cause = rec.error, rec.status, rec.cause
    if cause == Cause.UNAUTHORIZED:
        header = (
            "'x-api-key: ...'"
            if request.dialect == Dialect.MESSAGES
            else "'Authorization: Bearer ...'"
        )
        return Diagnosis(
            f"answered {error or f'HTTP {status}'}: the server wants credentials",
            f"pass the key with --api-key-env VAR (the variable holding it) or --header {header}",
        )
    if cause == Cause.UNKNOWN_MODEL:
        listed = f"; the server lists: {', '.join(models[:10])}" if models else ""
        return Diagnosis(
            f"answered {error}: unknown model {request.model!r}{listed}",
            "give --model with a name the server serves"
            + (f" (e.g. --model {models[0]})" if models else ""),
        )
    if status == 404 or cause == Cause.NOT_FOUND:
        return _wrong_path(protocol, error, request)
    if status == 405:
        return Diagnosis(
            f"answered {error}: the path does not take POST",
            "check --host and --api" if request.api else "check --host and --endpoint",
        )
    if cause == Cause.RATE_LIMITED:
        return Diagnosis(f"answered {error} (rate limited)", "the run goes on", fatal=False)
    return Diagnosis(
        f"answered {error or f'HTTP {status}'}",
        "the server rejects the request: check --endpoint, --model and the options it does not "
        "accept (--forced-length, --no-usage); `streamslo check URL` shows what it accepts",
    )


def _wrong_path(protocol: Wire, error: str, request: RequestOptions) -> Diagnosis:
    """A 404: no WebSocket endpoint, a dialect the server does not serve there, a wrong prefix."""
    if protocol == "ws":
        return Diagnosis(
            f"answered {error}: no WebSocket endpoint there",
            "use --protocol sse, or check the URL prefix in --host",
        )
    if request.api:
        return Diagnosis(
            f"answered {error}: the server does not serve {request.path}, the "
            f"{request.dialect} dialect's path (it may speak another dialect)",
            "check --api (" + _API_PATHS_TEXT + ") and the URL prefix in --host; "
            "--path PATH if the server serves the dialect elsewhere",
        )
    return Diagnosis(
        f"answered {error}: wrong path",
        "check the URL prefix in --host (the server's base URL; a trailing /v1 is fine) and --endpoint "
        "(chat: /v1/chat/completions, completions: /v1/completions)",
    )


#: The first bytes of a TLS record (a handshake or an alert, TLS 1.0-1.3): what a TLS server
#: answers to bytes that are not a ClientHello.
_TLS_RECORD = (b"\x16\x03", b"\x15\x03")


def first_bytes(target: Target, limits: ClientLimits = PREFLIGHT_LIMITS) -> bytes:
    """The first bytes the server sends back to a plain ``GET /v1/models`` (b"" for none)."""
    plain = replace(target, scheme="http", ssl_context=None)
    try:
        sock = connect(plain, limits)
    except OSError:
        return b""
    try:
        sock.settimeout(limits.connect_timeout)
        request = f"GET {target.prefix}/v1/models HTTP/1.1\r\nHost: {target.host_header}\r\n\r\n"
        sock.sendall(request.encode("latin-1"))
        return sock.recv(16)
    except OSError:
        return b""
    finally:
        sock.close()


def _broken_head(target: Target, error: str) -> Diagnosis:
    """An answer whose HTTP head did not parse: name only what its bytes show."""
    head = first_bytes(target)
    if target.scheme == "http" and head.startswith(_TLS_RECORD):
        return Diagnosis(
            f"the server answered with TLS ({error})",
            f"use https://{target.host_header}{target.prefix}",
        )
    if head.startswith(b"HTTP/"):
        return Diagnosis(f"a broken HTTP answer ({error})", "the run goes on", False, retry=True)
    shown = repr(head[:12]) if head else "nothing"
    return Diagnosis(
        f"the answer is not HTTP ({error}; it starts with {shown})",
        "check the host and port in --host: something other than an HTTP server answers there",
    )


def _tries(
    target: Target,
    protocol: Wire,
    request: RequestOptions,
    models: Sequence[str],
    envelope: WSEnvelope | None,
    limits: ClientLimits,
) -> tuple[StreamRecord, float, Diagnosis | None]:
    """One preflight request, asked again (up to :data:`PREFLIGHT_TRIES` in all) while the
    server's answers are broken HTTP; a broken answer is then a warning, never a wrong target.

    Returns:
        The last request's record, its seconds, and what it says (None: ``ok``).
    """
    broken, broken_error = 0, ""
    for _ in range(PREFLIGHT_TRIES):
        t = time.perf_counter()
        rec, _ = one_stream(target, protocol, request, envelope=envelope, limits=limits)
        seconds = time.perf_counter() - t
        diagnosis = diagnose(protocol, rec, target, request, models)
        if diagnosis is None or not diagnosis.retry:
            break
        broken += 1
        broken_error = rec.error
    if broken:
        # Broken HTTP answers are a server fault the run measures, not a wrong target.
        good = diagnosis is None
        diagnosis = Diagnosis(
            f"{broken} of {broken + good} preflight answers were broken HTTP ({broken_error})",
            "the run goes on and measures it",
            fatal=False,
        )
    return rec, seconds, diagnosis


def judge(
    target: Target,
    protocol: Wire,
    rec: StreamRecord,
    request: RequestOptions,
    models: Sequence[str] = (),
    diagnosis: Diagnosis | None = None,
    auth_fatal: bool = True,
    limits: ClientLimits = PREFLIGHT_LIMITS,
) -> tuple[Diagnosis | None, str]:
    """What one request's record says of the target; raise when the target is wrong.

    Args:
        target: the server.
        protocol: ``sse`` or ``ws``.
        rec: the finished record (a preflight request, or the first contract probe).
        request: what was asked.
        models: what ``/v1/models`` listed (asked here when a 4xx may name a model).
        diagnosis: the record's diagnosis when the caller has it (else :func:`diagnose`).
        auth_fatal: False: a 401/403 is a note (a master whose workers bring credentials).
        limits: time limits of a ``/v1/models`` request.

    Returns:
        The diagnosis (None: ``ok``; else a note, the run goes on), and the request's URL.

    Raises:
        PreflightFailed: the target is wrong.
    """
    if diagnosis is None:
        diagnosis = diagnose(protocol, rec, target, request, models)
    if diagnosis is not None and diagnosis.fatal and not models and rec.status in (400, 404, 422):
        _, listed = list_models(target, limits)
        diagnosis = diagnose(protocol, rec, target, request, listed)
    if diagnosis is not None and not auth_fatal and rec.status in (401, 403):
        diagnosis = replace(
            diagnosis, fatal=False, fix="the workers must bring credentials (--header-file)"
        )
    path = WS_PATH if protocol == "ws" else request.path
    url = f"{target.scheme}://{target.host_header}{target.prefix}{path}"
    if diagnosis is not None and diagnosis.fatal:
        raise PreflightFailed(protocol, url, diagnosis)
    return diagnosis, url


def preflight(
    host: str,
    protocols: Sequence[Wire],
    request: RequestOptions,
    *,
    headers: dict[str, str] | None = None,
    insecure: bool = False,
    envelope: WSEnvelope | None = None,
    limits: ClientLimits = PREFLIGHT_LIMITS,
    auth_fatal: bool = True,
) -> list[PreflightResult]:
    """One short request per protocol; raise at the first that finds the target wrong.

    ``request.model`` None: the first model ``/v1/models`` lists (as the run does). Each
    request carries :data:`PREFLIGHT_HEADER`. ``auth_fatal`` False: a 401/403 is a note, not
    a stop (a master whose workers bring their own credentials).

    Returns:
        Each request's result (those with a non-fatal diagnosis carry it as a note).

    Raises:
        PreflightFailed: the target is wrong (the message says why and what to change).
    """
    target = parse_target(host, {**(headers or {}), PREFLIGHT_HEADER: "1"}, insecure)
    models: list[str] = []
    owner: str | None = None
    if request.model is None or request.token_ids == "auto":
        _, models, owner = models_and_owner(target, limits)
        if models and request.model is None:
            request = replace(request, model=models[0])
    # Judged as the run will judge it: adapted to the engine (docs/servers.md).
    adapted = adapt_request(request, owner)
    request = adapted.request
    request = replace(request, max_tokens=min(request.max_tokens, PREFLIGHT_MAX_TOKENS))
    results: list[PreflightResult] = []
    for protocol in protocols:
        rec, seconds, diagnosis = _tries(target, protocol, request, models, envelope, limits)
        diagnosis, url = judge(
            target, protocol, rec, request, models, diagnosis, auth_fatal, limits
        )
        results.append(
            PreflightResult(protocol, url, rec, seconds, diagnosis, owner, adapted.notes)
        )
    return results
