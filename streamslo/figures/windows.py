"""Per-window figures of a run, aggregated as it goes (``windows.csv``; ``docs/soak.md``).

No I/O here: :class:`WindowAggregator` runs in each load-generating process and turns finished
streams and the generator's own samples into window parts; :class:`WindowBook` merges parts
from every process (itself, or a Locust master's workers), closes a window once every process
has reported past its end, and keeps the run's running totals. :mod:`streamslo.runfiles.windows_csv`
writes and reads the files; :mod:`streamslo.slo.live_eval` checks thresholds on the totals.

Which window a stream belongs to: the one holding its **end** (``started_at + e2e``), with all
its samples (TTFT, every gap). A stream is known only when it ends, so a window can be closed a
moment after its end instead of a request timeout later; ``streamslo finalize`` rebuilds any
window whose count differs from ``streams.csv`` by the same rule, so that the sum of
``requests`` over the windows equals the rows of ``streams.csv``. Windows are aligned to the
epoch (``window_start`` is a multiple of ``window_s``), so every process agrees without talking.

Figures are kept per *group* (protocol, user class, outcome, status: every threshold selector),
so that a live threshold with a selector reads the same populations as ``verify``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from streamslo.figures.histogram import LogHistogram
from streamslo.stream.outcome import EXCLUDED_OUTCOMES, OUTCOMES, began
from streamslo.stream.timing import StreamRecord

__all__ = [
    "DEFAULT_WINDOW_S",
    "GROUP_KEYS",
    "TREND_NAMES",
    "WINDOW_COLUMNS",
    "GeneratorSample",
    "GroupAggregate",
    "WindowAggregator",
    "WindowBook",
    "WindowRow",
    "add_record",
    "counts_of",
    "group_began",
    "merge_groups",
    "row_from_groups",
    "window_index",
]

#: The default window length in seconds.
DEFAULT_WINDOW_S = 10.0

#: The group key's fields, in order: the threshold selector keys.
GROUP_KEYS: tuple[str, ...] = ("protocol", "user_class", "outcome", "status")

#: Latency trends kept per group (milliseconds).
TREND_NAMES: tuple[str, ...] = (
    "ttft_ms",
    "itl_ms",
    "e2e_ms",
    "tpot_ms",
    "connect_ms",
    "max_gap_ms",
    "ttft_sched_ms",
    "e2e_sched_ms",
)

#: The columns of ``windows.csv``, in order.
WINDOW_COLUMNS: tuple[str, ...] = (
    "window_start",
    "window_s",
    "requests",
    "began",
    *OUTCOMES,
    "tokens",
    "active_streams",
    "ttft_ms_p50",
    "ttft_ms_p95",
    "ttft_ms_p99",
    "itl_ms_p50",
    "itl_ms_p95",
    "itl_ms_p99",
    "itl_ms_max",
    "gen_cpu_pct",
    "gen_lag_ms_p99",
    "gen_rss_mb",
    "server_rss_mb",
)

Group = tuple[str, str, str, str]


def window_index(t: float, window_s: float) -> int:
    """The index of the window holding epoch second ``t`` (its start is ``index * window_s``)."""
    return math.floor(t / window_s)


def _hist() -> LogHistogram:
    return LogHistogram()


@dataclass
class GroupAggregate:
    """The streams of one group (same protocol, user class, outcome and status)."""

    requests: int = 0
    tokens: int = 0
    trends: dict[str, LogHistogram] = field(default_factory=dict)
    """Trend name -> histogram of its samples (ms); absent when it has none."""

    def trend(self, name: str) -> LogHistogram:
        """The histogram of ``name`` (created empty on first use)."""
        h = self.trends.get(name)
        if h is None:
            h = self.trends[name] = _hist()
        return h

    def merge(self, other: GroupAggregate) -> GroupAggregate:
        """Add ``other`` into this one (returns self)."""
        self.requests += other.requests
        self.tokens += other.tokens
        for name, h in other.trends.items():
            self.trend(name).merge(h)
        return self

    def to_wire(self) -> dict[str, object]:
        return {
            "r": self.requests,
            "t": self.tokens,
            "h": {k: h.to_wire() for k, h in self.trends.items()},
        }

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> GroupAggregate:
        """Raises ValueError for data that is not a group aggregate."""
        try:
            trends = {str(k): LogHistogram.from_wire(v) for k, v in dict(data.get("h", {})).items()}
            return cls(int(data["r"]), int(data["t"]), trends)
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"not a group aggregate: {exc}") from None


def _group_of(rec: StreamRecord) -> Group:
    return (
        rec.protocol,
        rec.user_class,
        rec.outcome or "cancelled",
        "" if rec.status is None else str(rec.status),
    )


def group_began(group: Group) -> bool:
    """Whether the streams of ``group`` began and were not cancelled (the latency pool)."""
    status = int(group[3]) if group[3].isdigit() else None
    return group[2] not in EXCLUDED_OUTCOMES and began(status, group[2])


def add_record(agg: GroupAggregate, rec: StreamRecord, group: Group) -> None:
    """Add one finished stream to its group's aggregate (the populations of
    :mod:`streamslo.figures.metrics`: latencies from streams that began and were not cancelled;
    ``connect_ms`` from every request not cancelled)."""
    agg.requests += 1
    agg.tokens += rec.reported_tokens if rec.reported_tokens is not None else rec.tokens
    if group[2] not in EXCLUDED_OUTCOMES and rec.connect_s is not None:
        agg.trend("connect_ms").add(rec.connect_s * 1000.0)
    if not group_began(group):
        return
    if rec.ttft_s is not None:
        agg.trend("ttft_ms").add(rec.ttft_s * 1000.0)
    if rec.e2e_s is not None:
        agg.trend("e2e_ms").add(rec.e2e_s * 1000.0)
    if rec.gap_s:
        itl = agg.trend("itl_ms")
        itl.add_many([g * 1000.0 for g in rec.gap_s])
        agg.trend("max_gap_ms").add(max(rec.gap_s) * 1000.0)
    tpot = rec.tpot_s
    if tpot is not None:
        agg.trend("tpot_ms").add(tpot * 1000.0)
    if rec.scheduled_at is not None:
        lag_ms = max(0.0, rec.started_at - rec.scheduled_at) * 1000.0
        if rec.ttft_s is not None:
            agg.trend("ttft_sched_ms").add(rec.ttft_s * 1000.0 + lag_ms)
        if rec.e2e_s is not None:
            agg.trend("e2e_sched_ms").add(rec.e2e_s * 1000.0 + lag_ms)


def counts_of(groups: Mapping[Group, GroupAggregate]) -> tuple[dict[str, int], int]:
    """(requests by outcome, streams that began and were not cancelled) of some groups."""
    outcomes = dict.fromkeys(OUTCOMES, 0)
    began_n = 0
    for g, agg in groups.items():
        outcomes[g[2]] = outcomes.get(g[2], 0) + agg.requests
        if group_began(g):
            began_n += agg.requests
    return outcomes, began_n


def merge_groups(groups: Iterable[GroupAggregate]) -> GroupAggregate:
    """One aggregate of several groups."""
    out = GroupAggregate()
    for g in groups:
        out.merge(g)
    return out


@dataclass
class GeneratorSample:
    """One process's self-measurement within one window: sums and counts, so that a window
    that arrives in several parts still averages right."""

    cpu_sum: float = 0.0
    cpu_n: int = 0
    active_sum: float = 0.0
    active_n: int = 0
    rss_bytes: float | None = None
    """The last RSS sample of the window."""
    lag: LogHistogram = field(default_factory=_hist)

    def merge(self, other: GeneratorSample) -> GeneratorSample:
        self.cpu_sum += other.cpu_sum
        self.cpu_n += other.cpu_n
        self.active_sum += other.active_sum
        self.active_n += other.active_n
        if other.rss_bytes is not None:
            self.rss_bytes = other.rss_bytes
        self.lag.merge(other.lag)
        return self

    def to_wire(self) -> dict[str, object]:
        return {
            "c": [self.cpu_sum, self.cpu_n],
            "a": [self.active_sum, self.active_n],
            "m": self.rss_bytes,
            "l": self.lag.to_wire(),
        }

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> GeneratorSample:
        try:
            rss = data.get("m")
            return cls(
                float(data["c"][0]),
                int(data["c"][1]),
                float(data["a"][0]),
                int(data["a"][1]),
                None if rss is None else float(rss),
                LogHistogram.from_wire(data["l"]),
            )
        except (KeyError, TypeError, IndexError) as exc:
            raise ValueError(f"not a generator sample: {exc}") from None


@dataclass
class _Part:
    groups: dict[Group, GroupAggregate] = field(default_factory=dict)
    gen: GeneratorSample = field(default_factory=GeneratorSample)

    def to_wire(self, k: int) -> dict[str, object]:
        return {
            "k": k,
            "g": [[list(key), agg.to_wire()] for key, agg in self.groups.items()],
            "gen": self.gen.to_wire(),
        }


class WindowAggregator:
    """One load-generating process's window parts, handed over by :meth:`take`.

    Args:
        window_s: the window length.
        source: this process's name (unique among the run's processes).
        clock: epoch seconds now.
    """

    def __init__(self, window_s: float, source: str, clock: Callable[[], float]) -> None:
        if not window_s > 0:
            raise ValueError(f"the window must be positive, not {window_s!r}")
        self.window_s = float(window_s)
        self.source = source
        self.clock = clock
        self._parts: dict[int, _Part] = {}

    def _part(self, t: float) -> _Part:
        k = window_index(t, self.window_s)
        p = self._parts.get(k)
        if p is None:
            p = self._parts[k] = _Part()
        return p

    def add(self, rec: StreamRecord) -> None:
        """A finished stream, in the window of its end."""
        end = rec.started_at + (rec.e2e_s or 0.0)
        part = self._part(end)
        group = _group_of(rec)
        agg = part.groups.get(group)
        if agg is None:
            agg = part.groups[group] = GroupAggregate()
        add_record(agg, rec, group)

    def sample(
        self,
        t: float,
        *,
        cpu: float | None = None,
        lag_ms: float | None = None,
        rss_bytes: float | None = None,
        active: float | None = None,
    ) -> None:
        """The generator's own samples at epoch ``t``."""
        g = self._part(t).gen
        if cpu is not None:
            g.cpu_sum += cpu
            g.cpu_n += 1
        if lag_ms is not None:
            g.lag.add(lag_ms)
        if rss_bytes is not None:
            g.rss_bytes = rss_bytes
        if active is not None:
            g.active_sum += active
            g.active_n += 1

    def take(self, backlog_since: float | None = None, *, wire: bool = True) -> dict[str, object]:
        """Every part gathered since the last call, as a message, and forget them.

        Args:
            backlog_since: the end time of the oldest stream finished but not yet added (a queue
                of them), or None: the watermark stays before it.
            wire: parts as plain lists (msgpack-safe, for a master); False: as objects, for a
                book in the same process (no round trip through lists: ~3 ms a second saved).

        Returns:
            ``{"src", "w", "wm", "parts"}``: ``wm`` is the watermark, the epoch second before
            which this process will add nothing more (barring a stall).
        """
        now = self.clock()
        wm = now if backlog_since is None else min(now, backlog_since)
        parts, self._parts = self._parts, {}
        out: list[Any] = [p.to_wire(k) if wire else (k, p) for k, p in sorted(parts.items())]
        return {"src": self.source, "w": self.window_s, "wm": wm - 0.25, "parts": out}


