"""Progress output for runs and soaks (``--progress``), on stderr.

One line: elapsed and ETA, streams so far and in flight, connection errors so far (when there
are any: a server that stopped answering), the last closed window's truncation
rate, 5xx rate and ITL p99, and the alerts fired. Past the planned load (warm-up plus
duration) no ETA is shown: the run drains, its streams (and agentic sessions) in flight
finishing within ``--drain``, and the line says so (``43s, load ended at 30s, draining 13s of
at most 30s``) instead of a time left of zero. On a terminal it is a live line redrawn in
place (``rich``); elsewhere (CI logs) a plain line every ``--progress-interval`` seconds, and
one at the end. :func:`progress_line` builds the text from a :class:`ProgressState`; nothing
here reads files.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import IO, Any

__all__ = ["Progress", "ProgressState", "fmt_duration", "progress_line"]


@dataclass(frozen=True)
class ProgressState:
    """What the progress line shows (None: not known yet)."""

    elapsed_s: float
    planned_s: float
    """Warm-up plus duration: when new streams stop."""
    streams: int | None = None
    active: float | None = None
    truncation_rate: float | None = None
    http_5xx_rate: float | None = None
    itl_p99_ms: float | None = None
    alerts: int = 0
    last_alert: str | None = None
    connect_errors: int | None = None
    """Requests of the run so far that got no connection (shown when there are any)."""
    drain_s: float | None = None
    """``--drain``: the most the run goes on past ``planned_s`` (None: not known)."""


def fmt_duration(seconds: float) -> str:
    """``1h02m03s``, ``4m05s``, ``12s``."""
    s = max(0, round(seconds))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    if h:
        return f"{h}h{m:02d}m{sec:02d}s"
    return f"{m}m{sec:02d}s" if m else f"{sec}s"


def _pct(v: float | None) -> str:
    return "—" if v is None else f"{v * 100:.2f}%"


def _clock(st: ProgressState) -> str:
    """``12m00s/1h00m00s ETA 48m00s`` while the load runs; then how long it has drained."""
    if st.elapsed_s <= st.planned_s:
        eta = st.planned_s - st.elapsed_s
        then = f" + drain (at most {fmt_duration(st.drain_s)})" if st.drain_s else ""
        return (
            f"{fmt_duration(st.elapsed_s)}/{fmt_duration(st.planned_s)} ETA {fmt_duration(eta)}"
            f"{then}"
        )
    over = st.elapsed_s - st.planned_s
    most = f" of at most {fmt_duration(st.drain_s)}" if st.drain_s is not None else ""
    return (
        f"{fmt_duration(st.elapsed_s)}, load ended at {fmt_duration(st.planned_s)}, draining "
        f"{fmt_duration(over)}{most} (streams in flight finish)"
    )


def progress_line(st: ProgressState) -> str:
    """The line, e.g. ``12m00s/1h00m00s ETA 48m00s | streams 4,210 (48 open) | last window:
    trunc 0.00% 5xx 0.00% ITL p99 51.2 ms | alerts 0``."""
    streams = "—" if st.streams is None else f"{st.streams:,}"
    open_ = "" if st.active is None else f" ({st.active:.0f} open)"
    itl = "—" if st.itl_p99_ms is None else f"{st.itl_p99_ms:.1f} ms"
    alerts = f"alerts {st.alerts}" + (f" (last: {st.last_alert})" if st.last_alert else "")
    refused = f" | connect errors {st.connect_errors:,}" if st.connect_errors else ""
    return (
        f"{_clock(st)} | "
        f"streams {streams}{open_}{refused} | last window: trunc {_pct(st.truncation_rate)} "
        f"5xx {_pct(st.http_5xx_rate)} ITL p99 {itl} | {alerts}"
    )


class Progress:
    """Shows :class:`ProgressState` updates on ``stream`` (default stderr).

    Args:
        mode: ``live`` (redrawn in place), ``plain`` (a line every ``interval``), ``off``, or
            ``auto`` (live on a terminal, else plain).
        interval: seconds between plain lines.
        stream: where to write.
    """

    def __init__(
        self, mode: str = "auto", interval: float = 30.0, stream: IO[str] | None = None
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        if mode == "auto":
            mode = "live" if self.stream.isatty() else "plain"
        self.mode = mode
        self.interval = interval
        self._last_plain: float | None = None
        self._live: Any = None
        self._last: ProgressState | None = None

    def update(self, st: ProgressState) -> None:
        """Show ``st`` now (live), or when a plain line is due."""
        self._last = st
        if self.mode == "off":
            return
        line = progress_line(st)
        if self.mode == "live":
            from rich.text import Text  # plain text: no markup, no highlighting of numbers

            if self._live is None:
                from rich.console import Console
                from rich.live import Live

                self._live = Live(
                    Text(line),
                    console=Console(file=self.stream),
                    auto_refresh=False,
                    transient=False,
                )
                self._live.start()
            self._live.update(Text(line), refresh=True)
            return
        if self._last_plain is None or st.elapsed_s - self._last_plain >= self.interval:
            self._last_plain = st.elapsed_s
            print(f"streamslo: {line}", file=self.stream, flush=True)

    def close(self) -> None:
        """Leave the last line on screen (live), or print it once more (plain)."""
        if self._live is not None:
            self._live.stop()
            self._live = None
        elif (
            self.mode == "plain"
            and self._last is not None
            and self._last_plain != self._last.elapsed_s
        ):
            print(f"streamslo: {progress_line(self._last)}", file=self.stream, flush=True)
