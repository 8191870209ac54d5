"""The contract probes: a few short requests, one at a time, that learn what a server accepts and
honours before any load (docs/servers.md, "What a run learns before the load").

Shared by the preflight of ``streamslo run`` and by ``streamslo check``. Every probe is the
run's own request, judged by the run's own tracker; each finding rests on what a probe showed,
read from the record's fields and its typed cause, never from the words of an error:

1. **The request as a run sends it, without a forced length** (a prompt that invites a short
   answer, ``max_tokens`` :data:`PROBE_TOKENS`, greedy, seeded). A 4xx that goes away without
   ``stream_options`` is a refused usage option (``--no-usage``). Its stream tells the shape:
   a body that ends after a stop reason with no ``[DONE]`` (``--no-done-marker``, after a second
   probe read it so), usage or none, the server's per-chunk count (vLLM's token ids,
   llama.cpp's timings) or none.
2. **A stop of its own**: a probe that stops on its own before its length, twice at the same
   place with the same text (greedy decoding repeats itself; a cut on the way would not), is the
   baseline that shows a forced length's effect. Where the model runs on (a tiny or a chatty
   model), a ``logit_bias`` of +100 on its end-of-sequence ids (:mod:`streamslo.contract.eos`)
   ends the answer at once if the server applies the bias: that is the baseline then.
3. **Each means of forcing the length**, in order (``ignore_eos``, ``min_tokens``,
   ``generation_config.min_new_tokens``, ``logit_bias`` against the end-of-sequence ids) until
   one works: refused (a 4xx), ignored (the answer still stopped on its own, in every one of
   :data:`TRIES` tries: a stream cut on the way would not stop there each time), or run to the
   length (``proven`` against a baseline; ``known`` where the engine is known to honour it;
   ``unproven`` where nothing showed its effect).
4. **Merged tokens**: a whole stream whose usage is above its chunks, with no per-chunk count
   (a token with no text sends no chunk, or several share one): tokens are counted by usage
   (``--coalesced-chunks``), and a lost chunk cannot be seen.
5. **Where no means works**: whether two greedy replies to the same prompt are the same; then a
   run records reference replies before the load (``--reference on``).

What the probes learn becomes :class:`~streamslo.contract.model.Adaptation` values (run options
the user did not set), and the :class:`~streamslo.stream.truth.Truth` a run with them can check.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from streamslo.contract.eos import find_eos_ids
from streamslo.contract.model import (
    USABLE,
    Adaptation,
    Contract,
    MeansStatus,
    MeansTried,
)
from streamslo.contract.probe import PROBE_LIMITS, one_stream
from streamslo.stream.cause import Cause
from streamslo.stream.counts import EndRules
from streamslo.stream.dialects import Dialect
from streamslo.stream.outcome import Outcome, status_began
from streamslo.stream.timing import StreamRecord, Wire
from streamslo.stream.truth import ForcedLength, Forcing, Truth, forcing_text
from streamslo.transport.common import ClientLimits, Target
from streamslo.workload.engines import Engine, adapt_request, engine_of
from streamslo.workload.requests import RequestOptions

__all__ = ["MEANS_ORDER", "PROBE_TOKENS", "STOP_PROMPT", "TRIES", "learn"]

#: ``max_tokens`` of a probe: room for a short answer to stop on its own, short enough to be
#: quick on a large model.
PROBE_TOKENS = 16
#: Tries a means gets before it is called ignored (a stream cut on the way, say by a gateway
#: that cuts a third of its streams, is unlikely to be cut three times).
TRIES = 3
#: The prompt of the probes: one that invites an answer shorter than :data:`PROBE_TOKENS`, so
#: that a real model stops on its own and a forced length's effect shows.
STOP_PROMPT = "Answer with one word only: what colour is the sky on a clear day?"
#: The ``logit_bias`` that makes a token the only choice (OpenAI's range is -100 to 100; a float:
#: transformers serve refuses integer biases).
PUSH = 100.0
#: ``max_tokens`` of the probe that looks for merged tokens where no special token can show it.
LONG_PROBE_TOKENS = 64
#: The means a run tries, in order (the first that works is used).
MEANS_ORDER: tuple[ForcedLength, ...] = (
    ForcedLength.IGNORE_EOS,
    ForcedLength.MIN_TOKENS,
    ForcedLength.MIN_NEW_TOKENS,
    ForcedLength.LOGIT_BIAS,
)


@dataclass(frozen=True)
class _Seen:
    """One probe: its record, the dialect's end rules, the answer's text, whether the server
    counted its chunks."""

    rec: StreamRecord
    rules: EndRules
    text: str
    counted: bool

    @property
    def count(self) -> int:
        """Tokens in the answer: the server's usage where it gave one, else the positions."""
        usage = self.rec.usage_completion_tokens
        return usage if usage is not None else self.rec.tokens

    @property
    def refused(self) -> bool:
        """The server refused the request itself (400 or 422: a field it does not take)."""
        return self.rec.outcome == Outcome.HTTP_4XX and self.rec.status in (400, 422)

    def reached(self, n: int) -> bool:
        """It ran to its length: the length's stop reason (or a Responses ``completed`` whose
        usage reached it)."""
        reason = self.rec.finish_reason
        if reason is None:
            return False
        return reason in self.rules.length or (
            reason == self.rules.complete_is_length_at_limit and self.count >= n
        )

    def stopped(self, n: int) -> bool:
        """It stopped on its own before its length (an ordinary stop reason)."""
        reason = self.rec.finish_reason
        return (
            reason is not None
            and reason in self.rules.complete
            and reason not in self.rules.tool
            and not self.reached(n)
            and self.count < n
        )

    def whole(self) -> bool:
        """It ended with a stop reason after the stream began (whatever the counts say; a body
        that ended cleanly after its stop reason without the terminal marker included)."""
        return (
            status_began(self.rec.status)
            and self.rec.finish_reason is not None
            and self.rec.cause not in (Cause.CUT, Cause.NO_STOP_REASON)
        )

    @property
    def no_terminal(self) -> bool:
        """The body ended cleanly after the stop reason, with no terminal marker."""
        return self.rec.cause == Cause.NO_TERMINAL and self.rec.finish_reason is not None


