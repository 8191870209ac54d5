"""The target's own series, from its ``/metrics`` scrapes (``--metrics-url``, or the bundled
server's by themselves): the ones that matter for streaming, named per server, over the run's
time axis, and counters as their increase over the run.

Servers name the same thing differently; :data:`STREAMING_SERIES` lists them by what they show
(its ``panel``):

======== ========================================= ===================== =====================
panel    vLLM                                      TGI                   SGLang
======== ========================================= ===================== =====================
running  ``vllm:num_requests_running``             ``tgi_batch_current_  ``sglang:num_running_
                                                   size``                reqs``
waiting  ``vllm:num_requests_waiting``             ``tgi_queue_size``    ``sglang:num_queue_
                                                                         reqs``
kv       ``vllm:kv_cache_usage_perc`` (older:      —                     ``sglang:token_usage``
         ``vllm:gpu_cache_usage_perc``), 0–1
preempt  ``vllm:num_preemptions_total``            —                     —
======== ========================================= ===================== =====================

plus TGI's ``tgi_batch_current_max_tokens``, the bundled server's
``streamslo_active_streams``, and every server's ``process_cpu_seconds_total`` (as CPU seconds
per second: cores) and ``process_resident_memory_bytes``.

**Counters are increases over the run.** A server that ran before the run carries lifetime
totals (vLLM's API server: 220 s of CPU before a 7.7 s run); the run's share is the sum of the
rises between its scrapes, from the first scrape (taken as the run starts). A counter that
drops was reset (a restarted worker): its new value is what it counted since. A series absent
from the run's first scrape (a label seen for the first time) counts from zero. Whether a
series is a counter comes from the server's ``# TYPE`` lines, else from its name (``_total``).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import pandas as pd

from streamslo.reports.load import LoadedRun
from streamslo.reports.model import ServerSample

__all__ = [
    "STREAMING_SERIES",
    "Known",
    "counter_increase",
    "is_counter",
    "moved_samples",
    "panel_series",
    "run_time",
]


@dataclass(frozen=True)
class Known:
    """A series that matters for streaming, as one server names it."""

    names: tuple[str, ...]
    """Metric names, the first present wins (vLLM renamed its KV-cache gauge)."""
    title: str
    panel: str
    """What it shows: ``running``, ``waiting``, ``kv``, ``preempt``, ``batch_tokens``,
    ``cpu``, ``memory``."""
    across_labels: str = "sum"
    """How samples with different labels (engines, models) combine: ``sum`` or ``max``."""


#: Every series the report charts, by server (see the module's docstring).
STREAMING_SERIES: tuple[Known, ...] = (
    Known(("vllm:num_requests_running",), "vLLM running requests", "running"),
    Known(("vllm:num_requests_waiting",), "vLLM waiting requests", "waiting"),
    Known(
        ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
        "vLLM KV-cache usage",
        "kv",
        "max",
    ),
    Known(("vllm:num_preemptions_total",), "vLLM preemptions", "preempt"),
    Known(("tgi_batch_current_size",), "TGI batch size (running)", "running"),
    Known(("tgi_queue_size",), "TGI queue size (waiting)", "waiting"),
    Known(("tgi_batch_current_max_tokens",), "TGI batch max tokens", "batch_tokens", "max"),
    Known(("sglang:num_running_reqs",), "SGLang running requests", "running"),
    Known(("sglang:num_queue_reqs",), "SGLang queued requests", "waiting"),
    Known(("sglang:token_usage",), "SGLang token-pool usage", "kv", "max"),
    Known(("streamslo_active_streams",), "bundled server: streams being written", "running"),
    Known(("process_cpu_seconds_total",), "server process CPU", "cpu"),
    Known(("process_resident_memory_bytes",), "server process memory (RSS)", "memory"),
)

#: Sample names that are parts of a histogram or summary, or a counter's creation time.
_PARTS = ("_bucket", "_created", "_sum", "_count")
#: At most this many other series that moved are listed (the rest are in metrics.jsonl).
MAX_OTHER = 40


def is_counter(name: str, types: dict[str, str]) -> bool:
    """Whether a sample is a counter's: the server's ``# TYPE`` says so, else its name ends
    in ``_total``."""
    typ = types.get(name)
    if typ is not None and typ != "unknown":
        return typ == "counter"
    return name.endswith("_total")


def counter_increase(values: np.ndarray, from_zero: bool = False) -> float:
    """A counter's increase over consecutive scrapes: the sum of its rises, a drop counted as
    a reset (the new value is the increase since). ``from_zero``: the series was not there at
    the run's first scrape, so its first value was counted within the run."""
    v = values[~np.isnan(values)]
    if v.size == 0:
        return 0.0
    total = float(v[0]) if from_zero else 0.0
    for prev, cur in itertools.pairwise(v):
        total += float(cur - prev) if cur >= prev else float(cur)
    return total


