"""Before any load: learn the server's stream contract, adapt the run to it, check the target,
record reference replies (docs/servers.md, "What a run learns before the load"; docs/cli.md,
``--no-adapt``, ``--no-preflight``).

:func:`prepare_requests` is the preflight glue of :mod:`streamslo.run.execute`:

1. the contract probes (:func:`streamslo.contract.learn`) on the run's own request; each
   adaptation (a run option the user did not set) is applied and printed in one line;
2. the preflight (:func:`streamslo.run.preflight.preflight`) with the adapted request, one
   request per protocol in use: a wrong target stops the run here with exit 2;
3. where the run uses reference replies, each prompt's reply from the idle server;
4. the :class:`~streamslo.stream.truth.Truth` the run can check, for ``run.json`` and the
   summary.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from streamslo.contract import Contract, learn
from streamslo.contract.probe import PROBE_LIMITS, models_and_owner
from streamslo.contract.reference import Recorded, record_references
from streamslo.run.config import RunConfig
from streamslo.run.preflight import (
    PREFLIGHT_HEADER,
    PreflightFailed,
    PreflightResult,
    judge,
    parse_target,
    preflight,
)
from streamslo.stream.envelope import WSEnvelope
from streamslo.stream.timing import StreamRecord, Wire
from streamslo.stream.truth import Forcing, Truth
from streamslo.transport.common import ClientLimits
from streamslo.workload.requests import RequestOptions, Workload
from streamslo.workload.scenarios import from_wire

__all__ = ["Prepared", "prepare_requests", "protocols_used", "truth_of_options"]


@dataclass(frozen=True)
class Prepared:
    """What the run sends, as the preflight left it."""

    cfg: RunConfig
    """The run's configuration with the adaptations applied."""
    preflight: list[dict[str, object]] | None
    """``run.json``'s ``preflight`` (None: ``--no-preflight``)."""
    contract: Contract | None
    """What the probes learned (None: not asked)."""
    truth: Truth
    references: Recorded | None = None


def protocols_used(cfg: RunConfig) -> list[Wire]:
    """The protocols the run's users speak (its scenarios' mixes included), in a fixed order."""
    used = {"sse", "ws"} if cfg.protocol == "mixed" else {cfg.protocol}
    if cfg.scenarios:
        used = set()
        for sc in from_wire(cfg.scenarios):
            mix = dict(sc.protocol) if sc.protocol is not None else {cfg.protocol: 1.0}
            used |= (
                {"sse", "ws"}
                if "mixed" in mix
                else {p for p, w in mix.items() if w and p in ("sse", "ws")}
            )
    return [w for w in Wire if w in used] or [Wire.SSE]


def _say(cfg: RunConfig, text: str) -> None:
    if not cfg.quiet:
        print(f"streamslo run: {text}", file=sys.stderr)


def truth_of_options(cfg: RunConfig) -> Truth:
    """What a run whose flags were taken as given asks to check (nothing learned: the server may
    not honour it)."""
    return RequestOptions.of(cfg).truth_asked()


def _wanted(cfg: RunConfig) -> Forcing | None:
    """The forced length the user set, or None (the probes choose)."""
    if "forced_length" in cfg.given and cfg.forced_length not in ("auto", ""):
        return RequestOptions.of(cfg).forced
    return None


def _learn(cfg: RunConfig) -> Contract:
    """The contract probes, on the run's request with its model resolved. A first probe that
    finds the target wrong stops the run as the preflight would (nothing more is sent).

    Raises:
        PreflightFailed: the target is wrong.
    """
    target = parse_target(cfg.host, {**cfg.headers.as_dict(), PREFLIGHT_HEADER: "1"}, cfg.insecure)
    request = RequestOptions.of(cfg)
    _, models, owner = models_and_owner(target)
    if request.model is None and models:
        request = replace(request, model=models[0])
    contract = learn(
        target,
        request,
        owner=owner,
        wanted=_wanted(cfg),
        ignore_eos_allowed=cfg.ignore_eos,
        eos_ids=cfg.eos_token_id,
        tokenizer=cfg.tokenizer,
        reference=cfg.reference,
        limits=_probe_limits(cfg),
    )
    rec = contract.extra.get("record")
    if not contract.learned and isinstance(rec, StreamRecord):
        try:
            judge(
                target,
                Wire.SSE,
                rec,
                request,
                models,
                auth_fatal=not (cfg.master and not cfg.headers),
            )
        except PreflightFailed as exc:
            raise _masked(cfg, exc) from None
    return contract


def _probe_limits(cfg: RunConfig) -> ClientLimits:
    """The contract probes' time limits: the run's own, within the preflight's to connect."""
    return ClientLimits(
        stall_timeout=cfg.stall_timeout,
        request_timeout=min(cfg.request_timeout, 60.0),
        connect_timeout=PROBE_LIMITS.connect_timeout,
        tls_timeout=PROBE_LIMITS.tls_timeout,
        first_token_timeout=cfg.first_token_timeout or None,
    )


def _masked(cfg: RunConfig, exc: PreflightFailed) -> PreflightFailed:
    """The failure with any credential the server echoed masked, and what was not sent."""
    hide = cfg.headers.redactor()
    d = replace(exc.diagnosis, cause=hide(exc.diagnosis.cause))
    return PreflightFailed(
        exc.protocol, exc.url, d, "nothing else was sent; --no-preflight skips this check"
    )