def _describe(rec: StreamRecord) -> str:
    words = [str(rec.outcome)]
    if rec.status and not status_began(rec.status):
        words.append(f"HTTP {rec.status}")
    if rec.error:
        words.append(rec.error[:160])
    return ", ".join(words)


class _Prober:
    """Sends the probes, one at a time, and counts them."""

    def __init__(self, target: Target, limits: ClientLimits) -> None:
        self.target = target
        self.limits = limits
        self.sent = 0
        self.no_terminal = 0
        """Probes whose body ended cleanly after their stop reason, without the marker."""

    def send(self, req: RequestOptions) -> _Seen:
        # Read to its end whatever its chunks count (a server that sends chunks without a
        # token would otherwise end the probe early as more positions than max_tokens): the
        # probes judge the record's fields themselves.
        expect = replace(req.expectations(), max_tokens=None, forced_length=False)
        rec, tracker = one_stream(
            self.target,
            Wire.SSE,
            req,
            prompt=STOP_PROMPT,
            limits=self.limits,
            collect_text=True,
            label="contract",
            expect=expect,
        )
        self.sent += 1
        seen = _Seen(
            rec, tracker.dialect.rules, "".join(tracker.text or ()), tracker.ledger.counted
        )
        if seen.no_terminal:
            self.no_terminal += 1
        return seen


def _pushed(req: RequestOptions, ids: Iterable[int]) -> RequestOptions:
    """``req`` with a bias that makes ``ids`` (the end-of-sequence tokens, or a token with no
    text) the only choice."""
    bias = {str(i): PUSH for i in ids}
    return replace(req, extra={**req.extra, "logit_bias": bias})


