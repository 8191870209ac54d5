"""The metrics of a run computed from ``streams.csv`` and ``gaps.parquet`` (reference:
docs/metrics.md), with numpy.

The registry (:data:`METRICS`: every name a threshold, the report, the live UI tab or
``summary.json`` uses, with its kind, unit and meaning) is :mod:`streamslo.figures.registry`,
which imports no numpy; it is re-exported here. This module owns the computation: the masks that
define the populations (:func:`began_mask`, :func:`counted_mask`, :func:`latency_pool`,
:func:`failure_mask`) and a value function per kind (:func:`trend_samples`, :func:`rate_value`,
:func:`counter_value`, :func:`gauge_value`). The run summary, ``verify``, the report and the live
tab all import them.

- **rates** (k6 ``Rate``): ``truncation_rate``, ``http_5xx_rate``, ``error_rate`` and
  ``<outcome>_rate`` for every outcome; ``cancelled`` streams are in no denominator. A rate
  with no denominator is ``None``.
- **trends** (k6 ``Trend``, milliseconds): ``ttft_ms``, ``itl_ms``, ``tpot_ms``, ``e2e_ms``,
  ``connect_ms``, ``max_gap_ms``, and for open-loop runs ``ttft_sched_ms`` / ``e2e_sched_ms``
  measured from the scheduled send time (coordinated omission). Latency samples pool every
  stream that began and was not cancelled; ``itl_ms`` pools every gap (one sample per gap,
  never averaged per stream), including a failed stream's open last gap.
- **counters**: ``requests``, ``tokens``, ``streams_began``.
- **gauges** (k6 ``Gauge``, one value per run): ``requests_per_s``, ``tokens_per_s``, and with
  goodput bounds ``goodput_per_s``; ``goodput_fraction`` is a rate.

Goodput (vLLM's benchmark, DistServe): a request is *good* when it ended ``ok`` and met every
per-request bound (``ttft_ms``, ``tpot_ms``, ``e2e_ms``, at most the bound). The bounds come from
the run (``run.json`` ``goodput``, set by ``--goodput ttft:500 tpot:50 e2el:2000``).

Percentiles everywhere use numpy's default ``method="linear"`` over all samples.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from streamslo.figures.registry import (
    COUNTER_METRICS,
    GAUGE_METRICS,
    GOODPUT_KEYS,
    METRICS,
    RATE_METRICS,
    SELECTOR_KEYS,
    TOKEN_SELECTOR_VALUES,
    TREND_METRICS,
    GoodputBounds,
    MetricSpec,
    metric_kind,
)
from streamslo.figures.session_figures import session_summary, session_table
from streamslo.results.layout import RunData
from streamslo.results.schema import LatencySummary, ScenarioFigures, SummaryJson, TopError
from streamslo.stream.error_groups import group_counts
from streamslo.stream.outcome import (
    BEGUN_STATUSES_WS,
    EXCLUDED_OUTCOMES,
    FAILURE_OUTCOMES,
    NOT_BEGUN_OUTCOMES,
    OUTCOMES,
)

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "COMPUTE",
    "COUNTER_METRICS",
    "GAUGE_METRICS",
    "GOODPUT_KEYS",
    "METRICS",
    "NATURAL_STOPS",
    "PERCENTILES",
    "RATE_METRICS",
    "SELECTOR_KEYS",
    "TOKEN_SELECTOR_VALUES",
    "TREND_METRICS",
    "GoodputBounds",
    "LatencyStats",
    "MetricSpec",
    "answer_gaps",
    "began_mask",
    "counted_mask",
    "counter_value",
    "failure_mask",
    "gauge_value",
    "good_mask",
    "instant_failure_cause",
    "latency_pool",
    "metric_kind",
    "percentile",
    "rate_value",
    "run_duration_s",
    "scenario_figures",
    "select",
    "summarize",
    "top_errors",
    "trend_samples",
    "truth_figures",
    "unchecked_stop_mask",
]

#: ``summary.json`` ``top_errors``: the most frequent error texts kept per outcome.
TOP_ERRORS = 5

PERCENTILES = (50, 90, 95, 99)


def percentile(samples: np.ndarray, p: float) -> float | None:
    """The ``p``-th percentile (numpy ``linear``), None without samples."""
    if samples.size == 0:
        return None
    return float(np.percentile(samples, p))


@dataclass(frozen=True)
class LatencyStats:
    """Distribution of one latency metric, in milliseconds."""

    p50: float | None
    p90: float | None
    p95: float | None
    p99: float | None
    max: float | None
    mean: float | None
    count: int

    @classmethod
    def of(cls, samples: np.ndarray) -> LatencyStats:
        if samples.size == 0:
            return cls(None, None, None, None, None, None, 0)
        p50, p90, p95, p99 = (float(v) for v in np.percentile(samples, PERCENTILES))
        return cls(
            p50, p90, p95, p99, float(samples.max()), float(samples.mean()), int(samples.size)
        )

    def as_dict(self) -> LatencySummary:
        return cast(LatencySummary, asdict(self))


def began_mask(streams: pd.DataFrame) -> pd.Series[bool]:
    """Which streams *began*: 2xx headers (101 for an accepted WebSocket) and an outcome that
    is not a before-the-stream failure. The vector twin of :func:`streamslo.stream.outcome.began`,
    built from the same constants; a missing status or outcome never began."""
    status = streams["status"]
    ok_status = ((status >= 200) & (status < 300)) | (status == BEGUN_STATUSES_WS)
    outcome = streams["outcome"]
    not_begun = (outcome.isin(tuple(NOT_BEGUN_OUTCOMES)) | outcome.isna()).astype(bool)
    return ok_status.fillna(False).astype(bool) & ~not_begun


def counted_mask(streams: pd.DataFrame) -> pd.Series[bool]:
    """Which requests count in rates: every one the load test did not cancel itself (at the
    run's end, or a client hanging up on purpose: ``client_cancelled``). A missing outcome (a
    damaged row) counts, as a failure."""
    return (~streams["outcome"].isin(tuple(EXCLUDED_OUTCOMES))).fillna(True).astype(bool)


def failure_mask(streams: pd.DataFrame, rate: str) -> pd.Series[bool]:
    """Which requests are in the numerator of a rate metric (``truncation_rate`` counts only
    streams that began; a cancelled request is in no numerator).

    Raises:
        KeyError: ``rate`` is not a rate metric.
    """
    if metric_kind(rate) != "rate":
        raise KeyError(rate)
    outcome = streams["outcome"]
    counted = counted_mask(streams)
    if rate == "truncation_rate":
        return counted & began_mask(streams) & (outcome != "ok").fillna(True).astype(bool)
    if rate == "error_rate":
        return counted & (outcome != "ok").fillna(True).astype(bool)
    if rate == "goodput_fraction":
        raise KeyError("goodput_fraction counts good requests, not failures: see good_mask")
    if rate == "unchecked_stop_rate":
        return unchecked_stop_mask(streams)
    return counted & (outcome == rate[: -len("_rate")]).fillna(False).astype(bool)


#: Stop reasons of an answer that ended on its own (not at its length, not for a tool call).
NATURAL_STOPS: tuple[str, ...] = ("stop", "eos_token", "stop_sequence", "end_turn", "completed")


def unchecked_stop_mask(streams: pd.DataFrame) -> pd.Series[bool]:
    """Streams that ended ``ok`` with an ordinary stop that the run could not check: the length
    was not forced (no ``expected_tokens``) and no reference reply matched (docs/outcomes.md,
    "What a run can see"). Such a stream may have been cut short and said ``stop``."""
    ok = counted_mask(streams) & (streams["outcome"] == "ok").fillna(False).astype(bool)
    natural = streams["finish_reason"].isin(NATURAL_STOPS).fillna(False).astype(bool)
    forced = streams["expected_tokens"].notna()
    if "reference" in streams.columns:
        matched = (streams["reference"] == "match").fillna(False).astype(bool)
    else:
        matched = pd.Series(False, index=streams.index)
    return ok & natural & ~forced & ~matched


def truth_figures(data: RunData) -> dict[str, object] | None:
    """``summary.json``'s ``truth``: what the run could check (``run.json``'s), with the streams
    whose ordinary stop it could not check and, with reference replies, how the answers
    compared. None for a run that does not say (written before streamslo kept it)."""
    truth = data.run.get("truth")
    if not isinstance(truth, dict):
        return None
    s = data.streams
    out: dict[str, object] = dict(truth)
    ok = int((counted_mask(s) & (s["outcome"] == "ok").fillna(False)).sum())
    out["unchecked_stops"] = int(unchecked_stop_mask(s).sum())
    out["ok_streams"] = ok
    if "reference" in s.columns and s["reference"].notna().any():
        refs = s["reference"].dropna().astype(str).value_counts()
        out["reference_replies"] = {k: int(refs.get(k, 0)) for k in ("match", "prefix", "diverged")}
    return out


def good_mask(streams: pd.DataFrame, bounds: GoodputBounds) -> pd.Series[bool]:
    """Which requests are *good*: counted, ended ``ok``, and within every bound that is set.

    A stream with fewer than two tokens has no TPOT and meets a TPOT bound; a missing TTFT or
    e2e fails its bound.
    """
    mask = counted_mask(streams) & (streams["outcome"] == "ok").fillna(False).astype(bool)
    if bounds.ttft_ms is not None:
        mask &= (streams["ttft_ms"] <= bounds.ttft_ms).fillna(False).astype(bool)
    if bounds.e2e_ms is not None:
        mask &= (streams["e2e_ms"] <= bounds.e2e_ms).fillna(False).astype(bool)
    if bounds.ttfo_ms is not None:
        mask &= (streams["ttfo_ms"] <= bounds.ttfo_ms).fillna(False).astype(bool)
    if bounds.tpot_ms is not None:
        tokens = streams["tokens"].astype("float64")
        tpot = (streams["e2e_ms"] - streams["ttft_ms"]) / (tokens - 1)
        mask &= ((tokens < 2) | (tpot <= bounds.tpot_ms)).fillna(False).astype(bool)
    return mask


def select(data: RunData, selector: Mapping[str, str]) -> RunData:
    """The part of a run whose streams match every ``key: value`` of ``selector``.

    Raises:
        KeyError: a selector key that is not one of :data:`SELECTOR_KEYS`.
    """
    if not selector:
        return data
    streams = data.streams
    mask = np.ones(len(streams), dtype=bool)
    token = None
    for key, value in selector.items():
        if key not in SELECTOR_KEYS:
            raise KeyError(key)
        if key == "token":
            if str(value) not in TOKEN_SELECTOR_VALUES:
                raise KeyError(f"token:{value}")
            token = str(value)
            continue
        col = streams[key].astype("string")
        mask &= (col == str(value)).fillna(False).to_numpy(dtype=bool)
    sub = streams[mask]
    gaps = data.gaps[data.gaps["stream_id"].isin(sub["stream_id"])]
    if token == "answer":
        gaps = answer_gaps(sub, gaps)
    return RunData(path=data.path, run=data.run, streams=sub, gaps=gaps)


def answer_gaps(streams: pd.DataFrame, gaps: pd.DataFrame) -> pd.DataFrame:
    """The gaps that end after each stream's first answer token (``itl_ms{token:answer}``).

    A stream's gaps run on its own clock: its first token came at the end of gap 1 minus that
    gap, its first answer token ``ttfo_ms - ttft_ms`` later; a gap is the answer's when it ends
    after that (all of a stream's gaps when its first token was an answer token; none without
    an answer token). Gaps that end at the same instant as the first answer token (one read held
    several tokens) are told apart by count: the answer's are those past its reasoning tokens.
    Tool-call tokens after the answer stay in (docs/metrics.md).
    """
    if "ttfo_ms" not in streams.columns:
        return gaps.iloc[0:0]  # a directory from before results schema 5: no answer known
    if len(gaps) == 0:
        return gaps
    lead = (streams["ttfo_ms"] - streams["ttft_ms"]).astype("float64")
    lead.index = streams["stream_id"].astype(str)
    firsts = gaps[gaps["index"] == 1]
    first_t = _series(
        firsts["t"].to_numpy(dtype=float) - firsts["gap_ms"].to_numpy(dtype=float) / 1000.0,
        firsts["stream_id"].astype(str),
    )
    ids = gaps["stream_id"].astype(str)
    lead_of = ids.map(lead).to_numpy(dtype=float)
    start = ids.map(first_t).to_numpy(dtype=float)
    end = gaps["t"].to_numpy(dtype=float)
    since = end - start - lead_of / 1000.0
    tol = 2e-6  # (ms rounding in the CSV)
    # Tokens read together share one time: a gap that ends with the first answer token can end
    # with the next ones too. Among those, the answer's are the gaps past the tokens that came
    # before the answer (its reasoning, and its tool calls when they came first).
    before = _series(_tokens_before_answer(streams), streams["stream_id"].astype(str))
    before_of = ids.map(before).to_numpy(float)
    tie = (np.abs(since) <= tol) & (gaps["index"].to_numpy() > before_of)
    # A first token that was the answer's: every gap is. (A lead of 0 after reasoning tokens is
    # a read that held them and the answer's first token together: the tie rule decides.)
    answer_first = (lead_of <= 0.0005) & (before_of == 0)
    keep = answer_first | (since > tol) | tie
    keep &= ~np.isnan(lead_of)
    return cast("pd.DataFrame", gaps[keep])


def _tokens_before_answer(streams: pd.DataFrame) -> np.ndarray:
    """Per stream, the tokens before its first answer token: its reasoning tokens, plus its
    tool-call tokens when the first tool call came before the answer."""
    n = len(streams)
    reasoning = (
        streams["reasoning_tokens"].fillna(0).to_numpy(dtype=float)
        if "reasoning_tokens" in streams.columns
        else np.zeros(n)
    )
    if "tool_tokens" in streams.columns and "ttftc_ms" in streams.columns:
        tools_first = (streams["ttftc_ms"] < streams["ttfo_ms"]).to_numpy(dtype=bool)
        reasoning = reasoning + np.where(
            tools_first, streams["tool_tokens"].fillna(0).to_numpy(dtype=float), 0.0
        )
    return reasoning


def _series(values: np.ndarray, index: Any) -> Any:
    """A pandas Series (pandas imported late: the registry loads without it)."""
    import pandas as pd

    return pd.Series(values, index=index.to_numpy())


def latency_pool(streams: pd.DataFrame) -> pd.DataFrame:
    """Streams that began and were not cancelled: the pool every latency comes from."""
    return streams[began_mask(streams) & counted_mask(streams)]


def trend_samples(data: RunData, name: str) -> np.ndarray:
    """Every sample of a trend metric, in milliseconds."""
    return np.asarray(_trend_series(data, name), dtype=float)


def _trend_series(data: RunData, name: str) -> Any:
    pool = latency_pool(data.streams)
    if name == "itl_ms":
        gaps = data.gaps[data.gaps["stream_id"].isin(pool["stream_id"])]
        return gaps["gap_ms"].to_numpy(dtype=float)
    if name == "tpot_ms":
        tokens = pool["tokens"].astype("float64")
        ok = (tokens > 1) & pool["ttft_ms"].notna() & pool["e2e_ms"].notna()
        sub = pool[ok.fillna(False)]
        vals = (sub["e2e_ms"] - sub["ttft_ms"]) / (sub["tokens"].astype("float64") - 1)
        return vals.to_numpy(dtype=float)
    if name in ("ttft_sched_ms", "e2e_sched_ms"):
        base = name.replace("_sched", "")
        sub = pool[pool["scheduled_at"].notna() & pool[base].notna()]
        lag_ms = (sub["started_at"] - sub["scheduled_at"]).clip(lower=0) * 1000.0
        return (sub[base] + lag_ms).to_numpy(dtype=float)
    if name == "connect_ms":
        col = data.streams.loc[counted_mask(data.streams), "connect_ms"]
        return col.dropna().to_numpy(dtype=float)
    if name in ("ttft_ms", "e2e_ms", "max_gap_ms"):
        return pool[name].dropna().to_numpy(dtype=float)
    if name in ("ttfo_ms", "ttftc_ms"):
        if name not in pool.columns:  # a directory from before results schema 5
            return np.empty(0)
        return pool[name].dropna().to_numpy(dtype=float)
    if name == "session_e2e_ms":
        table = session_table(data.streams)
        return table["e2e_ms"].to_numpy(dtype=float) if len(table) else np.empty(0)
    raise KeyError(name)


def rate_value(data: RunData, name: str) -> tuple[int, int]:
    """(numerator, denominator) of a rate metric.

    Raises:
        KeyError: ``name`` is not a rate metric.
    """
    s = data.streams
    if name == "session_success_rate":
        table = session_table(s)
        return (int(table["whole"].sum()), len(table)) if len(table) else (0, 0)
    if name == "goodput_fraction":
        bounds = GoodputBounds.from_run(data.run)
        if not bounds.any:
            return 0, 0  # no bounds, no goodput: "no data"
        return int(good_mask(s, bounds).sum()), int(counted_mask(s).sum())
    num = int(failure_mask(s, name).sum())
    den_mask = counted_mask(s)
    if name == "truncation_rate":
        den_mask = den_mask & began_mask(s)
    elif name == "unchecked_stop_rate":
        den_mask = den_mask & (s["outcome"] == "ok").fillna(False).astype(bool)
    return num, int(den_mask.sum())


def counter_value(data: RunData, name: str) -> float:
    """The value of a counter metric."""
    s = data.streams
    if name == "requests":
        return float(len(s))
    if name == "tokens":
        return float(s["tokens"].fillna(0).sum())
    if name == "streams_began":
        return float((began_mask(s) & counted_mask(s)).sum())
    if name in ("reasoning_tokens", "tool_tokens"):
        return float(s[name].fillna(0).sum()) if name in s.columns else 0.0
    if name == "sessions":
        return float(len(session_table(s)))
    raise KeyError(name)


def gauge_value(data: RunData, name: str) -> float | None:
    """The value of a gauge metric; None without a run duration (or goodput bounds).

    Raises:
        KeyError: ``name`` is not a gauge metric.
    """
    if metric_kind(name) != "gauge":
        raise KeyError(name)
    duration = run_duration_s(data)
    if not duration:
        return None
    s = data.streams
    if name == "requests_per_s":
        return float(counted_mask(s).sum()) / duration
    if name == "tokens_per_s":
        return float(s["tokens"].fillna(0).sum()) / duration
    if name == "session_goodput_per_s":
        table = session_table(s)
        return float(table["whole"].sum()) / duration if len(table) else None
    bounds = GoodputBounds.from_run(data.run)
    return float(good_mask(s, bounds).sum()) / duration if bounds.any else None


def _computed(name: str) -> Callable[[RunData], object]:
    kind = metric_kind(name)
    value = {
        "trend": trend_samples,
        "rate": rate_value,
        "counter": counter_value,
        "gauge": gauge_value,
    }[kind or "trend"]
    return lambda data: value(data, name)


#: Each metric's compute function, by name: a trend's samples (ms), a rate's (numerator,
#: denominator), a counter's or a gauge's value. Every metric of the registry has one.
COMPUTE: Mapping[str, Callable[[RunData], object]] = {name: _computed(name) for name in METRICS}


def _ratio(num: int, den: int) -> float | None:
    return None if den == 0 else num / den


def run_duration_s(data: RunData) -> float | None:
    """The run's length in seconds: run.json's start/end epochs, else the span of its streams.

    Returns:
        Seconds, or None when the run has no length (no streams, no start/end).
    """
    run = data.run
    start, end = run.get("start_epoch"), run.get("end_epoch")
    if isinstance(start, (int, float)) and isinstance(end, (int, float)) and end > start:
        return float(end - start)
    s = data.streams
    if len(s) == 0:
        return None
    ends = s["started_at"] + s["e2e_ms"].fillna(0) / 1000.0
    span = float(ends.max() - s["started_at"].min())
    return span if span > 0 else None


def summarize(data: RunData) -> SummaryJson:
    """The ``summary.json`` of a run (docs/results.md)."""
    s = data.streams
    counts = {o: int((s["outcome"] == o).sum()) for o in OUTCOMES}
    counted = int(counted_mask(s).sum())
    out: SummaryJson = {
        # requests = counted + cancelled; the rates' and requests_per_s's denominators are
        # counted (truncation_rate's, began): docs/results.md, "Counts and denominators".
        "requests": len(s),
        "counted": counted,
        "cancelled": len(s) - counted,
        "began": int(counter_value(data, "streams_began")),
        "outcomes": counts,
        "truncation_rate": _ratio(*rate_value(data, "truncation_rate")),
        "http_5xx_rate": _ratio(*rate_value(data, "http_5xx_rate")),
        "error_rate": _ratio(*rate_value(data, "error_rate")),
    }
    out["ttft_ms"] = LatencyStats.of(trend_samples(data, "ttft_ms")).as_dict()
    out["itl_ms"] = LatencyStats.of(trend_samples(data, "itl_ms")).as_dict()
    out["tpot_ms"] = LatencyStats.of(trend_samples(data, "tpot_ms")).as_dict()
    out["e2e_ms"] = LatencyStats.of(trend_samples(data, "e2e_ms")).as_dict()
    if "reasoning_tokens" in s.columns and (s["reasoning_tokens"].fillna(0) > 0).any():
        # A reasoning model's run: when the answer began, and how much was reasoning.
        out["ttfo_ms"] = LatencyStats.of(trend_samples(data, "ttfo_ms")).as_dict()
        out["reasoning_tokens"] = int(counter_value(data, "reasoning_tokens"))
    if "tool_tokens" in s.columns and (s["tool_tokens"].fillna(0) > 0).any():
        out["ttftc_ms"] = LatencyStats.of(trend_samples(data, "ttftc_ms")).as_dict()
        out["tool_tokens"] = int(counter_value(data, "tool_tokens"))
    if s["scheduled_at"].notna().any():
        out["ttft_sched_ms"] = LatencyStats.of(trend_samples(data, "ttft_sched_ms")).as_dict()
        out["e2e_sched_ms"] = LatencyStats.of(trend_samples(data, "e2e_sched_ms")).as_dict()
    duration = run_duration_s(data)
    out["duration_s"] = duration
    out["requests_per_s"] = gauge_value(data, "requests_per_s")
    out["tokens_per_s"] = gauge_value(data, "tokens_per_s")
    bounds = GoodputBounds.from_run(data.run)
    if bounds.any:
        out["goodput"] = bounds.as_dict()
        out["goodput_per_s"] = gauge_value(data, "goodput_per_s")
        out["goodput_fraction"] = _ratio(*rate_value(data, "goodput_fraction"))
    sessions = session_summary(s)
    if sessions is not None:
        out["sessions"] = sessions
        # (gauge_value's figure, from the table just built rather than a second one)
        whole = sessions["whole"]
        out["session_goodput_per_s"] = (
            float(whole) / duration if duration and isinstance(whole, int) else None
        )
    out["top_errors"] = top_errors(data)
    truth = truth_figures(data)
    if truth is not None:
        out["truth"] = truth
    out["valid"] = data.valid
    if not data.valid:
        out["invalid_reason"] = data.run.get("invalid_reason")
    # (lazy: summaries are the only users)
    from streamslo.figures.server_hints import server_hints, unknown_stop_reasons

    if "finish_reason" in s.columns:
        reasons = s["finish_reason"].dropna().astype(str).value_counts()
        out["finish_reasons"] = {
            str(k): int(v) for k, v in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))
        }
        unknown = unknown_stop_reasons(s)
        if unknown:
            out["unknown_finish_reasons"] = unknown
    hints = server_hints(s, data.run)
    if hints:
        out["server_hints"] = hints
    return out


def top_errors(data: RunData, limit: int = TOP_ERRORS) -> dict[str, list[TopError]]:
    """``summary.json`` ``top_errors``: per failure outcome (in the documented order), its
    largest error groups (:mod:`streamslo.stream.error_groups`: the outcome, the cause and the
    text with its numbers masked), the largest first.

    Returns:
        ``{"connect_error": [{"error": "ConnectionRefusedError: ...", "count": 4600,
        "cause": "refused", "texts": 1}], ...}``: ``error`` is the group's most frequent exact
        text, ``count`` the group's streams, ``texts`` how many distinct texts it holds; a
        failed stream without text counts as ``(no error text recorded)``. Outcomes without a
        failed stream are left out.
    """
    import pandas as pd

    s = data.streams
    out: dict[str, list[TopError]] = {}
    if len(s) == 0:
        return out
    failed = s[s["outcome"].isin(tuple(FAILURE_OUTCOMES))]
    if failed.empty:
        return out
    frame = pd.DataFrame(
        {
            "outcome": failed["outcome"].astype(str),
            "cause": failed["cause"] if "cause" in failed.columns else "",
            "error": failed["error"] if "error" in failed.columns else None,
        }
    )
    counts = frame.groupby(["outcome", "cause", "error"], dropna=False, sort=False).size()
    views = group_counts((*cast("tuple[str, Any, Any]", k), int(n)) for k, n in counts.items())
    for outcome in OUTCOMES:
        mine = [v for v in views if v.key.outcome == outcome][:limit]
        if mine:
            out[outcome] = [
                {"error": v.text, "count": v.count, "cause": v.key.cause or None, "texts": v.texts}
                for v in mine
            ]
    return out


def instant_failure_cause(data: RunData, share: float = 0.9) -> str | None:
    """When nearly every request failed before any byte (no connection, a refused handshake,
    an HTTP error), the words that name it: a load generator that looks saturated is then
    busy failing and retrying, not slow. None otherwise.

    Args:
        data: the run.
        share: the share of the (not cancelled) requests that must have failed so.
    """
    s = data.streams
    counted = s[s["outcome"] != "cancelled"]
    n = len(counted)
    if n == 0:
        return None
    failed = counted[counted["outcome"].isin(NOT_BEGUN_OUTCOMES)]
    if len(failed) < share * n:
        return None
    errors = failed["error"].fillna("").astype(str) if "error" in failed.columns else None
    top = errors.value_counts().index[0] if errors is not None and len(errors) else ""
    every = "all" if len(failed) == n else f"{len(failed):,} of"
    return (
        f"{every} {n:,} requests failed before any byte"
        + (f": {top}" if top else "")
        + " — the load generator was busy failing and retrying, not slow"
    )


def scenario_figures(data: RunData) -> dict[str, ScenarioFigures]:
    """Each ``[scenarios.NAME]``'s headline figures (``summary.json`` ``scenarios``, the
    report's scenario table), in the order the scenarios first appear; empty for a run
    without scenarios. ``dropped_iterations`` comes from ``run.json``.
    """
    if "scenario" not in data.streams.columns:
        return {}
    names = [str(n) for n in data.streams["scenario"].dropna().unique()]
    dropped: dict[str, int] = data.run.get("dropped_iterations_by_scenario") or {}
    out: dict[str, ScenarioFigures] = {}
    for name in names:
        sub = select(data, {"scenario": name})
        out[name] = {
            "requests": len(sub.streams),
            "ok": int((sub.streams["outcome"] == "ok").sum()),
            "dropped_iterations": int(dropped.get(name, 0)),
            "truncation_rate": _ratio(*rate_value(sub, "truncation_rate")),
            "error_rate": _ratio(*rate_value(sub, "error_rate")),
            "requests_per_s": gauge_value(sub, "requests_per_s"),
            "ttft_ms": LatencyStats.of(trend_samples(sub, "ttft_ms")).as_dict(),
            "itl_ms": LatencyStats.of(trend_samples(sub, "itl_ms")).as_dict(),
            "e2e_ms": LatencyStats.of(trend_samples(sub, "e2e_ms")).as_dict(),
        }
    return out
