"""``streamslo check URL``: a server's stream contract, learned and checked before it is load
tested (docs/check.md).

``check`` runs the contract probes a run's preflight runs (:func:`streamslo.contract.learn`,
every means of forcing the length tried), then sends the request a run would send with what they
learned, and a few more: the other endpoint or dialects, the WebSocket, a bad request,
``/metrics``, keep-alive. Each request goes over the run's own transport and is judged by the
run's own tracker, so a check that passes means the load run will read that server's streams as
``ok``. Each :class:`CheckItem` is ``pass``, ``warn`` (a run works, but sees less, or a fault a
load run never meets, such as the answer to a body that is not JSON) or ``fail`` (what a run
would count against the server). Every decision reads a record's outcome, cause and fields,
never the words of its error.

The table ends with what a run there can check (:class:`~streamslo.stream.truth.Truth`) and the
one command line to use: ``streamslo run --host URL`` (a run adapts by itself), with the flags
it would set spelled out.

Exit codes (:func:`exit_code`): 0 every check passed or warned, 99 a check failed, 2 the
server could not be reached or the URL is bad (:class:`~streamslo.run.preflight.PreflightFailed`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from streamslo.contract import Contract, MeansStatus, learn
from streamslo.contract.probe import models_and_owner, one_stream
from streamslo.errors import EXIT_OK, EXIT_THRESHOLD, ProtocolError
from streamslo.run.preflight import Diagnosis, PreflightFailed, diagnose, parse_target
from streamslo.stream.cause import Cause
from streamslo.stream.chunkjson import error_message, inband_error, loads_chunk
from streamslo.stream.dialects import API_PATHS, EVENT_APIS, Dialect, tracker_for
from streamslo.stream.outcome import Outcome, status_began
from streamslo.stream.timing import StreamRecord, Wire
from streamslo.stream.tracker import StreamTracker
from streamslo.stream.truth import ForcedLength, Forcing, Truth, parse_forcing
from streamslo.transport.common import ClientLimits, Target
from streamslo.transport.fetch import fetch
from streamslo.transport.sse import SSEConnection
from streamslo.workload.engines import adapt_request
from streamslo.workload.requests import WS_PATH, RequestOptions, build_body

__all__ = [
    "CHECK_MAX_TOKENS",
    "NAME_WIDTH",
    "CheckItem",
    "CheckReport",
    "Status",
    "exit_code",
    "for_check",
    "format_footer",
    "format_item",
    "format_table",
    "run_checks",
    "to_json",
]

Status = Literal["pass", "warn", "fail", "skip"]

#: ``max_tokens`` of the checking requests: long enough that an early end shows.
CHECK_MAX_TOKENS = 12

_LIMITS = ClientLimits(
    stall_timeout=10.0, request_timeout=30.0, connect_timeout=5.0, tls_timeout=1.5
)


@dataclass(frozen=True)
class CheckItem:
    """One line of the table."""

    name: str
    status: Status
    detail: str
    flags: tuple[str, ...] = ()
    """The ``streamslo run`` flags a run there sets by itself (what the probes learned)."""


@dataclass
class CheckReport:
    """Everything ``check`` found."""

    url: str
    model: str | None
    items: list[CheckItem] = field(default_factory=list)
    seconds: float = 0.0
    contract: Contract | None = None
    """What the contract probes learned (None: no stream answered)."""

    @property
    def flags(self) -> list[str]:
        """Every flag a run against this server sets by itself, once each, in the order found."""
        out: list[str] = []
        for item in self.items:
            out += [f for f in item.flags if f not in out]
        return out

    @property
    def truth(self) -> Truth | None:
        return None if self.contract is None else self.contract.truth

    def command_line(self) -> str:
        """The run's command line: ``streamslo run --host URL`` (a run adapts by itself)."""
        return f"streamslo run --host {self.url}"

    def spelled_out(self) -> str:
        """The same run with what it adapts to spelled out as flags."""
        return " ".join([self.command_line(), *self.flags])

    def as_dict(self) -> dict[str, object]:
        truth = self.truth
        return {
            "url": self.url,
            "model": self.model,
            "passed": exit_code(self) == EXIT_OK,
            "command_line": self.command_line(),
            "spelled_out": self.spelled_out(),
            "run_flags": self.flags,
            "truth": None if truth is None else truth.as_dict(),
            "contract": None if self.contract is None else self.contract.as_dict(),
            "seconds": round(self.seconds, 3),
            "checks": [{**asdict(i), "flags": list(i.flags)} for i in self.items],
        }