@dataclass
class _State:
    """What the probes found so far."""

    base: RequestOptions
    first: _Seen
    usage_refused: str = ""
    done_marker_dropped: bool = False
    natural: bool = False
    push: bool = False
    push_status: MeansTried | None = None
    merged: str | None = None
    """What a whole stream showed of chunks that are not one token each (None: nothing)."""
    second_text: str | None = None


def learn(
    target: Target,
    request: RequestOptions,
    *,
    owner: str | None = None,
    wanted: Forcing | None = None,
    ignore_eos_allowed: bool = True,
    eos_ids: Iterable[int] = (),
    tokenizer: str | None = None,
    reference: str = "auto",
    all_means: bool = False,
    limits: ClientLimits = PROBE_LIMITS,
    progress: Callable[[str], None] | None = None,
) -> Contract:
    """Learn the stream contract of the server at ``target`` for ``request``'s dialect.

    Args:
        target: the server.
        request: the run's request options (the model resolved).
        owner: ``/v1/models``'s ``owned_by`` (the engine, when streamslo knows it).
        wanted: the forced length the user set (``--forced-length``; empty: ``none``): only
            its means are tried, and it is used. None: every means of :data:`MEANS_ORDER` until
            one works.
        ignore_eos_allowed: False under ``--no-ignore-eos`` (it is not tried).
        eos_ids: ``--eos-token-id``.
        tokenizer: ``--tokenizer``.
        reference: ``--reference`` (``auto``: where no forced length works; ``on``; ``off``).
        all_means: try every means even after one works (``check`` shows them all).
        limits: each probe's time limits.
        progress: called with a few words before each step (``check``'s live line).

    Returns:
        The contract (with ``failure`` set when no stream answered: the preflight's diagnosis
        then says why).
    """
    t0 = time.perf_counter()
    say = progress or (lambda _: None)
    engine = engine_of(owner)
    adapted = adapt_request(request, owner).request
    base = replace(
        adapted,
        max_tokens=PROBE_TOKENS,
        temperature=0.0,
        seed=adapted.seed if adapted.seed is not None else 1,
        forced=(),
        eos_token_ids=(),
    )
    prober = _Prober(target, limits)
    say("the request without a forced length")
    first = prober.send(base)
    usage_refused = ""
    if first.refused and base.include_usage:
        again = prober.send(replace(base, include_usage=False))
        if not again.refused:
            usage_refused = first.rec.error
            base = replace(base, include_usage=False)
            first = again
    tries = 1
    while not first.whole() and not first.refused and tries < TRIES and _transient(first.rec):
        first = prober.send(base)  # a 5xx, a cut or a stall at idle: ask again
        tries += 1
    if not first.whole():
        return _failed(request, adapted, owner, first, prober, t0, usage_refused)
    st = _State(base=base, first=first, usage_refused=usage_refused)
    _note_merged(st, first, PROBE_TOKENS)
    if first.stopped(PROBE_TOKENS):
        say("whether the model stops on its own")
        second = prober.send(base)
        st.second_text = second.text if second.whole() else None
        st.natural = (
            second.stopped(PROBE_TOKENS)
            and second.text == first.text
            and second.count == first.count
        )
    say("the model's special token ids")
    special = find_eos_ids(target, base.model, limits, given=tuple(eos_ids), tokenizer=tokenizer)
    eos, eos_source = special.eos, special.source
    if eos and not st.natural and wanted != ():
        say("a bias toward the end-of-sequence ids")
        pushed = prober.send(_pushed(base, eos))
        if pushed.refused:
            st.push_status = MeansTried(
                ForcedLength.LOGIT_BIAS, MeansStatus.REJECTED, f"refused: {pushed.rec.error[:160]}"
            )
        elif pushed.stopped(PROBE_TOKENS) and pushed.count <= 2:
            st.push = True
        else:
            st.push_status = MeansTried(
                ForcedLength.LOGIT_BIAS,
                MeansStatus.IGNORED,
                f"a bias of +{PUSH:g} on the end-of-sequence ids {list(eos)} ({eos_source}) did "
                f"not end the answer ({_describe(pushed.rec)}, {pushed.count} tokens): the "
                "server ignores logit_bias, or the ids are not the model's",
            )
    candidates = _candidates(wanted, ignore_eos_allowed)
    tried: list[MeansTried] = []
    best: MeansTried | None = None  # the first proven (or known) means
    for means in MEANS_ORDER:
        if means not in candidates:
            if wanted is None and means == ForcedLength.IGNORE_EOS:
                tried.append(MeansTried(means, MeansStatus.NOT_TRIED, "--no-ignore-eos"))
            continue
        if best is not None and not all_means:
            tried.append(MeansTried(means, MeansStatus.NOT_TRIED, f"{best.means} works"))
            continue
        say(f"a forced length by {means}")
        found = _try_means(prober, st, means, engine, request.dialect, eos, eos_source)
        tried.append(found)
        if found.status in (MeansStatus.PROVEN, MeansStatus.KNOWN) and (
            best is None or USABLE.index(found.status) < USABLE.index(best.status)
        ):
            best = found
    chosen = _choose(prober, st, wanted, best, tried, eos)
    usage = first.rec.usage_completion_tokens is not None
    if (
        st.merged is None
        and not first.counted
        and not adapted.coalesced_chunks
        # (a Responses stream's terminal event repeats the whole text: a lost delta shows there)
        and request.dialect != Dialect.RESPONSES
        and (usage or chosen)
    ):
        say("whether a token with no text sends a chunk")
        _textless(prober, st, chosen, eos, special.bos, st.push_status)
    deterministic: bool | None = None
    use_reference = reference == "on"
    if (not chosen and reference == "auto") or reference == "on":
        say("whether greedy replies repeat")
        deterministic = _deterministic(prober, st)
        use_reference = reference == "on" or bool(deterministic)
    # Any probe whose body ended cleanly after its stop reason shows a server that sends no
    # terminal marker (a gateway that cuts streams may add one to some: not to all).
    st.done_marker_dropped = prober.no_terminal > 0 and request.done_marker
    return _contract(
        request=request,
        adapted=adapted,
        owner=owner,
        engine=engine,
        st=st,
        tried=tried,
        chosen=chosen,
        wanted=wanted,
        eos=eos,
        eos_source=eos_source,
        deterministic=deterministic,
        use_reference=use_reference,
        probes=prober.sent,
        seconds=time.perf_counter() - t0,
    )