def _adapt(cfg: RunConfig, contract: Contract) -> RunConfig:
    """``cfg`` with the contract's adaptations of the options the user did not set, each said
    in one line."""
    changes: dict[str, Any] = {
        a.option: a.value for a in contract.adaptations if a.option not in cfg.given
    }
    head = (
        f"learned the server's stream contract in {contract.probes} requests "
        f"({contract.seconds:.1f} s)"
    )
    _say(cfg, head + (": the run adapts" if changes else ": no adaptation needed"))
    for a in contract.adaptations:
        if a.option in cfg.given:
            _say(cfg, f"  (kept your {a.option.replace('_', '-')}: the probes suggest {a.flag})")
        else:
            _say(cfg, f"  {a.line()}")
    for note in contract.notes:
        _say(cfg, f"  note: {note}")
    return replace(cfg, **changes) if changes else cfg


def _preflight_results(cfg: RunConfig) -> list[PreflightResult]:
    """The preflight: one short request per protocol in use.

    Raises:
        PreflightFailed: the target is wrong (exit 2, with the cause and the fix).
    """
    envelope = WSEnvelope.from_options(
        cfg.ws_request_template, cfg.ws_chunk_path, cfg.ws_done_message
    )
    try:
        # A master without credentials of its own may have workers that bring theirs.
        return preflight(
            cfg.host,
            protocols_used(cfg),
            RequestOptions.of(cfg),
            headers=cfg.headers.as_dict(),
            insecure=cfg.insecure,
            envelope=envelope,
            auth_fatal=not (cfg.master and not cfg.headers),
        )
    except PreflightFailed as exc:
        # The server's own words go to the terminal: mask any credential it echoed.
        raise _masked(cfg, exc) from None


def _preflight_json(cfg: RunConfig, results: Sequence[PreflightResult]) -> list[dict[str, object]]:
    """``run.json``'s ``preflight``, each note said on the terminal."""
    hide = cfg.headers.redactor()
    for note in results[0].adapted if results else ():
        _say(cfg, note)
    out: list[dict[str, object]] = []
    for r in results:
        if r.diagnosis is not None:
            error = f" ({hide(r.record.error)})" if r.record.error else ""
            _say(cfg, f"{r.describe()}{error}; the run goes on")
        out.append(
            {
                "protocol": r.protocol,
                "url": r.url,
                "outcome": r.record.outcome,
                "cause": r.record.cause,
                "status": r.record.status,
                "error": hide(r.record.error) or None,
                "seconds": round(r.seconds, 3),
                "engine": r.engine,
                "adapted": list(r.adapted),
            }
        )
    return out


def _references(cfg: RunConfig, out: Path) -> tuple[RunConfig, Recorded]:
    """Each prompt's reply from the idle server, kept in ``DIR/references.json`` and handed to
    the Locust processes."""
    workload = Workload(cfg)
    prompts = workload.reference_prompts()
    largest = workload.largest_max_tokens()
    target = parse_target(cfg.host, {**cfg.headers.as_dict(), PREFLIGHT_HEADER: "1"}, cfg.insecure)
    request = RequestOptions.of(cfg)
    if request.model is None:
        _, models, _ = models_and_owner(target)
        request = replace(request, model=models[0] if models else None)
    _say(
        cfg, f"recording {len(prompts)} reference replies (greedy, one at a time, {largest} tokens)"
    )
    limits = ClientLimits(stall_timeout=cfg.stall_timeout, request_timeout=cfg.request_timeout)
    recorded = record_references(target, request, prompts, largest, limits)
    if recorded.missing:
        _say(
            cfg,
            f"  {len(recorded.missing)} of {len(prompts)} prompts got no whole reply "
            f"({recorded.missing[0]}): their streams' silent stops cannot be checked",
        )
    keys = {p: recorded.references.get(p) for p in prompts}
    (out / "references.json").write_text(
        json.dumps(
            {
                "max_tokens": largest,
                "replies": [{"prompt": p, "reply": r} for p, r in keys.items()],
                "missing": list(recorded.missing),
            },
            indent=1,
            ensure_ascii=False,
        )
        + "\n",
        encoding="utf-8",
    )
    return replace(cfg, reference_replies=recorded.references.to_json()), recorded


def prepare_requests(cfg: RunConfig, out: Path) -> Prepared:
    """Learn, adapt, check the target and record references, before any load.

    Args:
        cfg: the run's configuration.
        out: the results directory (``references.json`` goes there).

    Raises:
        PreflightFailed: the target is wrong (exit 2).
    """
    if not cfg.preflight:
        return Prepared(cfg, None, None, truth_of_options(cfg))
    contract = _learn(cfg) if cfg.adapt else None
    if contract is not None and contract.learned:
        cfg = _adapt(cfg, contract)
    results = _preflight_results(cfg)  # a wrong target: exit 2 here
    preflight_json = _preflight_json(cfg, results)
    recorded = None
    if cfg.reference == "on" and not cfg.sessions and not cfg.trace:
        cfg, recorded = _references(cfg, out)
    if contract is not None and contract.learned and contract.truth is not None:
        truth = contract.truth
        if recorded is not None and not contract.forced:
            truth = replace(
                truth,
                silent_stop=f"reference replies ({len(recorded.references)} prompts, greedy)",
                why_not={k: v for k, v in truth.why_not.items() if k != "silent_stop"},
            )
    else:
        truth = truth_of_options(cfg)
    for line in truth.lines():
        _say(cfg, ("this run " if truth.learned else "this run (as asked, not learned) ") + line)
    return Prepared(cfg, preflight_json, contract, truth, recorded)