def exit_code(report: CheckReport) -> int:
    """0: every check passed or warned; 99: one failed."""
    return EXIT_THRESHOLD if any(i.status == "fail" for i in report.items) else EXIT_OK


def _describe(rec: StreamRecord) -> str:
    parts = [str(rec.outcome)]
    if rec.status:
        parts.append(f"HTTP {rec.status}")
    parts.append(f"{rec.tokens} tokens")
    if rec.finish_reason:
        parts.append(f"finish_reason {rec.finish_reason}")
    if rec.error:
        parts.append(rec.error[:160])
    return ", ".join(parts)


def _streams(rec: StreamRecord) -> bool:
    """The server answered with an event stream (whatever happened in it)."""
    return status_began(rec.status) and rec.cause not in (Cause.NOT_A_STREAM, Cause.HTTP_STATUS)


#: Per event dialect: the terminal event as the table shows it, and where usage is.
_EVENT_WORDS: dict[str, tuple[str, str]] = {
    Dialect.RESPONSES: (
        "response.completed or response.incomplete",
        "response.usage.output_tokens",
    ),
    Dialect.MESSAGES: ("message_stop", "message_delta usage.output_tokens"),
}

#: The statuses whose detail the forced-length line repeats for a means not chosen.
_SAY_WHY = (MeansStatus.REJECTED, MeansStatus.IGNORED, MeansStatus.FAILED, MeansStatus.UNAVAILABLE)

#: The means' words in the forced-length line.
_MEANS_WORDS = {
    ForcedLength.IGNORE_EOS: "ignore_eos",
    ForcedLength.MIN_TOKENS: "min_tokens",
    ForcedLength.MIN_NEW_TOKENS: "generation_config.min_new_tokens",
    ForcedLength.LOGIT_BIAS: "logit_bias against the end-of-sequence ids",
}