def _transient(rec: StreamRecord) -> bool:
    """A failure worth asking again for: the server's (5xx, a cut, a stall), not a wrong
    target's (no connection, 401, 404)."""
    return rec.outcome in (
        Outcome.HTTP_5XX,
        Outcome.TRUNCATED,
        Outcome.STALLED,
        Outcome.ERROR_EVENT,
        Outcome.TIMEOUT,
    )


def _candidates(wanted: Forcing | None, ignore_eos_allowed: bool) -> Forcing:
    if wanted is not None:
        return wanted
    return tuple(m for m in MEANS_ORDER if ignore_eos_allowed or m != ForcedLength.IGNORE_EOS)


def _choose(
    prober: _Prober,
    st: _State,
    wanted: Forcing | None,
    best: MeansTried | None,
    tried: list[MeansTried],
    eos: tuple[int, ...],
) -> Forcing:
    """The means a run forces its length with: the user's; else the first shown to work (or
    known to); else, where no probe could show any means' effect (a model that never stops on
    its own, and no end-of-sequence id to push), ``ignore_eos`` where the server took it (the
    default), else every means the server accepted, together: the one it honours is enough,
    and a server that ignores the rest loses nothing."""
    if wanted is not None:
        return wanted
    if best is not None:
        return (best.means,)
    unproven = tuple(t.means for t in tried if t.status == MeansStatus.UNPROVEN)
    if ForcedLength.IGNORE_EOS in unproven:
        # The default a run sends anyway: kept alone (what most servers that take it honour).
        return (ForcedLength.IGNORE_EOS,)
    if len(unproven) > 1:
        together = prober.send(replace(st.base, forced=unproven, eos_token_ids=eos))
        if together.refused or not together.reached(PROBE_TOKENS):
            return unproven[:1]
    return unproven


