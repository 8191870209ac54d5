"""``streamslo check URL``: a server's stream contract, checked before it is load tested.

Each check sends a request or two over the run's own transport (:mod:`streamslo.transport`)
and judges the stream with the run's tracker (:mod:`streamslo.stream.tracker`), so that a
check that passes here means the load run will classify that server's streams as ``ok``.
Each :class:`CheckItem` is ``pass``, ``warn`` (a run works, with the flags it names; or a fault
a load run never meets, such as the answer to a body that is not JSON) or ``fail`` (what breaks
a load run or its truth: a run would count it against the server; the flags that let a run go
on anyway are named too). Flags are only those a run needs beyond its defaults. The requests
are adapted to the engine ``/v1/models`` names as a run's are (:mod:`streamslo.workload.engines`).
``docs/check.md`` lists the checks.

Exit codes (:func:`exit_code`): 0 every check passed or warned, 99 a check failed, 2 the
server could not be reached or the URL is bad (:class:`~streamslo.run.preflight.PreflightFailed`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from streamslo.errors import EXIT_OK, EXIT_THRESHOLD, ProtocolError
from streamslo.run.preflight import (
    Diagnosis,
    PreflightFailed,
    diagnose,
    models_and_owner,
    one_stream,
    parse_target,
)
from streamslo.stream.dialects import API_PATHS, EVENT_APIS, Dialect, tracker_for
from streamslo.stream.timing import StreamRecord
from streamslo.stream.tracker import StreamTracker
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

#: ``max_tokens`` of the contract requests: long enough that an early end shows.
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
    """The ``streamslo run`` flags this server needs (empty: none)."""


@dataclass
class CheckReport:
    """Everything ``check`` found."""

    url: str
    model: str | None
    items: list[CheckItem] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def flags(self) -> list[str]:
        """Every flag a run against this server needs, once each, in the order found."""
        out: list[str] = []
        for item in self.items:
            out += [f for f in item.flags if f not in out]
        return out

    def as_dict(self) -> dict[str, object]:
        return {
            "url": self.url,
            "model": self.model,
            "passed": exit_code(self) == EXIT_OK,
            "run_flags": self.flags,
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


#: Per event dialect: (the terminal event as the tracker names it, as the table shows it, the
#: stop reason of a forced length, where usage is).
_EVENT_WORDS: dict[str, tuple[str, str, str, str]] = {
    Dialect.RESPONSES: (
        "response.completed",
        "response.completed or response.incomplete",
        "max_output_tokens",
        "response.usage.output_tokens",
    ),
    Dialect.MESSAGES: (
        "message_stop",
        "message_stop",
        "max_tokens",
        "message_delta usage.output_tokens",
    ),
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
        terminal, shown, length, usage = _EVENT_WORDS.get(
            api, ("[DONE]", "[DONE]", "length", "usage.completion_tokens")
        )
        self.terminal, self.terminal_shown = terminal, shown
        self.length, self.usage_field = length, usage
        self.unit = "token deltas" if api in EVENT_APIS else "content chunks"
        self.owner: str | None = None
        """Who serves the model (``/v1/models`` ``owned_by``): the engine a run adapts to."""

    def add(self, name: str, status: Status, detail: str, *flags: str) -> None:
        self.items.append(CheckItem(name, status, detail, tuple(flags)))

    def _base(self, **kw: Any) -> RequestOptions:
        """A request with the run's defaults, ``kw`` changed."""
        base = RequestOptions(
            endpoint=self.endpoint,
            model=self.model,
            max_tokens=CHECK_MAX_TOKENS,
            temperature=0.0,
            api=self.api,
        )
        return replace(base, **kw)

    def request(self, **kw: Any) -> RequestOptions:
        """A request as a run would send it (adapted to the engine), with ``kw`` changed."""
        return adapt_request(self._base(**kw), self.owner).request

    def tracker(self, req: RequestOptions, rec: StreamRecord) -> StreamTracker:
        """The run's tracker for ``req``'s dialect."""
        if req.dialect in EVENT_APIS:
            return tracker_for(req.dialect, rec, req.expectations())
        return StreamTracker(rec, req.expectations())

    def stream(self, protocol: str = "sse", **kw: Any) -> tuple[StreamRecord, StreamTracker]:
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

    def reachable(self) -> tuple[StreamRecord, StreamTracker]:
        """The first stream; raises PreflightFailed for a target that is wrong."""
        req = self.request()
        rec, tracker = one_stream(self.target, "sse", req, limits=_LIMITS)
        d = diagnose("sse", rec, self.target, req)
        if d is not None and d.fatal and rec.status in (None, 401, 403):
            raise PreflightFailed(
                "sse",
                f"{self.target.scheme}://{self.target.host_header}{self.target.prefix}{req.path}",
                for_check(d),
            )
        return rec, tracker

    def protocol_sse(self, rec: StreamRecord) -> None:
        path = self.request().path
        if self.api and rec.status in (404, 405):
            self.not_served = True
            self.add(f"SSE {path}", "fail", self._not_served(rec), *self._served_flags)
            return
        if rec.outcome == "ok":
            self.add(f"SSE {path}", "pass", _describe(rec))
        elif rec.status is not None and 200 <= rec.status < 300:
            self.add(f"SSE {path}", "warn", f"streams, with a problem (below): {_describe(rec)}")
        else:
            self.add(f"SSE {path}", "fail", _describe(rec))

    _served_flags: tuple[str, ...] = ()

    def _dialects_served(self) -> tuple[list[str], list[str]]:
        """(the other dialects whose path streams ``ok``, the others with what they answered)."""
        served: list[str] = []
        refused: list[str] = []
        for api in API_PATHS:
            if api == self.api:
                continue
            rec, _ = self.stream(api=api, max_tokens=2)
            if rec.outcome == "ok" or (
                rec.status is not None
                and 200 <= rec.status < 300
                and "not an event stream" not in rec.error
            ):
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
        if rec.outcome == "ok":
            self.add(f"SSE {path}", "pass", _describe(rec))
        elif rec.status in (404, 405):
            self.add(
                f"SSE {path}",
                "warn",
                f"not served ({_describe(rec)}); use --endpoint {self.endpoint}",
            )
        else:
            need = _flag_for(rec)
            self.add(
                f"SSE {path}",
                "warn",
                _describe(rec) + (f"; a run with --endpoint {other} needs {need}" if need else ""),
            )

    def websocket(self) -> None:
        rec, _ = self.stream("ws")
        if rec.outcome == "ok":
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

    def terminal_marker(self, rec: StreamRecord, tracker: StreamTracker) -> StreamRecord:
        """The terminal marker check ([DONE]; an event dialect's terminal event); returns the
        record the later checks judge (without the marker: a stream read with
        --no-done-marker, so that they still see the whole answer)."""
        chunks = self.terminal == "[DONE]"
        name = "terminal marker [DONE]" if chunks else "terminal event"
        marker = "data: [DONE]" if chunks else self.terminal_shown
        if self.not_served:
            self.add(name, "skip", f"not reached: {_describe(rec)}")
            return rec
        if tracker.done and rec.outcome != "truncated":
            self.add(name, "pass", f"every stream ends with {marker}")
            return rec
        if rec.outcome == "truncated" and f"body ended before {self.terminal}" in rec.error:
            again, t2 = self.stream(done_marker=False)
            if t2.done and again.outcome != "truncated":
                self.add(
                    name,
                    "fail",
                    f"the body ends cleanly without {marker}; a run needs --no-done-marker",
                    "--no-done-marker",
                )
                return again
            self.add(
                name, "fail", f"no {self.terminal_shown}: {_describe(rec)}", "--no-done-marker"
            )
            return rec
        if rec.outcome == "truncated":
            self.add(
                name, "fail", f"the stream is cut before {self.terminal_shown}: {_describe(rec)}"
            )
            return rec
        self.add(name, "skip", f"not reached: {_describe(rec)}")
        return rec

    def max_tokens_and_ignore_eos(self, rec: StreamRecord) -> None:
        n = CHECK_MAX_TOKENS
        unit = self.unit
        if rec.tokens > n or "than max_tokens" in rec.error or "for max_tokens" in rec.error:
            self.add(
                "max_tokens honoured",
                "fail",
                f"more {unit} than max_tokens {n}: {_describe(rec)}",
            )
        elif rec.status is not None and 200 <= rec.status < 300:
            self.add("max_tokens honoured", "pass", f"{rec.tokens} {unit} for max_tokens {n}")
        else:
            self.add("max_tokens honoured", "skip", f"no stream: {_describe(rec)}")
        length = self.length
        if not self.request().ignore_eos:
            # The engine's path ignores the field: a run does not ask it (the /v1/models line).
            self.add(
                "ignore_eos honoured",
                "skip",
                "not asked: this path ignores ignore_eos, so runs judge it without a forced length",
            )
            return
        at_limit = (
            rec.finish_reason == "completed"  # Responses at max_output_tokens (vLLM, llama.cpp)
            and self.api == Dialect.RESPONSES
            and (rec.usage_completion_tokens or 0) >= n
        )
        if rec.outcome == "ok" and (rec.finish_reason == length or at_limit):
            self.add(
                "ignore_eos honoured",
                "pass",
                f"exactly {n} tokens, finish_reason {rec.finish_reason}",
            )
            return
        natural = rec.finish_reason is not None and rec.finish_reason != length
        if natural and rec.outcome == "silent_truncation":
            self.add(
                "ignore_eos honoured",
                "fail",
                f"finish_reason {rec.finish_reason} after {rec.tokens} of {n} tokens under "
                "ignore_eos: true; a run counts every such stream as silent_truncation unless "
                "given --no-ignore-eos",
                "--no-ignore-eos",
            )
            return
        if rec.status == 400 and "ignore_eos" in rec.error:
            self.add("ignore_eos honoured", "warn", f"rejected: {rec.error}", "--no-ignore-eos")
            return
        self.add("ignore_eos honoured", "skip", f"not judged: {_describe(rec)}")

    def usage(self, rec: StreamRecord) -> None:
        usage = rec.usage_completion_tokens
        if rec.outcome == "ok" and usage is not None and rec.reported_tokens == usage:
            how = (
                "counted by usage (--coalesced-chunks)"
                if rec.tokens == usage or self.request().coalesced_chunks
                else f"{rec.tokens} arrivals, merged tokens explained by their multi-byte text"
            )
            self.add("usage", "pass", f"{self.usage_field} {usage} = tokens streamed ({how})")
            return
        if rec.status is None or not 200 <= rec.status < 300:
            self.add("usage", "skip", f"no stream: {_describe(rec)}")
        elif usage is None and self.api in EVENT_APIS:
            self.add(
                "usage",
                "warn",
                f"no {self.usage_field} (the dialect always reports it); a run then cannot "
                "see missing tokens",
            )
        elif usage is None:
            self.add(
                "usage",
                "warn",
                "no usage chunk under stream_options.include_usage; a run then cannot "
                "see missing chunks",
                "--no-usage",
            )
        elif usage == rec.tokens:
            self.add("usage", "pass", f"{self.usage_field} {usage} = {self.unit} streamed")
        elif usage > rec.tokens:
            # Lying usage or several tokens per chunk: the wire cannot tell them apart.
            self.add(
                "usage",
                "fail",
                f"{self.usage_field} {usage} but {rec.tokens} {self.unit} streamed: the usage "
                "lies (tokens missing), or several tokens share a delta (then run with "
                "--coalesced-chunks)",
                "--coalesced-chunks",
            )
        else:
            self.add(
                "usage",
                "fail",
                f"{self.usage_field} {usage} but {rec.tokens} {self.unit} streamed",
            )

    def bad_request(self) -> None:
        rec = StreamRecord(
            stream_id="check-bad",
            protocol="sse",
            user_class="check",
            started_at=time.time(),
            t0=time.perf_counter(),
        )
        tracker = StreamTracker(rec, self.request().expectations())
        conn = SSEConnection(self.target, _LIMITS, keep_alive=False)
        try:
            conn.request(self.request().path, b'{"messages": not json', tracker)
        finally:
            conn.close()
        status = rec.status
        name = "bad request → 4xx with an error body"
        # A load run never sends a body that is not JSON: a server that answers it badly is
        # worth knowing (a client bug would read as the server's fault), not a failed contract.
        if status is not None and 400 <= status < 500:
            if rec.error.startswith(f"HTTP {status}: "):
                self.add(name, "pass", rec.error[:160])
            else:
                self.add(
                    name,
                    "warn",
                    f"HTTP {status} with no error message in the body: a run's error texts will "
                    f"say only 'HTTP {status}'",
                )
        elif status is not None and 500 <= status < 600:
            self.add(
                name,
                "warn",
                f"a body that is not JSON got HTTP {status} (the client's fault answered as the "
                f"server's; a load run never sends one): {rec.error[:120]}",
            )
        else:
            self.add(name, "warn", f"a body that is not JSON got: {_describe(rec)}")

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
                    protocol="sse",
                    user_class="check",
                    started_at=time.time(),
                    t0=time.perf_counter(),
                )
                conn.request(req.path, build_body(req, "Say hello."), self.tracker(req, rec))
                recs.append(rec)
        finally:
            conn.close()
        first, second = recs
        if first.outcome != "ok":
            self.add("keep-alive reuse", "skip", f"first stream not ok: {_describe(first)}")
        elif second.outcome == "ok" and second.connect_s is None:
            self.add("keep-alive reuse", "pass", "the second request reused the connection")
        elif second.outcome == "ok":
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


