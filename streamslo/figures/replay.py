"""``summary.json``'s replay figures: schedule lag, client hang-ups, the prefix cache
(``docs/results.md``, ``docs/workloads.md``), computed from ``streams.csv`` like every figure.

- ``schedule_lag_ms``: ``started_at - scheduled_at`` of every scheduled stream (open loop,
  arrival-rate scenarios, ``--trace``), as a latency summary (AIPerf reports the same lateness);
- ``client_cancelled``: streams the client hung up on (``--cancel-rate``): the count and its
  share of all requests; they are in no rate and no latency figure;
- ``prefix_cache``: prompt tokens the server served from its prefix cache
  (``usage.prompt_tokens_details.cached_tokens``) over the prompt tokens of the same streams
  (``hit_rate``, the figure a server's own hit/query counters give), the share of streams with a
  hit, and TTFT split by hit and miss (latency pool: streams that began and count).
"""

from __future__ import annotations

from streamslo.figures.metrics import LatencyStats, latency_pool
from streamslo.results.layout import RunData
from streamslo.results.schema import SummaryJson

__all__ = ["replay_figures"]


def replay_figures(data: RunData) -> SummaryJson:
    """The replay keys of ``summary.json`` that apply to this run (none for a plain run)."""
    s = data.streams
    out: SummaryJson = {}
    if "schedule_lag_ms" in s.columns:
        lag = s["schedule_lag_ms"].dropna().to_numpy(dtype=float)
        if lag.size:
            out["schedule_lag_ms"] = LatencyStats.of(lag).as_dict()
    n = int((s["outcome"] == "client_cancelled").sum())
    if n or (data.run.get("workload") or {}).get("cancel"):
        out["client_cancelled"] = {"count": n, "fraction": n / len(s) if len(s) else None}
    if "cached_tokens" in s.columns and (
        # a server that reports cached_tokens: 0 on every stream (no prefix was shared) says
        # nothing worth a section; a replayed trace's figure is kept even at 0
        bool((s["cached_tokens"].fillna(0) > 0).any()) or data.run.get("trace")
    ):
        both = s[s["cached_tokens"].notna() & s["usage_prompt_tokens"].notna()]
        cached = int(both["cached_tokens"].sum())
        prompt = int(both["usage_prompt_tokens"].sum())
        pool = latency_pool(s)
        pool = pool[pool["cached_tokens"].notna()]
        hit = (pool["cached_tokens"] > 0).fillna(False).astype(bool)
        out["prefix_cache"] = {
            "hit_rate": cached / prompt if prompt else None,
            "cached_tokens": cached,
            "prompt_tokens": prompt,
            "streams": len(both),
            "streams_hit": int((both["cached_tokens"] > 0).sum()),
            "request_hit_rate": float((both["cached_tokens"] > 0).mean()) if len(both) else None,
            "ttft_ms_hit": LatencyStats.of(
                pool.loc[hit, "ttft_ms"].dropna().to_numpy(dtype=float)
            ).as_dict(),
            "ttft_ms_miss": LatencyStats.of(
                pool.loc[~hit, "ttft_ms"].dropna().to_numpy(dtype=float)
            ).as_dict(),
        }
    freed = data.run.get("server_freed")
    if isinstance(freed, dict):
        out["server_freed"] = freed
    return out