def _note_merged(st: _State, seen: _Seen, n: int) -> None:
    """A whole stream whose chunks are not one token each, with no per-chunk count: its usage
    counts more tokens than arrived, or more chunks arrived than it ran tokens."""
    if st.merged is not None or seen.counted or not seen.whole():
        return
    usage = seen.rec.usage_completion_tokens
    positions = seen.rec.tokens
    if usage is not None and positions < usage <= n:
        st.merged = (
            f"a whole stream's usage counts {usage} tokens for {positions} chunks (a token with "
            "no text sends no chunk, or several share one)"
        )
    elif seen.reached(n) and positions > (usage if usage is not None else n):
        st.merged = (
            f"a whole stream of {usage if usage is not None else n} tokens came in "
            f"{positions} chunks (chunks that carry no token)"
        )


def _try_means(
    prober: _Prober,
    st: _State,
    means: ForcedLength,
    engine: Engine | None,
    dialect: str,
    eos: tuple[int, ...],
    eos_source: str,
) -> MeansTried:
    """One means, up to :data:`TRIES` times while the answer stops on its own."""
    n = PROBE_TOKENS
    if engine is not None and dialect in engine.no_forced_length:
        return MeansTried(
            means,
            MeansStatus.KNOWN_IGNORED,
            f"{engine.name}'s {st.base.path} is known to ignore a forced length (docs/servers.md)",
        )
    if engine is not None and means in engine.ignores.get(dialect, frozenset()):
        return MeansTried(
            means,
            MeansStatus.KNOWN_IGNORED,
            f"{engine.name} takes it and is known to ignore it (docs/servers.md)",
        )
    if means == ForcedLength.LOGIT_BIAS:
        if not eos:
            return MeansTried(
                means,
                MeansStatus.UNAVAILABLE,
                "no end-of-sequence ids: give --eos-token-id or --tokenizer",
            )
        if st.push_status is not None:
            return st.push_status
    req = replace(st.base, forced=(means,), eos_token_ids=eos)
    if st.push and means != ForcedLength.LOGIT_BIAS:
        req = _pushed(req, eos)
    stops: list[_Seen] = []
    failed: _Seen | None = None
    for _ in range(TRIES):
        seen = prober.send(req)
        if seen.refused:
            return MeansTried(means, MeansStatus.REJECTED, f"refused: {seen.rec.error[:160]}")
        if seen.reached(n):
            _note_merged(st, seen, n)
            return _reached(means, st, engine, dialect, eos_source)
        if seen.stopped(n):
            stops.append(seen)
        else:
            failed = seen
    if stops:
        last = stops[-1]
        return MeansTried(
            means,
            MeansStatus.IGNORED,
            f"accepted, but the answer stopped ({last.rec.finish_reason!r}) after "
            f"{last.count} of {n} tokens, {len(stops)} of {TRIES} times",
        )
    assert failed is not None
    return MeansTried(means, MeansStatus.FAILED, _describe(failed.rec))


def _reached(
    means: ForcedLength,
    st: _State,
    engine: Engine | None,
    dialect: str,
    eos_source: str,
) -> MeansTried:
    """A means whose probe ran to its length: proven, known or unproven."""
    n = PROBE_TOKENS
    if st.natural:
        return MeansTried(
            means,
            MeansStatus.PROVEN,
            f"ran to {n} tokens where the request without it stopped after {st.first.count}",
        )
    if st.push:
        if means == ForcedLength.LOGIT_BIAS:
            how = f"a bias of -{PUSH:g} on the end-of-sequence ids lets it run to {n} tokens"
        else:
            how = f"ran to {n} tokens against a bias of +{PUSH:g} on the end-of-sequence ids"
        return MeansTried(
            means,
            MeansStatus.PROVEN,
            f"{how}, where +{PUSH:g} alone ends the answer at once",
        )
    if engine is not None and means in engine.honours.get(dialect, frozenset()):
        return MeansTried(
            means,
            MeansStatus.KNOWN,
            f"ran to {n} tokens; {engine.name} is known to honour it (the model never stopped "
            "on its own, so no probe could show it)",
        )
    return MeansTried(
        means,
        MeansStatus.UNPROVEN,
        f"ran to {n} tokens, but the model never stopped on its own, so no probe could show "
        "its effect (--eos-token-id or --tokenizer lets a bias on the end-of-sequence ids show it)",
    )


