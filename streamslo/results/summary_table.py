"""The plain-text summary a run prints (the CLI prints it; nothing here prints)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, cast

from streamslo.results.schema import LatencySummary, RunJson, SummaryJson
from streamslo.stream.error_groups import with_similar
from streamslo.stream.outcome import EXCLUDED_OUTCOMES, OUTCOMES

__all__ = ["CheckLine", "format_summary", "integrity_warnings", "run_warnings", "truth_lines"]


class CheckLine(Protocol):
    """What the summary prints of a checked threshold (``streamslo.slo.thresholds.CheckResult``)."""

    @property
    def passed(self) -> bool: ...

    @property
    def observed(self) -> float | None: ...

    @property
    def metric(self) -> str: ...

    @property
    def expression(self) -> str: ...


def _ms(v: Any) -> str:
    return "-" if v is None else f"{v:,.1f}"


def _clip(text: str, width: int = 100) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _rate(v: Any) -> str:
    return "no data" if v is None else f"{v * 100:.3f} %"


def integrity_warnings(run: RunJson, skipped_rows: int | None = None) -> list[str]:
    """What a reader must know about the results themselves before any figure: a run that was
    not finalized, was killed, lost a worker, lost rows to write errors, or has damaged rows.

    Args:
        run: run.json.
        skipped_rows: damaged rows found by the loader (default: run.json's count).
    """
    from streamslo.results.layout import is_complete

    out = []
    if run and not is_complete(run):
        out.append(
            "INCOMPLETE RUN: run.json says complete: false (killed, or still running); "
            "finalize it with `streamslo finalize DIR`"
        )
    if run.get("killed"):
        code = run.get("locust_exit_code")
        how = f" (locust exit code {code})" if code is not None else ""
        out.append(
            f"KILLED RUN{how}: its figures cover what was written until {run.get('end') or 'its last record'}"
        )
    lost = int(run.get("rows_unwritten") or 0)
    if run.get("write_errors") or lost:
        out.append(
            f"WRITE ERRORS: {run.get('write_errors') or 0} failed writes, each retried "
            f"(last: {(run.get('writers') or {}).get('last_error')}); {lost} rows never written"
        )
    out.extend(_relay_warnings(run))
    skipped = run.get("skipped_rows") if skipped_rows is None else skipped_rows
    if skipped:
        out.append(f"DAMAGED ROWS: {skipped} rows of streams.csv were skipped")
    return out


def _relay_warnings(run: Mapping[str, Any]) -> list[str]:
    """Lost workers, and worker records the master could not read (distributed runs)."""
    out = []
    for w in run.get("lost_workers") or ():
        n = w.get("streams_in_flight")
        in_flight = "its streams in flight" if n is None else f"its {n} streams in flight"
        out.append(
            f"LOST WORKER {w.get('worker')} at {w.get('at')} (last heard from {w.get('last_seen') or 'never'}): "
            f"the {w.get('records', 0)} streams it sent are here; {in_flight} then, and any that "
            "ended in its last second, are not"
        )
    relay = run.get("relay") or {}
    if run.get("lost_workers") is None and relay.get("error"):
        out.append(f"UNKNOWN WORKERS: {relay['error']}: whether a worker was lost is not known")
    rejected = relay.get("rejected_records")
    if rejected:
        out.append(
            f"UNREADABLE BATCHES: {rejected} records sent by workers could not be read (see locust.log)"
        )
    return out


def run_warnings(run: RunJson) -> list[str]:
    """An invalid run (saturated generator), then :func:`integrity_warnings`."""
    out = (
        [
            f"INVALID RUN: {run.get('invalid_reason')}: its latencies measure the load "
            "generator, not the server; rerun with fewer users or more --processes (or pass "
            "--allow-invalid)"
        ]
        if not run.get("valid", True)
        else []
    )
    dropped = run.get("dropped_iterations")
    if dropped:  # k6's dropped_iterations: the asked load was not sent (docs/scenarios.md)
        by = ", ".join(
            f"{k} {v}" for k, v in (run.get("dropped_iterations_by_scenario") or {}).items()
        )
        out.append(
            f"DROPPED ITERATIONS: {dropped} arrivals found no free VU and were not sent ({by}): "
            "raise maxVUs (or --max-concurrency)"
        )
    return out + integrity_warnings(run)


def _replay_lines(summary: SummaryJson) -> list[str]:
    """Schedule lag, client hang-ups, the prefix cache and the freed check (when they apply)."""
    out = []
    lag = summary.get("schedule_lag_ms")
    if lag:
        out.append(
            f"schedule lag  p50 {_ms(lag['p50'])} ms   p99 {_ms(lag['p99'])} ms   max {_ms(lag['max'])} ms"
            f"   ({lag['count']} scheduled streams)"
        )
    cc = summary.get("client_cancelled")
    if cc:
        share = cc.get("fraction")
        out.append(
            f"client hang-ups  {cc['count']} streams ({_rate(share)} of requests), in no rate"
        )
    ss = summary.get("sessions")
    if ss:
        e2e = ss["e2e_ms"]
        out.append(
            f"sessions  {ss['sessions']} ended, {ss['whole']} whole "
            f"({_rate(ss['success_rate'])})   e2e p50 {_ms(e2e['p50'])} ms, p99 {_ms(e2e['p99'])} ms"
            f"   steps {ss['steps_mean']:.1f} a session, depth up to {ss['max_depth']}"
            + (
                f"   tool time {_rate(ss['tool_share'])}"
                if ss.get("tool_share") is not None
                else ""
            )
        )
        if ss.get("steps_not_sent"):
            out.append(
                f"  broken sessions were aborted: {ss['steps_not_sent']} later steps not sent "
                "(--on-broken-step continue sends them)"
            )
    pc = summary.get("prefix_cache")
    if pc:
        hit, miss = pc["ttft_ms_hit"], pc["ttft_ms_miss"]
        out.append(
            f"prefix cache  hit rate {_rate(pc['hit_rate'])} of prompt tokens   streams with a hit "
            f"{pc['streams_hit']}/{pc['streams']}   TTFT p50 hit {_ms(hit['p50'])} ms, miss {_ms(miss['p50'])} ms"
        )
    freed = summary.get("server_freed")
    if freed:
        verdict = {True: "PASS", False: "FAIL", None: "n/a "}[freed.get("passed")]
        detail = freed.get("reason") or (
            f"{freed.get('gauge')} back at {freed.get('baseline'):g} "
            f"after {freed.get('waited_s'):g} s"
        )
        out.append(f"  {verdict}  server freed hung-up streams: {detail}")
    return out


def _connect_error_rate(counts: Mapping[str, int]) -> float | None:
    """``connect_error`` over all requests not cancelled (docs/metrics.md), from the counts."""
    counted = sum(v for k, v in counts.items() if k not in EXCLUDED_OUTCOMES)
    return counts.get("connect_error", 0) / counted if counted else None


def truth_lines(truth: Mapping[str, object] | None) -> list[str]:
    """What the run could check, one line each, and the ok streams whose ordinary stop it could
    not check (``summary.json``'s ``truth``)."""
    from streamslo.stream.truth import Truth

    found = Truth.from_dict(truth)
    if found is None or truth is None:
        return []
    head = "checks" if found.learned else "checks (as the flags ask; not learned from the server)"
    out = [f"{head:<10}" + (found.lines()[0])]
    out += [f"{'':<10}{line}" for line in found.lines()[1:]]
    unchecked = truth.get("unchecked_stops")
    if unchecked:
        out.append(
            f"{'':<10}!! {unchecked:,} of {truth.get('ok_streams', 0):,} ok streams ended with an "
            "ordinary stop this run could not check (each may have been cut short)"
        )
    refs = truth.get("reference_replies")
    if isinstance(refs, Mapping) and refs.get("diverged"):
        out.append(
            f"{'':<10}{refs['diverged']:,} answers differed from their reference reply (greedy "
            "decoding is not repeatable under this load): their silent stops could not be checked"
        )
    return out


def _requests_line(summary: SummaryJson) -> str:
    """``requests 119 (109 counted, 10 cancelled by the run)   requests/s 1.9 (counted) ...``:
    the rates and requests/s are over the counted requests, never over cancelled ones."""
    n = summary["requests"]
    cancelled = summary.get("cancelled")
    split = (
        f" ({n - cancelled:,} counted, {cancelled:,} cancelled by the run, in no rate)"
        if cancelled
        else ""
    )
    return (
        f"requests {n:,}{split}   requests/s {_ms(summary.get('requests_per_s'))}"
        f"{' (counted)' if cancelled else ''}   tokens/s {_ms(summary.get('tokens_per_s'))}"
    )


def format_summary(summary: SummaryJson, checks: Sequence[CheckLine], run: RunJson) -> str:
    """A table of outcomes, rates, latencies and threshold verdicts."""
    lines = [f"!! {line}" for line in run_warnings(run)]
    lines += [f"hint: {line}" for line in summary.get("server_hints") or ()]
    lines.append(_requests_line(summary))
    counts = summary["outcomes"]
    lines.append(
        "outcomes  " + "  ".join(f"{o}={counts.get(o, 0)}" for o in OUTCOMES if counts.get(o, 0))
    )
    lines.append(
        f"rates     truncation {_rate(summary['truncation_rate'])}   5xx {_rate(summary['http_5xx_rate'])}   "
        f"connect errors {_rate(_connect_error_rate(counts))}   errors {_rate(summary['error_rate'])}"
    )
    lines.extend(truth_lines(summary.get("truth")))
    lines.append(
        f"{'latency (ms)':<14}{'p50':>10}{'p90':>10}{'p95':>10}{'p99':>10}{'max':>10}{'count':>9}"
    )
    for name in (
        "ttft_ms",
        "ttfo_ms",
        "ttftc_ms",
        "itl_ms",
        "tpot_ms",
        "e2e_ms",
        "ttft_sched_ms",
        "e2e_sched_ms",
    ):
        st = cast("LatencySummary | None", summary.get(name))
        if not st:
            continue
        lines.append(
            f"{name:<14}{_ms(st['p50']):>10}{_ms(st['p90']):>10}{_ms(st['p95']):>10}{_ms(st['p99']):>10}{_ms(st['max']):>10}{st['count']:>9}"
        )
    lines.extend(_replay_lines(summary))
    top = summary.get("top_errors") or {}
    if top:
        # The one grouping rule (streamslo.stream.error_groups): outcome, cause, the text with
        # its numbers masked; each group its most frequent text and the group's count.
        lines.append("top errors (grouped by outcome, cause and text with numbers masked)")
        for outcome, items in top.items():
            for item in items[:3]:
                cause = item.get("cause")
                head = f"{outcome} ({cause})" if cause else outcome
                text = with_similar(str(item["error"]), int(item.get("texts") or 1))
                lines.append(f"  {head:<36}{item['count']:>8,}  {_clip(text)}")
    if summary.get("reasoning_tokens") or summary.get("tool_tokens"):
        lines.append(
            f"tokens    reasoning {summary.get('reasoning_tokens', 0)}   tool calls {summary.get('tool_tokens', 0)}"
        )
    if checks:
        lines.append("thresholds")
        for c in checks:
            mark = "PASS" if c.passed else "FAIL"
            seen = "no data" if c.observed is None else f"{c.observed:.6g}"
            lines.append(f"  {mark}  {c.metric:<24} {c.expression:<16} observed {seen}")
    return "\n".join(lines)