@dataclass(frozen=True)
class WindowRow:
    """One row of ``windows.csv``."""

    values: dict[str, Any]
    """Column name -> value (None for an empty cell), every column of :data:`WINDOW_COLUMNS`."""
    groups: dict[Group, GroupAggregate] = field(default_factory=dict, compare=False, repr=False)
    """The window's groups (for a live budget or progress line)."""

    def __getitem__(self, column: str) -> Any:
        return self.values[column]


def _r(v: float | None, digits: int = 3) -> float | None:
    return None if v is None else round(v, digits)


def row_from_groups(
    k: int,
    window_s: float,
    groups: Mapping[Group, GroupAggregate],
    gens: Mapping[str, GeneratorSample] | None = None,
    server_rss_bytes: float | None = None,
) -> WindowRow:
    """The ``windows.csv`` row of window ``k`` from its groups and its processes' samples."""
    outcomes, began_n = counts_of(groups)
    total = merge_groups(groups.values())
    ttft, itl = total.trends.get("ttft_ms"), total.trends.get("itl_ms")
    gens = gens or {}
    cpu = [g.cpu_sum / g.cpu_n for g in gens.values() if g.cpu_n]
    active = [g.active_sum / g.active_n for g in gens.values() if g.active_n]
    rss = [g.rss_bytes for g in gens.values() if g.rss_bytes is not None]
    lag = LogHistogram()
    for g in gens.values():
        lag.merge(g.lag)
    values: dict[str, Any] = {
        "window_start": round(k * window_s, 6),
        "window_s": window_s,
        "requests": total.requests,
        "began": began_n,
        **outcomes,
        "tokens": total.tokens,
        "active_streams": _r(sum(active), 2) if active else None,
        "ttft_ms_p50": _r(ttft.quantile(0.5)) if ttft else None,
        "ttft_ms_p95": _r(ttft.quantile(0.95)) if ttft else None,
        "ttft_ms_p99": _r(ttft.quantile(0.99)) if ttft else None,
        "itl_ms_p50": _r(itl.quantile(0.5)) if itl else None,
        "itl_ms_p95": _r(itl.quantile(0.95)) if itl else None,
        "itl_ms_p99": _r(itl.quantile(0.99)) if itl else None,
        "itl_ms_max": _r(itl.max) if itl and itl.count else None,
        # The busiest process: a generator is judged per process (docs/results.md, validity).
        "gen_cpu_pct": _r(max(cpu), 1) if cpu else None,
        "gen_lag_ms_p99": _r(lag.quantile(0.99)) if lag.count else None,
        "gen_rss_mb": _r(sum(rss) / 2**20, 2) if rss else None,
        "server_rss_mb": _r(server_rss_bytes / 2**20, 2) if server_rss_bytes is not None else None,
    }
    return WindowRow(values, dict(groups))