def _textless(
    prober: _Prober,
    st: _State,
    means: Forcing,
    eos: tuple[int, ...],
    bos: int | None,
    push_refused: MeansTried | None,
) -> None:
    """A forced-length stream of tokens with no text, where it can be asked (the
    beginning-of-sequence token pushed: its text is empty), else a longer one: a server that
    sends no chunk for such a token (transformers serve) shows a usage above its chunks."""
    req = replace(st.base, forced=means, eos_token_ids=eos)
    refused = push_refused is not None and push_refused.status == MeansStatus.REJECTED
    has_usage = st.first.rec.usage_completion_tokens is not None
    if has_usage and bos is not None and bos not in eos and not refused:
        seen = prober.send(_pushed(req, (bos,)))
        if seen.reached(PROBE_TOKENS):
            _note_merged(st, seen, PROBE_TOKENS)
            return
        if not seen.refused:
            return
    seen = prober.send(replace(req, max_tokens=LONG_PROBE_TOKENS))
    if seen.reached(LONG_PROBE_TOKENS):
        _note_merged(st, seen, LONG_PROBE_TOKENS)


def _deterministic(prober: _Prober, st: _State) -> bool | None:
    """Whether two greedy, seeded replies to the same prompt are the same text (None: no
    second whole reply to compare)."""
    if st.second_text is None:
        again = prober.send(st.base)
        if not again.whole():
            return None
        st.second_text = again.text
    return st.second_text == st.first.text


def _failed(
    request: RequestOptions,
    adapted: RequestOptions,
    owner: str | None,
    seen: _Seen,
    prober: _Prober,
    t0: float,
    usage_refused: str,
) -> Contract:
    """No stream answered: what the last probe got (the preflight's diagnosis says the rest)."""
    return Contract(
        dialect=request.dialect,
        path=adapted.path,
        model=adapted.model,
        engine=owner,
        forced=adapted.forced,
        done_marker=request.done_marker,
        usage_refused=bool(usage_refused),
        probes=prober.sent,
        seconds=time.perf_counter() - t0,
        failure=_describe(seen.rec),
        extra={"record": seen.rec},
    )


