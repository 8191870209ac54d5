"""The before/after maths of the report: pure functions from loaded runs to the report model.

Every headline number comes from :mod:`streamslo.figures.metrics` (``summarize``, ``trend_samples``,
``rate_value``, ``LatencyStats.of``: numpy ``linear`` percentiles over pooled samples), so the
report, the run summary and ``verify`` agree to the last digit. What this module adds:

- confidence intervals on each percentile's and rate's ``after - before``, by a bootstrap that
  resamples whole streams (:mod:`streamslo.reports.bootstrap`), seeded;
- outcome counts by cause, overall and by protocol;
- a summary of the server-side evidence.

Nothing here prints or writes files.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence
from typing import Any, cast

import numpy as np
import pandas as pd

from streamslo import __version__
from streamslo.figures.metrics import (
    LatencyStats,
    counted_mask,
    counter_value,
    latency_pool,
    rate_value,
    summarize,
    trend_samples,
)
from streamslo.reports.bootstrap import (
    Clustered,
    bootstrap_means,
    bootstrap_percentiles,
    difference_interval,
    resamples_for,
)
from streamslo.reports.failures import failure_groups
from streamslo.reports.glossary import change_word, glossary_terms, protocol_text
from streamslo.reports.load import LoadedRun, comparability_warnings
from streamslo.reports.model import (
    BootstrapSettings,
    Difference,
    GlossaryEntry,
    LatencyComparison,
    OutcomeCount,
    RateComparison,
    Report,
    RunInfo,
    ScalarComparison,
    ServerSummary,
    SessionSummary,
    TruthBanner,
    VerdictRow,
)
from streamslo.reports.server_series import counter_increase, is_counter, moved_samples, run_time
from streamslo.results.schema import SummaryJson
from streamslo.results.summary_table import integrity_warnings
from streamslo.stream.outcome import OUTCOMES

__all__ = [
    "CI_PERCENTILES",
    "LATENCY_METRICS",
    "REPORT_RATES",
    "build_model",
    "clustered_rate",
    "clustered_samples",
    "latency_comparison",
    "outcome_counts",
    "rate_comparison",
    "run_info",
    "run_phrase",
    "server_summary",
    "session_summary_of",
    "truth_sentence",
]

#: Latency metrics the report shows, in order.
LATENCY_METRICS = ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms")
#: Shown too when a run saw reasoning or tool-call tokens: the first answer token.
ANSWER_METRICS = ("ttfo_ms",)


def _latency_metrics(runs: Sequence[LoadedRun]) -> tuple[str, ...]:
    """The latency metrics of these runs: :data:`LATENCY_METRICS`, and ``ttfo_ms`` when any run
    measured a first answer token apart from the first token (a reasoning or tool-calling model)."""
    for run in runs:
        s = run.streams
        if all(c in s.columns for c in ("reasoning_tokens", "tool_tokens")) and (
            (s["reasoning_tokens"].fillna(0) > 0).any() or (s["tool_tokens"].fillna(0) > 0).any()
        ):
            return (*LATENCY_METRICS, *ANSWER_METRICS)
    return LATENCY_METRICS


#: Percentiles whose before/after difference gets a confidence interval.
CI_PERCENTILES = (50, 90, 95, 99)
#: Rates the report shows (docs/outcomes.md).
REPORT_RATES = ("truncation_rate", "http_5xx_rate", "error_rate")


def clustered_samples(run: LoadedRun, metric: str) -> Clustered:
    """The samples of a latency metric with the stream each belongs to.

    The same samples as :func:`streamslo.figures.metrics.trend_samples` (the pool of streams that began
    and were not cancelled), tagged by stream so that the bootstrap can resample streams.
    """
    pool = latency_pool(run.streams).reset_index(drop=True)
    n = len(pool)
    if metric == "itl_ms":
        codes = pd.Index(pool["stream_id"]).get_indexer(run.gaps["stream_id"])
        keep = codes >= 0
        values = run.gaps["gap_ms"].to_numpy(dtype=float)[keep]
        return Clustered(values, codes[keep].astype(np.int64), n)
    if metric == "tpot_ms":
        tokens = pool["tokens"].astype("float64")
        ok = ((tokens > 1) & pool["ttft_ms"].notna() & pool["e2e_ms"].notna()).fillna(False)
        ok_np = ok.to_numpy(dtype=bool)
        vals = ((pool["e2e_ms"] - pool["ttft_ms"]) / (tokens - 1)).to_numpy(dtype=float)
        return Clustered(vals[ok_np], np.flatnonzero(ok_np).astype(np.int64), n)
    col = pool[metric].to_numpy(dtype=float)
    ok_np = ~np.isnan(col)
    return Clustered(col[ok_np], np.flatnonzero(ok_np).astype(np.int64), n)


def clustered_rate(run: LoadedRun, metric: str) -> Clustered:
    """0/1 indicators of a rate's numerator over its denominator's requests (docs/outcomes.md)."""
    s = run.streams
    counted = s[counted_mask(s)]
    if metric == "truncation_rate":
        units = latency_pool(counted)
        hit = units["outcome"] != "ok"
    elif metric == "http_5xx_rate":
        units, hit = counted, counted["outcome"] == "http_5xx"
    elif metric == "error_rate":
        units, hit = counted, counted["outcome"] != "ok"
    else:
        raise KeyError(metric)
    values = hit.fillna(True).to_numpy(dtype=float)
    return Clustered(values, np.arange(values.size, dtype=np.int64), values.size)


def _difference(
    metric: str,
    stat: str,
    before: float | None,
    after: float | None,
    boot_before: np.ndarray,
    boot_after: np.ndarray,
    resamples: int,
    confidence: float,
) -> Difference:
    delta = None if before is None or after is None else after - before
    low, high = (None, None)
    if delta is not None:
        low, high = difference_interval(boot_before, boot_after, confidence)
    significant = None if low is None or high is None else bool(low > 0 or high < 0)
    return Difference(
        stat,
        before,
        after,
        delta,
        low,
        high,
        resamples,
        significant,
        change_word(metric, delta, significant),
    )


def _seeds(seed: int, key: str) -> tuple[np.random.Generator, np.random.Generator]:
    # One independent stream per (metric, side), stable across Python runs (no hash()).
    salt = [ord(ch) for ch in key]
    ss = np.random.SeedSequence([seed, *salt])
    a, b = ss.spawn(2)
    return np.random.default_rng(a), np.random.default_rng(b)


def latency_comparison(
    runs: Sequence[LoadedRun], metric: str, settings: BootstrapSettings
) -> LatencyComparison:
    """One latency metric's stats per run and, for two runs, CIs on each percentile's delta."""
    after_stats = LatencyStats.of(trend_samples(runs[-1].data, metric))
    if len(runs) == 1:
        return LatencyComparison(metric, None, after_stats)
    before_stats = LatencyStats.of(trend_samples(runs[0].data, metric))
    cb, ca = clustered_samples(runs[0], metric), clustered_samples(runs[1], metric)
    n = resamples_for(max(cb.values.size, ca.values.size), settings.resamples)
    rng_b, rng_a = _seeds(settings.seed, metric)
    boot_b = bootstrap_percentiles(cb, CI_PERCENTILES, n, rng_b)
    boot_a = bootstrap_percentiles(ca, CI_PERCENTILES, n, rng_a)
    diffs = tuple(
        _difference(
            metric,
            f"p{p}",
            getattr(before_stats, f"p{p}"),
            getattr(after_stats, f"p{p}"),
            boot_b[:, i],
            boot_a[:, i],
            n,
            settings.confidence,
        )
        for i, p in enumerate(CI_PERCENTILES)
    )
    return LatencyComparison(metric, before_stats, after_stats, diffs)


def _ratio(counts: tuple[int, int]) -> float | None:
    return None if counts[1] == 0 else counts[0] / counts[1]


def rate_comparison(
    runs: Sequence[LoadedRun], metric: str, settings: BootstrapSettings
) -> RateComparison:
    """A rate per run and, for two runs, a CI on its delta (resampling requests)."""
    after_counts = rate_value(runs[-1].data, metric)
    if len(runs) == 1:
        return RateComparison(metric, None, _ratio(after_counts), None, after_counts, None)
    before_counts = rate_value(runs[0].data, metric)
    rng_b, rng_a = _seeds(settings.seed, metric)
    n = settings.resamples
    boot_b = bootstrap_means(clustered_rate(runs[0], metric), n, rng_b)
    boot_a = bootstrap_means(clustered_rate(runs[1], metric), n, rng_a)
    before, after = _ratio(before_counts), _ratio(after_counts)
    diff = _difference(metric, "rate", before, after, boot_b, boot_a, n, settings.confidence)
    return RateComparison(metric, before, after, before_counts, after_counts, diff)


def run_info(run: LoadedRun, summary: SummaryJson) -> RunInfo:
    """What ran, whether it is valid, and its throughput."""
    r = run.run
    protocol = protocol_text(r.get("protocol"), r.get("protocol_mix"))
    return RunInfo(
        label=run.label,
        name=run.name,
        path=str(run.path),
        valid=run.data.valid,
        invalid_reason=r.get("invalid_reason"),
        scenario=r.get("scenario"),
        users=r.get("users"),
        protocol=protocol,
        target=r.get("target"),
        start=r.get("start"),
        duration_s=summary.get("duration_s"),
        server_mode=r.get("server_mode"),
        generator={
            k: v
            for k, v in dict(r.get("generator") or {}).items()
            if isinstance(v, (int, float, str, bool)) or v is None
        },
        requests=int(summary["requests"]),
        streams_began=int(counter_value(run.data, "streams_began")),
        tokens=int(counter_value(run.data, "tokens")),
        requests_per_s=summary.get("requests_per_s"),
        tokens_per_s=summary.get("tokens_per_s"),
    )


def _counts(streams: pd.DataFrame) -> dict[tuple[str, str], int]:
    out: dict[tuple[str, str], int] = {}
    for o in OUTCOMES:
        out[(o, "all")] = int((streams["outcome"] == o).sum())
    if len(streams):
        grouped = streams.groupby(["outcome", "protocol"], dropna=False).size()
        for key, count in grouped.items():
            outcome, proto = cast("tuple[Any, Any]", key)
            out[(str(outcome), "?" if pd.isna(proto) else str(proto))] = int(count)
    return out


def outcome_counts(runs: Sequence[LoadedRun]) -> tuple[OutcomeCount, ...]:
    """Requests by outcome, overall (every outcome, zeros included) and by protocol."""
    after = _counts(runs[-1].streams)
    before = _counts(runs[0].streams) if len(runs) > 1 else None
    keys = list(after) + [k for k in (before or {}) if k not in after]
    rank = {o: i for i, o in enumerate(OUTCOMES)}
    keys.sort(key=lambda k: (k[1] != "all", k[1], rank.get(k[0], len(rank)), k[0]))
    return tuple(
        OutcomeCount(
            o,
            proto,
            None if before is None else before.get((o, proto), 0),
            after.get((o, proto), 0),
        )
        for o, proto in keys
    )


def _json_facts(obj: Any, prefix: str) -> list[tuple[str, str]]:
    if not isinstance(obj, dict):
        return [(prefix, f"{len(obj)} entries")] if isinstance(obj, list) else []
    return [
        (f"{prefix}.{k}", str(v))
        for k, v in obj.items()
        if isinstance(v, (int, float, str, bool)) or v is None
    ]


def _stall_causes(stalls: Any) -> dict[str, float]:
    if isinstance(stalls, dict):
        causes = stalls.get("causes") or stalls.get("by_cause")
        if isinstance(causes, dict):
            return {str(k): float(v) for k, v in causes.items() if isinstance(v, (int, float))}
        items = stalls.get("stalls") or stalls.get("events") or stalls.get("recent")
    else:
        items = stalls
    out: dict[str, float] = {}
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict):
            cause = str(item.get("cause") or "unknown")
            out[cause] = out.get(cause, 0.0) + 1.0
    return out


def _restarts_from_workers(workers: Any) -> dict[str, float]:
    if not isinstance(workers, dict):
        return {}
    out: dict[str, float] = {}
    for key, value in workers.items():
        if key.startswith("worker_") and key.endswith("_total") and isinstance(value, (int, float)):
            out[key[len("worker_") : -len("_total")]] = float(value)
    return out


def _longest_stalls(stalls: Any, top: int = 5) -> tuple[tuple[float, str, str], ...]:
    recent = stalls.get("recent") if isinstance(stalls, dict) else None
    rows: list[tuple[float, str, str]] = []
    for item in recent if isinstance(recent, list) else []:
        if isinstance(item, dict) and isinstance(item.get("ms"), (int, float)):
            frames = item.get("frames") or []
            frame = str(frames[-1]) if isinstance(frames, list) and frames else ""
            rows.append((float(item["ms"]), str(item.get("cause") or "unknown"), frame))
    rows.sort(key=lambda r: -r[0])
    return tuple(rows[:top])


def server_summary(run: LoadedRun) -> ServerSummary:
    """Counter increases, gauge peaks, stall causes and worker restarts of one run's server."""
    ev = run.server
    if not ev.present:
        return ServerSummary(run.label, False)
    causes: dict[str, float] = {}
    restarts: dict[str, float] = {}
    backlog: float | None = None
    samples, more = moved_samples(run)
    m = ev.metrics
    m = m.assign(t_run=run_time(run)).sort_values("t_run") if len(m) else m
    first_t = float(m["t_run"].min()) if len(m) else 0.0
    for _, grp in m.groupby("sample", sort=True) if len(m) else ():
        name = str(grp["name"].iloc[0])
        if not name.startswith(
            ("streamslo_loop_stalls", "streamslo_worker_restarts", "streamslo_write_backlog_bytes")
        ) or name.endswith("_created"):
            continue
        labels = str(grp["labels"].iloc[0])
        # Counters: their increase over the run (server_series), never a lifetime total.
        value = (
            counter_increase(
                grp["value"].to_numpy(dtype=float), from_zero=float(grp["t_run"].iloc[0]) > first_t
            )
            if is_counter(name, ev.types)
            else float(grp["value"].max())
        )
        label_val = labels.split("=", 1)[1].strip('"') if "=" in labels else (labels or "all")
        if name.startswith("streamslo_loop_stalls"):
            causes[label_val] = causes.get(label_val, 0.0) + value
        elif name.startswith("streamslo_worker_restarts"):
            restarts[label_val] = restarts.get(label_val, 0.0) + value
        elif name == "streamslo_write_backlog_bytes":
            backlog = value
    if not causes:
        causes = _stall_causes(ev.stalls)
    # /debug/workers is read after the run, from the Gunicorn master's own count: it also
    # holds the kills after the last scrape.
    restarts = _restarts_from_workers(ev.workers) or restarts
    facts = _json_facts(ev.stalls, "stalls") + _json_facts(ev.workers, "workers")
    return ServerSummary(
        label=run.label,
        present=True,
        samples=samples,
        stall_causes=causes,
        worker_restarts=restarts,
        peak_write_backlog_bytes=backlog,
        longest_stalls=_longest_stalls(ev.stalls),
        facts=tuple(facts),
        notes=ev.notes,
        more_moved=more,
    )