@dataclass
class _Open:
    groups: dict[Group, GroupAggregate] = field(default_factory=dict)
    gens: dict[str, GeneratorSample] = field(default_factory=dict)


@dataclass
class _Source:
    watermark: float
    seen: float


class WindowBook:
    """Merges window parts from every process, closes windows, keeps the run's totals.

    A window closes once every process that reported within :attr:`stale_s` has a watermark
    past its end (it will send nothing more for it), or :attr:`max_wait_s` after its end
    whatever happens (a process that died). A part that arrives for a window already closed
    (rare: a report delayed past that) counts in the next window written, so that the sum of
    ``requests`` stays right; ``streamslo finalize`` puts it back in its own window.

    Args:
        window_s: the window length.
        clock: epoch seconds now.
        stale_s: a process silent for this long no longer holds windows open.
        max_wait_s: the longest a window waits after its end.
    """

    def __init__(
        self,
        window_s: float,
        clock: Callable[[], float],
        *,
        stale_s: float = 15.0,
        max_wait_s: float = 30.0,
    ) -> None:
        self.window_s = float(window_s)
        self.clock = clock
        self.stale_s = stale_s
        self.max_wait_s = max_wait_s
        self.totals: dict[Group, GroupAggregate] = {}
        """Every stream merged so far, by group (what live thresholds read)."""
        self.last_row: WindowRow | None = None
        self.rows_written = 0
        self._open: dict[int, _Open] = {}
        self._sources: dict[str, _Source] = {}
        self._next: int | None = None
        self._late = _Open()
        self.late_parts = 0
        """Parts that arrived after their window was written."""

    def merge(self, message: Mapping[str, Any]) -> None:
        """Add one process's message (:meth:`WindowAggregator.take`).

        Raises:
            ValueError: a malformed message, or one with another window length.
        """
        try:
            src, w, wm, parts = (
                str(message["src"]),
                float(message["w"]),
                float(message["wm"]),
                message["parts"],
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a window message: {exc}") from None
        if w != self.window_s:
            raise ValueError(f"process {src} aggregates {w:g} s windows, not {self.window_s:g} s")
        now = self.clock()
        s = self._sources.get(src)
        if s is None:
            self._sources[src] = _Source(wm, now)
        else:
            s.watermark, s.seen = max(s.watermark, wm), now
        for part in parts:
            if isinstance(part, tuple):  # objects from this process (take(wire=False))
                k, obj = int(part[0]), part[1]
                groups: list[tuple[Group, GroupAggregate]] = list(obj.groups.items())
                gen = obj.gen
            else:
                k = int(part["k"])
                groups = [
                    (tuple(str(x) for x in key), GroupAggregate.from_wire(w))  # type: ignore[misc]
                    for key, w in part["g"]
                ]
                gen = GeneratorSample.from_wire(part["gen"])
            if self._next is None or (self.rows_written == 0 and k < self._next):
                self._next = k
            late = k < self._next
            target = self._late if late else self._open.setdefault(k, _Open())
            self.late_parts += late
            for group, agg in groups:
                target.groups.setdefault(group, GroupAggregate()).merge(agg)
                self.totals.setdefault(group, GroupAggregate()).merge(agg)
            target.gens.setdefault(src, GeneratorSample()).merge(gen)

    def _closable_before(self, now: float) -> float:
        live = [s.watermark for s in self._sources.values() if now - s.seen <= self.stale_s]
        return min(live) if live else now - self.max_wait_s

    def close_ready(self, server_rss_bytes: float | None = None) -> list[WindowRow]:
        """Close every window that can be closed now, in order (empty windows included)."""
        if self._next is None or (not self._open and not self._late.groups):
            return []
        now = self.clock()
        limit = max(self._closable_before(now), now - self.max_wait_s)
        last = max(self._open) if self._open else self._next
        rows = []
        while self._next <= last and (self._next + 1) * self.window_s <= limit:
            rows.append(self._close(self._next, server_rss_bytes))
        return rows

    def close_all(self, server_rss_bytes: float | None = None) -> list[WindowRow]:
        """Close every open window (the end of the run)."""
        if self._next is None:
            return []
        rows = []
        last = max(self._open) if self._open else self._next - 1
        while self._next <= last:
            rows.append(self._close(self._next, server_rss_bytes))
        if self._late.groups:
            rows.append(self._close(self._next, server_rss_bytes))
        return rows

    def _close(self, k: int, server_rss_bytes: float | None) -> WindowRow:
        w = self._open.pop(k, None) or _Open()
        if self._late.groups or self._late.gens:
            for g, agg in self._late.groups.items():
                w.groups.setdefault(g, GroupAggregate()).merge(agg)
            self._late = _Open()
        row = row_from_groups(k, self.window_s, w.groups, w.gens, server_rss_bytes)
        self._next = k + 1
        self.rows_written += 1
        self.last_row = row
        return row

    def silent_since(self, t: float) -> list[str]:
        """The processes that have not reported since epoch ``t`` (a master waits for its
        workers' last reports at the end)."""
        return [name for name, s in self._sources.items() if s.seen < t]

    @property
    def sources(self) -> tuple[str, ...]:
        """The processes that have reported."""
        return tuple(self._sources)