def _contract(
    *,
    request: RequestOptions,
    adapted: RequestOptions,
    owner: str | None,
    engine: Engine | None,
    st: _State,
    tried: list[MeansTried],
    chosen: Forcing,
    wanted: Forcing | None,
    eos: tuple[int, ...],
    eos_source: str,
    deterministic: bool | None,
    use_reference: bool,
    probes: int,
    seconds: float,
) -> Contract:
    """The findings as a contract: adaptations, notes and the truth."""
    first = st.first
    terminal = first.rules.terminal
    adaptations: list[Adaptation] = []
    notes: list[str] = []
    if st.usage_refused:
        adaptations.append(
            Adaptation(
                "usage",
                False,
                "--no-usage",
                f"the server refuses stream_options.include_usage ({st.usage_refused[:120]})",
            )
        )
    if st.done_marker_dropped:
        adaptations.append(
            Adaptation(
                "done_marker",
                False,
                "--no-done-marker",
                f"streams end with the body after their stop reason, not with {terminal} (a body "
                "that ends before a stop reason reads truncated)",
            )
        )
    default: Forcing = (ForcedLength.IGNORE_EOS,) if request.ignore_eos else ()
    if wanted is None and chosen != default:
        adaptations.append(
            Adaptation(
                "forced_length",
                forcing_text(chosen),
                f"--forced-length {forcing_text(chosen)}",
                _why_forced(chosen, tried),
            )
        )
    if ForcedLength.LOGIT_BIAS in chosen and eos and eos_source != "--eos-token-id":
        adaptations.append(
            Adaptation(
                "eos_token_id",
                eos,
                "--eos-token-id " + ",".join(str(i) for i in eos),
                f"the model's end-of-sequence ids ({eos_source})",
            )
        )
    counted = (
        (engine.count_name if engine is not None and engine.count_name else "the server's count")
        if first.counted
        else None
    )
    merged = st.merged is not None and counted is None and request.dialect != Dialect.RESPONSES
    if merged and not request.coalesced_chunks:
        adaptations.append(
            Adaptation(
                "coalesced_chunks",
                True,
                "--coalesced-chunks",
                f"{st.merged} and the server gives no per-chunk count: tokens are counted by the "
                "server's usage where it gives one, never by chunks",
            )
        )
    if use_reference and not chosen:
        lead = (
            "the run does not force its length (--forced-length none)"
            if wanted == ()
            else "no forced length works here"
        )
        adaptations.append(
            Adaptation(
                "reference",
                "on",
                "--reference on",
                f"{lead}, and greedy replies repeat: the run records each prompt's reply before "
                "the load and checks every ordinary stop against it",
            )
        )
    elif deterministic is False:
        notes.append(
            "two greedy, seeded replies to the same prompt differed: reference replies cannot "
            "stand in for a forced length here"
        )
    if first.rec.usage_completion_tokens is None and not st.usage_refused:
        notes.append("the server sends no usage")
    usage = first.rec.usage_completion_tokens is not None
    truth = Truth.of(
        forced=chosen,
        reference="greedy replies recorded before the load" if use_reference else None,
        counted=counted,
        coalesced=merged or adapted.coalesced_chunks,
        usage=usage,
        done_marker=not st.done_marker_dropped and request.done_marker,
        terminal=terminal,
        no_forcing=_why_not_forced(tried, deterministic),
    )
    return Contract(
        dialect=request.dialect,
        path=adapted.path,
        model=adapted.model,
        engine=owner,
        forced=chosen,
        means=tuple(tried),
        done_marker=not st.done_marker_dropped and request.done_marker,
        usage=usage,
        usage_refused=bool(st.usage_refused),
        counted=counted,
        merged=merged,
        eos_ids=eos,
        eos_source=eos_source,
        natural_stop=st.natural,
        deterministic=deterministic,
        reference=use_reference,
        adaptations=tuple(adaptations),
        notes=tuple(notes),
        probes=probes,
        seconds=seconds,
        truth=truth,
    )


def _why_forced(chosen: Forcing, tried: list[MeansTried]) -> str:
    """Why the run forces its length the way it does (the means' own detail, and the ones
    that did not work)."""
    before = [
        f"{t.means}: {t.status}"
        for t in tried
        if t.means not in chosen and t.status not in (*USABLE, MeansStatus.NOT_TRIED)
    ]
    before_text = f" ({'; '.join(before)})" if before else ""
    if not chosen:
        known = {t.detail for t in tried if t.status == MeansStatus.KNOWN_IGNORED}
        if len(known) == 1 and all(t.status == MeansStatus.KNOWN_IGNORED for t in tried):
            return f"no means forces the length here: {known.pop()}"
        return f"no means forces the length here{before_text}"
    if len(chosen) > 1:
        return (
            "each was accepted and ran to the length, but the model never stopped on its own, "
            "so no probe could show which the server honours: every one is sent (one that "
            f"works is enough; --eos-token-id or --tokenizer lets a probe tell){before_text}"
        )
    found = next(t for t in tried if t.means == chosen[0])
    return f"{found.status}: {found.detail}{before_text}"


def _why_not_forced(tried: list[MeansTried], deterministic: bool | None) -> str:
    """Why a silent stop cannot be seen (no means worked, and no reference replies)."""
    parts = [
        f"{t.means} {t.status}" for t in tried if t.status not in (*USABLE, MeansStatus.NOT_TRIED)
    ]
    text = "no forced length works here" + (f" ({', '.join(parts)})" if parts else "")
    if deterministic is False:
        text += ", and greedy replies differ (no reference replies)"
    return text