def run_phrase(label: str, name: str) -> str:
    """``The before run (naive)``; a single run is ``The run (NAME)``, never "The run run"."""
    who = "The run" if label == "run" else f"The {label} run"
    return f"{who} ({name})" if name else who


def truth_sentence(label: str, name: str, truth: object) -> TruthBanner | None:
    """What one run could check, in one sentence (None: the run does not say)."""
    from streamslo.stream.truth import CHECKS, Truth

    found = Truth.from_dict(truth)
    if found is None:
        return None
    words = {"cut": "a cut stream", "silent_stop": "a silent stop", "lost_chunk": "a lost chunk"}
    seen = [f"{words[c]} (by {getattr(found, c)})" for c in CHECKS if found.sees(c)]
    text = f"{run_phrase(label, name)} could see " + ", ".join(seen)
    missing = [f"{words[c]} ({found.why_not.get(c, 'no means')})" for c in found.missing]
    if missing:
        text += "; it could NOT see " + ", ".join(missing)
    if not found.learned:
        text += " (as its flags ask: not learned from the server)"
    counts = truth if isinstance(truth, dict) else {}
    unchecked = counts.get("unchecked_stops")
    if unchecked:
        text += (
            f"; {unchecked:,} of {counts.get('ok_streams', 0):,} ok streams ended with an "
            "ordinary stop it could not check"
        )
    return TruthBanner(text + ".", not missing and not unchecked)