def _flag_for(rec: StreamRecord) -> str:
    """The flag a run would need for a stream read so (empty: none known)."""
    usage = rec.usage_completion_tokens
    if rec.outcome == "silent_truncation" and usage is not None and usage > rec.tokens:
        return "--coalesced-chunks"
    if rec.outcome == "silent_truncation" and "under ignore_eos" in rec.error:
        return "--no-ignore-eos"
    if rec.outcome == "truncated" and "body ended before" in rec.error:
        return "--no-done-marker"
    return ""


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
    c.models()
    rec, tracker = c.reachable()
    judged = [rec]

    def marker() -> None:
        judged[0] = c.terminal_marker(rec, tracker)

    steps: list[Callable[[], None]] = [
        lambda: c.protocol_sse(rec),
        marker,
        lambda: c.max_tokens_and_ignore_eos(judged[0]),
        lambda: c.usage(judged[0]),
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
    return CheckReport(url, c.model, c.items, time.perf_counter() - t0)


_MARK = {"pass": "PASS", "warn": "WARN", "fail": "FAIL", "skip": "skip"}


#: The width of the name column: the longest check name.
NAME_WIDTH = len("bad request → 4xx with an error body")


def format_item(item: CheckItem, width: int = NAME_WIDTH) -> str:
    """One line of the table."""
    flags = f"   [{' '.join(item.flags)}]" if item.flags else ""
    detail = " ".join(item.detail.split())  # a server's message may hold line breaks
    return f"  {_MARK[item.status]}  {item.name:<{width}}  {detail}{flags}"


def format_footer(report: CheckReport) -> str:
    """The counts, then every flag a run against the server needs."""
    counts = {s: sum(1 for i in report.items if i.status == s) for s in ("pass", "warn", "fail")}
    lines = [
        f"{counts['pass']} passed, {counts['warn']} warnings, {counts['fail']} failed in {report.seconds:.1f} s"
    ]
    if report.flags:
        lines.append("a run against this server needs: " + " ".join(report.flags))
    return "\n".join(lines)


def format_table(report: CheckReport) -> str:
    """The table ``check`` prints: one line per check, then the flags a run needs."""
    head = f"streamslo check {report.url}" + (f" (model {report.model})" if report.model else "")
    return "\n".join([head, *(format_item(i) for i in report.items), format_footer(report)])


def to_json(report: CheckReport) -> str:
    return json.dumps(report.as_dict(), indent=2) + "\n"