class _Checker:
    """Runs the checks one after another; each adds its :class:`CheckItem`."""

    def __init__(self, target: Target, model: str | None, endpoint: str, api: str = "") -> None:
        self.target = target
        self.model = model
        self.endpoint = endpoint
        self.api = api
        """``--api``: the dialect judged in detail (empty: the OpenAI ``--endpoint``)."""
        self.items: list[CheckItem] = []
        self.not_served = False
        """The dialect's path is not served: the stream checks are skipped."""
        shown, usage = _EVENT_WORDS.get(api, ("[DONE]", "usage.completion_tokens"))
        self.terminal_shown, self.usage_field = shown, usage
        self.unit = "token deltas" if api in EVENT_APIS else "content chunks"
        self.owner: str | None = None
        """Who serves the model (``/v1/models`` ``owned_by``): the engine a run adapts to."""
        self.contract: Contract | None = None
        self.adapted: dict[str, Any] = {}
        """The request options the probes set (``forced``, ``done_marker``...)."""

    def add(self, name: str, status: Status, detail: str, *flags: str) -> None:
        self.items.append(CheckItem(name, status, detail, tuple(flags)))

    def _base(self, **kw: Any) -> RequestOptions:
        """A request with the run's defaults and what the probes learned, ``kw`` changed."""
        base = RequestOptions(
            endpoint=self.endpoint,
            model=self.model,
            max_tokens=CHECK_MAX_TOKENS,
            temperature=0.0,
            api=self.api,
        )
        return replace(base, **{**self.adapted, **kw})

    def request(self, **kw: Any) -> RequestOptions:
        """A request as a run would send it (adapted to the engine), with ``kw`` changed."""
        return adapt_request(self._base(**kw), self.owner).request

    def tracker(self, req: RequestOptions, rec: StreamRecord) -> StreamTracker:
        """The run's tracker for ``req``'s dialect."""
        if req.dialect in EVENT_APIS:
            return tracker_for(req.dialect, rec, req.expectations())
        return StreamTracker(rec, req.expectations())

    def stream(self, protocol: Wire = Wire.SSE, **kw: Any) -> tuple[StreamRecord, StreamTracker]:
        return one_stream(self.target, protocol, self.request(**kw), limits=_LIMITS)

    # ------------------------------------------------------------------ checks
    def models(self) -> None:
        status, ids, self.owner = models_and_owner(self.target, _LIMITS)
        if ids:
            if self.model is None:
                self.model = ids[0]
            adapted = adapt_request(self._base(), self.owner)
            engine = f"; served by {self.owner}" if self.owner else ""
            notes = "; ".join(adapted.notes)
            self.add(
                "/v1/models",
                "pass",
                f"{len(ids)} models: {', '.join(ids[:5])}{engine}"
                + (f"; {notes}" if notes else ""),
            )
        elif status is None:
            self.add(
                "/v1/models",
                "warn",
                "no answer; a run sends no model name unless given --model",
                "--model NAME",
            )
        else:
            self.add(
                "/v1/models",
                "warn",
                f"HTTP {status}, no model listed; give the model by name",
                "--model NAME",
            )

    def learn(
        self,
        eos_ids: tuple[int, ...],
        tokenizer: str | None,
        forced: Forcing | None,
    ) -> None:
        """The contract probes, every means tried; a target that is wrong raises here."""
        contract = learn(
            self.target,
            self._base(max_tokens=CHECK_MAX_TOKENS),
            owner=self.owner,
            wanted=forced,
            eos_ids=eos_ids,
            tokenizer=tokenizer,
            all_means=True,
            limits=_LIMITS,
        )
        if not contract.learned:
            req = self.request()
            rec = contract.extra.get("record")
            if isinstance(rec, StreamRecord):
                d = diagnose(Wire.SSE, rec, self.target, req)
                if d is not None and d.fatal and rec.status in (None, 401, 403):
                    url = (
                        f"{self.target.scheme}://{self.target.host_header}"
                        f"{self.target.prefix}{req.path}"
                    )
                    raise PreflightFailed("sse", url, for_check(d))
        self.contract = contract
        for a in contract.adaptations:
            if a.option == "forced_length":
                self.adapted["forced"] = parse_forcing(str(a.value))
            elif a.option == "eos_token_id":
                self.adapted["eos_token_ids"] = a.value
            elif a.option == "done_marker":
                self.adapted["done_marker"] = False
            elif a.option == "usage":
                self.adapted["include_usage"] = False
            elif a.option == "coalesced_chunks":
                self.adapted["coalesced_chunks"] = True
        if contract.learned and "forced" not in self.adapted:
            self.adapted["forced"] = contract.forced
            if ForcedLength.LOGIT_BIAS in contract.forced:
                self.adapted["eos_token_ids"] = contract.eos_ids

    def _flag(self, option: str) -> tuple[str, ...]:
        """The flag of the adaptation of ``option`` (empty: none)."""
        if self.contract is None:
            return ()
        return tuple(a.flag for a in self.contract.adaptations if a.option == option)

    def protocol_sse(self) -> StreamRecord:
        """The request a run sends, as the probes left it."""
        rec, _ = self.stream()
        path = self.request().path
        if self.api and rec.status in (404, 405):
            self.not_served = True
            self.add(f"SSE {path}", "fail", self._not_served(rec), *self._served_flags)
            return rec
        if self.contract is not None and not self.contract.learned and not _streams(rec):
            self.add(f"SSE {path}", "fail", _describe(rec))
            return rec
        if rec.outcome == Outcome.OK:
            self.add(f"SSE {path}", "pass", _describe(rec))
        elif _streams(rec):
            # An idle server that cuts the request a run sends: what a run counts against it.
            self.add(f"SSE {path}", "fail", f"the stream a run sends: {_describe(rec)}")
        else:
            self.add(f"SSE {path}", "fail", _describe(rec))
        return rec

    _served_flags: tuple[str, ...] = ()

    def _dialects_served(self) -> tuple[list[str], list[str]]:
        """(the other dialects whose path streams ``ok``, the others with what they answered)."""
        served: list[str] = []
        refused: list[str] = []
        for api in API_PATHS:
            if api == self.api:
                continue
            rec, _ = self.stream(api=api, max_tokens=2)
            if rec.outcome == Outcome.OK or _streams(rec):
                # It streams that dialect (a 2-token probe judges no more than that).
                served.append(api)
            else:
                what = f"HTTP {rec.status}" if rec.status else str(rec.outcome)
                refused.append(f"{api} ({what})")
        return served, refused

    def _not_served(self, rec: StreamRecord) -> str:
        """Why the dialect's path failed, and which dialects the server speaks instead."""
        path = self.request().path
        served, _ = self._dialects_served()
        self._served_flags = (f"--api {served[0]}",) if served else ()
        head = (
            f"HTTP {rec.status} on {path}: this server does not speak {self.api} "
            f"(or serves it under another path: --path)"
        )
        if served:
            return head + "; it speaks " + ", ".join(f"{a} ({API_PATHS[a]})" for a in served)
        return head + "; no other dialect answered either: check the URL prefix"

    def other_dialects(self) -> None:
        """With ``--api``: which of the other dialects the server speaks too."""
        served, refused = self._dialects_served()
        detail = "also speaks: " + (", ".join(served) or "none")
        if refused:
            detail += "; not: " + ", ".join(refused)
        self.add("other dialects", "pass", detail)

    def other_endpoint(self) -> None:
        if self.api:
            self.other_dialects()
            return
        other = "completions" if self.endpoint == "chat" else "chat"
        rec, _ = self.stream(endpoint=other)
        path = self.request(endpoint=other).path
        if rec.outcome == Outcome.OK:
            self.add(f"SSE {path}", "pass", _describe(rec))
        elif rec.status in (404, 405):
            self.add(
                f"SSE {path}",
                "warn",
                f"not served ({_describe(rec)}); use --endpoint {self.endpoint}",
            )
        else:
            self.add(
                f"SSE {path}",
                "warn",
                f"{_describe(rec)} (what the probes learned is for --endpoint {self.endpoint}: "
                f"run `streamslo check URL --endpoint {other}` to learn that endpoint's)",
            )

    def websocket(self) -> None:
        rec, _ = self.stream(Wire.WS)
        if rec.outcome == Outcome.OK:
            self.add(f"WebSocket {WS_PATH}", "pass", _describe(rec))
        elif self.api in EVENT_APIS:  # e.g. the bundled /v1/ws, which speaks OpenAI chunks
            self.add(
                f"WebSocket {WS_PATH}",
                "warn",
                f"does not stream {self.api} events ({_describe(rec)}); runs use SSE (the "
                "default): not --protocol ws or mixed",
            )
        elif rec.status is None or rec.status != 101:
            self.add(
                f"WebSocket {WS_PATH}",
                "warn",
                f"not served ({_describe(rec)}); runs use SSE (the default): not --protocol ws "
                "or mixed",
            )
        else:
            self.add(f"WebSocket {WS_PATH}", "warn", f"served, with a problem: {_describe(rec)}")

    def terminal_marker(self) -> None:
        c = self.contract
        chunks = self.api not in EVENT_APIS
        name = "terminal marker [DONE]" if chunks else "terminal event"
        marker = "data: [DONE]" if chunks else self.terminal_shown
        rec = c.extra.get("record") if c is not None else None
        if (
            not self.not_served
            and isinstance(rec, StreamRecord)
            and rec.cause in (Cause.NO_TERMINAL, Cause.NO_STOP_REASON)
        ):
            # A stream that ends cleanly with neither its terminal marker nor a stop reason:
            # nothing tells a whole answer from a cut one.
            self.add(
                name,
                "fail",
                f"the stream ends without {marker} and without a stop reason: a run reads every "
                f"stream as cut ({_describe(rec)})",
            )
            return
        if self.not_served or c is None or not c.learned:
            self.add(name, "skip", "not reached: no stream answered")
            return
        if c.done_marker:
            self.add(name, "pass", f"every stream ends with {marker}")
            return
        self.add(
            name,
            "pass",
            f"no {marker}: each stream ends with the body, after its stop reason (a body that "
            "ends before one reads truncated)",
            *self._flag("done_marker"),
        )

    def max_tokens(self, rec: StreamRecord) -> None:
        n = CHECK_MAX_TOKENS
        if rec.tokens > n or rec.cause == Cause.OVER_MAX_TOKENS:
            self.add(
                "max_tokens honoured",
                "fail",
                f"more {self.unit} than max_tokens {n}: {_describe(rec)}",
            )
        elif _streams(rec):
            self.add("max_tokens honoured", "pass", f"{rec.tokens} {self.unit} for max_tokens {n}")
        else:
            self.add("max_tokens honoured", "skip", f"no stream: {_describe(rec)}")

    def forced_length(self) -> None:
        """Which means force the length there, each with what became of it."""
        c = self.contract
        name = "forced length"
        if c is None or not c.learned:
            self.add(name, "skip", "not reached: no stream answered")
            return

        def words(m: ForcedLength) -> str:
            return _MEANS_WORDS.get(m, str(m))

        others = ", ".join(
            f"{words(m.means)} {m.status}"
            + (f" ({m.detail})" if m.status in _SAY_WHY and m.detail else "")
            for m in c.means
            if m.means not in c.forced
        )
        tried = f"; also tried: {others}" if others else ""
        ids = f"; end-of-sequence ids {list(c.eos_ids)} from {c.eos_source}" if c.eos_ids else ""
        if not c.forced:
            if c.reference:
                detail = (
                    "no means forces the length; greedy replies repeat, so a run checks every "
                    "ordinary stop against reference replies recorded before the load"
                )
            else:
                detail = "no means forces the length: a run cannot see a stream cut short that says 'stop'"
            self.add(
                name,
                "warn",
                f"{detail}{tried.replace('also tried', 'tried')}{ids}",
                *self._flag("forced_length"),
                *self._flag("reference"),
            )
            return
        chosen = c.means_of(c.forced[0]) if len(c.forced) == 1 else None
        status: Status = (
            "pass"
            if chosen is not None and chosen.status in (MeansStatus.PROVEN, MeansStatus.KNOWN)
            else "warn"
        )
        how = (
            f" ({chosen.status}: {chosen.detail})"
            if chosen is not None
            else " (each accepted; no probe could show which the server honours: all are sent)"
        )
        self.add(
            name,
            status,
            f"by {' and '.join(words(m) for m in c.forced)}{how}{tried}{ids}",
            *self._flag("forced_length"),
            *self._flag("eos_token_id"),
        )

    def usage(self, rec: StreamRecord) -> None:
        c = self.contract
        if not _streams(rec) or c is None or not c.learned:
            self.add("usage", "skip", f"no stream: {_describe(rec)}")
            return
        if c.usage_refused:
            self.add(
                "usage",
                "warn",
                "the server refuses stream_options.include_usage: a run counts tokens without it",
                *self._flag("usage"),
            )
        elif (rec.usage_completion_tokens or 0) > CHECK_MAX_TOKENS:
            self.add(
                "usage",
                "fail",
                f"{self.usage_field} {rec.usage_completion_tokens} for max_tokens "
                f"{CHECK_MAX_TOKENS}: the server counts tokens it may not have generated (a "
                "run reads every such stream as tokens lost)",
            )
        elif not c.usage:
            self.add(
                "usage",
                "warn",
                f"no {self.usage_field}: a run has no count of the server's to check the chunks "
                "against",
            )
        else:
            self.add("usage", "pass", f"{self.usage_field} {rec.usage_completion_tokens} reported")

    def token_count(self) -> None:
        """How a run counts the tokens that arrived: the server's per-chunk count, one per chunk,
        or only the usage (merged tokens)."""
        c = self.contract
        name = "token count"
        if c is None or not c.learned:
            self.add(name, "skip", "not reached: no stream answered")
            return
        if c.counted:
            self.add(name, "pass", f"the server counts each chunk's tokens ({c.counted})")
        elif c.merged:
            self.add(
                name,
                "warn",
                "several tokens may share a chunk (or a token send none) and the server gives no "
                "per-chunk count: a run counts tokens by usage and cannot see a lost chunk",
                *self._flag("coalesced_chunks"),
            )
        else:
            self.add(name, "pass", "one token per chunk in every probe")

    def determinism(self) -> None:
        c = self.contract
        if c is None or c.deterministic is None:
            return
        if c.deterministic:
            self.add(
                "greedy replies repeat", "pass", "two greedy, seeded replies were the same text"
            )
        else:
            self.add(
                "greedy replies repeat",
                "warn",
                "two greedy, seeded replies to the same prompt differed: reference replies "
                "cannot stand in for a forced length here",
            )

    def bad_request(self) -> None:
        name = "bad request → 4xx with an error body"
        try:
            status, body = fetch(
                self.target,
                self.request().path,
                timeout=_LIMITS.request_timeout,
                limits=_LIMITS,
                method="POST",
                body=b'{"messages": not json',
            )
        except (OSError, ProtocolError, ValueError) as exc:
            self.add(name, "warn", f"a body that is not JSON got no answer ({type(exc).__name__})")
            return
        message = _error_message(body)
        # A load run never sends a body that is not JSON: a server that answers it badly is
        # worth knowing (a client bug would read as the server's fault), not a failed contract.
        if 400 <= status < 500:
            if message:
                self.add(name, "pass", f"HTTP {status}: {message}"[:160])
            else:
                self.add(
                    name,
                    "warn",
                    f"HTTP {status} with no error message in the body: a run's error texts will "
                    f"say only 'HTTP {status}'",
                )
        elif 500 <= status < 600:
            self.add(
                name,
                "warn",
                f"a body that is not JSON got HTTP {status} (the client's fault answered as the "
                f"server's; a load run never sends one): {message[:120]}",
            )
        else:
            self.add(name, "warn", f"a body that is not JSON got HTTP {status}")

    def metrics(self) -> None:
        try:
            status, body = fetch(self.target, "/metrics", timeout=5.0, limits=_LIMITS)
        except (OSError, ProtocolError, ValueError) as exc:
            self.add(
                "/metrics",
                "warn",
                f"no answer ({type(exc).__name__}); runs keep no server evidence",
            )
            return
        text = body[:65536].decode("utf-8", "replace")
        if status == 200 and ("# TYPE" in text or "# HELP" in text):
            self.add(
                "/metrics", "pass", f"Prometheus text, {len(body):,} bytes (scraped during runs)"
            )
        else:
            self.add(
                "/metrics",
                "warn",
                f"HTTP {status}, not Prometheus text; give --metrics-url if they are elsewhere",
            )

    def keep_alive(self) -> None:
        conn = SSEConnection(self.target, _LIMITS, keep_alive=True)
        recs = []
        try:
            for _ in range(2):
                req = self.request(max_tokens=2)
                rec = StreamRecord(
                    stream_id="check-ka",
                    protocol=Wire.SSE,
                    user_class="check",
                    started_at=time.time(),
                    t0=time.perf_counter(),
                )
                conn.request(req.path, build_body(req, "Say hello."), self.tracker(req, rec))
                recs.append(rec)
        finally:
            conn.close()
        first, second = recs
        if first.outcome != Outcome.OK:
            self.add("keep-alive reuse", "skip", f"first stream not ok: {_describe(first)}")
        elif second.outcome == Outcome.OK and second.connect_s is None:
            self.add("keep-alive reuse", "pass", "the second request reused the connection")
        elif second.outcome == Outcome.OK:
            self.add(
                "keep-alive reuse",
                "warn",
                "the server closed the connection after a stream: a new TCP connection per request",
            )
        else:
            self.add(
                "keep-alive reuse",
                "fail",
                f"the second request on a kept-alive connection: {_describe(second)}",
            )