def run_time(run: LoadedRun) -> pd.Series:
    """Each scrape's time in seconds since the run's start: from the scrape's epoch when the
    file has it, else its ``t`` (seconds since the scraping began, a moment after the start)."""
    m = run.server.metrics
    if run.start_epoch is not None and "epoch" in m and m["epoch"].notna().all() and len(m):
        return m["epoch"] - run.start_epoch
    return m["t"]


def _one_series(run: LoadedRun, known: Known) -> tuple[str, pd.DataFrame] | None:
    """``(name, frame t, value)`` of the first of ``known.names`` the run's server exported,
    its labelled samples combined per scrape; None when it exported none."""
    m = run.server.metrics
    if not len(m):
        return None
    for name in known.names:
        sub = m[m["name"] == name]
        if not len(sub):
            continue
        sub = sub.assign(t_run=run_time(run)[sub.index])
        if is_counter(name, run.server.types):
            # Cumulative increase since the run's first scrape, per labelled series, summed.
            first_t = float(run_time(run).min())
            parts = []
            for _, grp in sub.sort_values("t_run").groupby("sample", sort=False):
                vals = grp["value"].to_numpy(dtype=float)
                steps = np.where(
                    np.diff(vals, prepend=np.nan) >= 0, np.diff(vals, prepend=np.nan), vals
                )
                steps[0] = vals[0] if float(grp["t_run"].iloc[0]) > first_t else 0.0
                parts.append(
                    pd.DataFrame({"t": grp["t_run"].to_numpy(), "value": np.cumsum(steps)})
                )
            frame: pd.DataFrame = pd.DataFrame(
                pd.concat(parts).groupby("t", as_index=False)["value"].sum()
            )
        else:
            how = "max" if known.across_labels == "max" else "sum"
            frame = pd.DataFrame(sub.groupby("t_run", as_index=False)["value"].agg(how))
            frame = frame.rename(columns={"t_run": "t"})
        return name, frame.sort_values("t").reset_index(drop=True)
    return None


def panel_series(run: LoadedRun) -> list[tuple[Known, str, pd.DataFrame]]:
    """Every streaming series the run's server exported: ``(known, name, frame t, value)``,
    counters as their cumulative increase since the run's first scrape."""
    out = []
    for known in STREAMING_SERIES:
        found = _one_series(run, known)
        if found is not None:
            out.append((known, found[0], found[1]))
    return out


def _sample_summary(
    sample: str, name: str, grp: pd.DataFrame, counter: bool, from_zero: bool, title: str = ""
) -> ServerSample | None:
    vals = grp["value"].to_numpy(dtype=float)
    finite = vals[np.isfinite(vals)]
    if finite.size == 0:
        return None
    first, last = float(finite[0]), float(finite[-1])
    if counter:
        inc = counter_increase(finite, from_zero=from_zero)
        t = grp["t_run"].to_numpy(dtype=float)[np.isfinite(vals)]
        span = float(t[-1] - t[0])
        rate = inc / span if span > 0 else None
        return ServerSample(
            sample,
            "increase",
            inc,
            title=title,
            first=first,
            last=last,
            low=float(finite.min()),
            high=float(finite.max()),
            per_s=rate,
        )
    return ServerSample(
        sample,
        "peak",
        float(finite.max()),
        title=title,
        first=first,
        last=last,
        low=float(finite.min()),
        high=float(finite.max()),
    )


def moved_samples(run: LoadedRun) -> tuple[tuple[ServerSample, ...], int]:
    """The table of the server's series: every streaming series it exported (moved or not),
    then the other counters and gauges that moved over the run (histogram and summary parts
    left out), at most :data:`MAX_OTHER`. Returns the rows and how many other series moved
    beyond those listed."""
    m = run.server.metrics
    if not len(m):
        return (), 0
    m = m.assign(t_run=run_time(run)).sort_values("t_run")
    first_t = float(m["t_run"].min())
    titles: dict[str, str] = {}
    for known in STREAMING_SERIES:
        for name in known.names:
            if (m["name"] == name).any():
                titles[name] = known.title
                break
    known_rows: list[ServerSample] = []
    other_rows: list[ServerSample] = []
    for sample, grp in m.groupby("sample", sort=True):
        name = str(grp["name"].iloc[0])
        title = titles.get(name)
        if title is None and name.endswith(_PARTS):
            continue
        if title is None and run.server.types.get(name) in ("histogram", "summary"):
            continue
        counter = is_counter(name, run.server.types)
        row = _sample_summary(
            str(sample),
            name,
            grp,
            counter,
            from_zero=float(grp["t_run"].iloc[0]) > first_t,
            title=title or "",
        )
        if row is None:
            continue
        if title is not None:
            known_rows.append(row)
        elif (row.kind == "increase" and row.value > 0) or (
            row.kind == "peak"
            and row.high is not None
            and row.low is not None
            and row.high != row.low
        ):
            other_rows.append(row)
    order = {k.title: i for i, k in enumerate(STREAMING_SERIES)}
    known_rows.sort(key=lambda r: (order.get(r.title, 99), r.sample))
    extra = max(0, len(other_rows) - MAX_OTHER)
    return tuple(known_rows + other_rows[:MAX_OTHER]), extra