def _scalar(metric: str, before: Any, after: Any) -> ScalarComparison:
    b = None if before is None else float(before)
    a = None if after is None else float(after)
    return ScalarComparison(metric, b, a, None if a is None or b is None else a - b)


def build_model(
    runs: Sequence[LoadedRun],
    verdicts: Sequence[VerdictRow],
    slo_source: str,
    settings: BootstrapSettings,
) -> Report:
    """The whole report model of ``(run,)`` or ``(before, after)``.

    Args:
        runs: the loaded runs, after last.
        verdicts: the SLO checks (see :func:`streamslo.reports.verdicts.evaluate_runs`).
        slo_source: where the thresholds came from, for the reader.
        settings: bootstrap settings (resamples, confidence, seed).
    """
    summaries = [summarize(r.data) for r in runs]
    infos = tuple(run_info(r, s) for r, s in zip(runs, summaries, strict=True))
    warnings = comparability_warnings(runs[0], runs[1]) if len(runs) > 1 else ()
    invalid = tuple(
        f"{run_phrase(r.label, r.name)}: {w}"
        for r in runs
        for w in integrity_warnings(r.run, r.data.skipped_rows)
    ) + tuple(
        f"{run_phrase(i.label, i.name)} is INVALID: {i.invalid_reason or 'no reason recorded'}. "
        "Its latencies measure the load generator, not the server."
        for i in infos
        if not i.valid
    )
    empty = tuple(
        f"{run_phrase(i.label, i.name)} holds no requests." for i in infos if i.requests == 0
    )
    truth = tuple(
        t
        for i, s in zip(infos, summaries, strict=True)
        if (t := truth_sentence(i.label, i.name, s.get("truth"))) is not None
    )
    hints = tuple(
        f"The {i.label} run ({i.name}): {h}"
        for i, s in zip(infos, summaries, strict=True)
        for h in s.get("server_hints") or ()
    )
    before_s = summaries[0] if len(runs) > 1 else {}
    # Goodput shows when either run measured it (``--goodput`` bounds in its run.json).
    goodput = ("goodput_per_s", "goodput_fraction")
    shown = (
        "tokens_per_s",
        "requests_per_s",
        *tuple(k for k in goodput if any(k in s for s in summaries)),
    )
    throughput = tuple(_scalar(k, before_s.get(k), summaries[-1].get(k)) for k in shown)
    latency = tuple(latency_comparison(runs, m, settings) for m in _latency_metrics(runs))
    # The latency tables leave out a metric no run measured; so does the glossary.
    measured = [
        lc.metric for lc in latency if lc.after.count or (lc.before is not None and lc.before.count)
    ]
    return Report(
        mode="compare" if len(runs) > 1 else "single",
        generated_at=_dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        tool_version=__version__,
        slo_source=slo_source,
        runs=infos,
        warnings=warnings + empty + hints,
        invalid=invalid,
        truth=truth,
        verdicts=tuple(verdicts),
        passed=all(v.after_passed for v in verdicts),
        rates=tuple(rate_comparison(runs, m, settings) for m in REPORT_RATES),
        throughput=throughput,
        latency=latency,
        outcomes=outcome_counts(runs),
        server=tuple(server_summary(r) for r in runs),
        bootstrap=settings,
        failures=failure_groups(runs),
        glossary=tuple(
            GlossaryEntry(*t)
            for t in glossary_terms(
                [*measured, *REPORT_RATES, *shown, *(v.metric for v in verdicts)]
            )
        ),
        session_summary=tuple(
            ss
            for i, s in zip(infos, summaries, strict=True)
            if (ss := session_summary_of(i, s)) is not None
        ),
    )


def session_summary_of(info: RunInfo, summary: SummaryJson) -> SessionSummary | None:
    """A run's sessions judged whole, from its summary (None for a run without sessions)."""
    ss = summary.get("sessions")
    if not ss:
        return None
    e2e = ss.get("e2e_ms") or {}
    return SessionSummary(
        label=info.label,
        name=info.name,
        sessions=int(ss["sessions"]),
        whole=int(ss["whole"]),
        success_rate=ss.get("success_rate"),
        e2e_p50_ms=e2e.get("p50"),
        e2e_p99_ms=e2e.get("p99"),
        e2e_max_ms=e2e.get("max"),
        steps_mean=ss.get("steps_mean"),
        steps_not_sent=int(ss.get("steps_not_sent") or 0),
        max_depth=ss.get("max_depth"),
        tool_share=ss.get("tool_share"),
    )