def _error_message(body: bytes) -> str:
    """The server's message in an error body: any error shape the stream core knows, FastAPI's
    ``{"detail": ...}``, or the text ("" when there is none)."""
    text = body[:4096].decode("utf-8", "replace").strip()
    try:
        obj = loads_chunk(text)
    except ValueError:
        return text[:200]
    if isinstance(obj, dict):
        found = inband_error(obj)
        if found is not None:
            return found[0]
        return error_message(obj.get("detail") or obj)
    return error_message(obj)


def for_check(d: Diagnosis) -> Diagnosis:
    """A diagnosis whose words fit ``check``'s command line (the URL is its argument, not
    ``--host``)."""

    def words(text: str) -> str:
        return text.replace("in --host", "in the URL").replace("--host", "the URL")

    return replace(d, cause=words(d.cause), fix=words(d.fix))


def run_checks(
    url: str,
    *,
    model: str | None = None,
    endpoint: str = "chat",
    headers: dict[str, str] | None = None,
    insecure: bool = False,
    websocket: bool = True,
    progress: Callable[[CheckItem], None] | None = None,
    api: str = "",
    eos_token_id: tuple[int, ...] = (),
    tokenizer: str | None = None,
    forced_length: str = "auto",
) -> CheckReport:
    """Check the server at ``url`` (its base URL, as ``--host`` takes it).

    Args:
        url: the base URL.
        model: the model to ask for (default: the first of ``/v1/models``).
        endpoint: the endpoint runs will use (``chat`` or ``completions``).
        headers: extra request headers (credentials).
        insecure: https without certificate verification.
        websocket: also check ``/v1/ws``.
        progress: called with each item as it is decided.
        api: the dialect judged in detail (``--api``; empty: the OpenAI ``endpoint``). The
            other dialects' paths are probed too; one whose path is not served fails with
            the dialects the server does speak.
        eos_token_id: the model's end-of-sequence ids (``--eos-token-id``).
        tokenizer: a local tokenizer folder (its end-of-sequence ids).
        forced_length: ``--forced-length`` (``auto``: every means is tried).

    Returns:
        The report (:func:`exit_code` turns it into 0 or 99).

    Raises:
        PreflightFailed: a bad URL, or a server that cannot be reached or refuses the credentials.
    """
    t0 = time.perf_counter()
    try:
        target = parse_target(url, headers, insecure)
    except PreflightFailed as exc:
        raise PreflightFailed(exc.protocol, exc.url, for_check(exc.diagnosis)) from None
    c = _Checker(target, model, endpoint, api)
    wanted = None if forced_length in ("auto", "") else parse_forcing(forced_length)
    c.models()
    c.learn(eos_token_id, tokenizer, wanted)
    judged: list[StreamRecord] = []

    def sse() -> None:
        judged.append(c.protocol_sse())

    steps: list[Callable[[], None]] = [
        sse,
        c.terminal_marker,
        lambda: c.max_tokens(judged[0]),
        c.forced_length,
        lambda: c.usage(judged[0]),
        c.token_count,
        c.determinism,
        c.other_endpoint,
    ]
    if websocket:
        steps.append(c.websocket)
    steps += [c.bad_request, c.metrics, c.keep_alive]
    shown = 0
    for step in steps:
        step()
        if progress is not None:
            for item in c.items[shown:]:
                progress(item)
            shown = len(c.items)
    return CheckReport(url, c.model, c.items, time.perf_counter() - t0, c.contract)


_MARK = {"pass": "PASS", "warn": "WARN", "fail": "FAIL", "skip": "skip"}


#: The width of the name column: the longest check name.
NAME_WIDTH = len("bad request → 4xx with an error body")


def format_item(item: CheckItem, width: int = NAME_WIDTH) -> str:
    """One line of the table."""
    flags = f"   [{' '.join(item.flags)}]" if item.flags else ""
    detail = " ".join(item.detail.split())  # a server's message may hold line breaks
    return f"  {_MARK[item.status]}  {item.name:<{width}}  {detail}{flags}"


def format_footer(report: CheckReport) -> str:
    """The counts, what a run there can check, and the command line to use."""
    counts = {s: sum(1 for i in report.items if i.status == s) for s in ("pass", "warn", "fail")}
    lines = [
        f"{counts['pass']} passed, {counts['warn']} warnings, {counts['fail']} failed in {report.seconds:.1f} s"
    ]
    truth = report.truth
    if truth is not None:
        lines.append("a run there:")
        lines += [f"  {line}" for line in truth.lines()]
    if report.contract is not None and report.contract.learned:
        if report.flags:
            lines.append(f"run: {report.command_line()}   (it adapts by itself)")
            lines.append(f"     spelled out: {report.spelled_out()}")
        else:
            lines.append(f"run: {report.command_line()}   (no flags: a run adapts)")
    elif report.flags:
        lines.append("a run against this server needs: " + " ".join(report.flags))
    return "\n".join(lines)


def format_table(report: CheckReport) -> str:
    """The table ``check`` prints: one line per check, then what a run can check and the
    command line."""
    head = f"streamslo check {report.url}" + (f" (model {report.model})" if report.model else "")
    return "\n".join([head, *(format_item(i) for i in report.items), format_footer(report)])


def to_json(report: CheckReport) -> str:
    return json.dumps(report.as_dict(), indent=2, default=str) + "\n"
