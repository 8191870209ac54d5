"""The Locust child of a run: started, watched to its end, stopped (docs/results.md, "Stop
signals").

Locust runs as a subprocess (it monkey-patches the interpreter with gevent). This module starts
it with the run's command line (:mod:`streamslo.run.locust_cmd`), watches it (the windows and
running totals as they come, :mod:`streamslo.run.watch`: live ``abortOnFail``, burn-rate alerts,
progress, the Prometheus exporter), stops it early when a threshold or an alert says so or when
it runs far past its end, and stops it as at the end of a run (streams in flight get the drain)
when a stop signal reaches ``streamslo run``.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from streamslo.errors import BadInputError
from streamslo.results.layout import Layout, read_run_start
from streamslo.run.config import RunConfig
from streamslo.run.exporter import GeneratorExporter
from streamslo.run.locust_cmd import LOCUSTFILE, locust_command, waiting_words
from streamslo.run.progress import Progress
from streamslo.run.signals import exit_code_of
from streamslo.run.watch import RunWatch

if TYPE_CHECKING:
    from streamslo.run.evidence import ServerEvidence
    from streamslo.slo.budget import FiredAlert
    from streamslo.slo.thresholds import SLO, CheckResult

__all__ = ["Watched", "exit_words", "launch_and_watch", "signal_name"]


@dataclass
class Watched:
    """Phases 3 and 4: how the load generator's run went."""

    start: float
    watch: RunWatch
    rc: int | None = None
    aborted: list[CheckResult] = field(default_factory=list)
    alert_abort: FiredAlert | None = None
    overran: bool = False
    interrupted: KeyboardInterrupt | None = None

    @property
    def died(self) -> bool:
        """Locust exited with an error of its own (not stopped by a threshold, an alert, a
        signal or the safety net)."""
        return (
            self.rc not in (0, None)
            and not self.aborted
            and self.alert_abort is None
            and self.interrupted is None
            and not self.overran
        )


def launch_and_watch(
    cfg: RunConfig, slo: SLO, layout: Layout, evidence: ServerEvidence, start: float
) -> Watched:
    """Start Locust and watch it to its end (live thresholds, alerts, progress); a stop signal
    stops it as at the end of a run (streams in flight get the drain).

    Args:
        cfg: the run's configuration.
        slo: the thresholds watched live.
        layout: the results directory.
        evidence: the target's scrape, started with Locust and stopped after it.
        start: the run's start (epoch seconds).
    """
    env = dict(os.environ, STREAMSLO_RUNNER="1", PYTHONUNBUFFERED="1", **cfg.locust_environment())
    watched = Watched(start, _new_watch(cfg, slo, layout.root))
    proc: subprocess.Popen[bytes] | None = None
    with open(layout.locust_log, "wb") as log:
        try:
            proc = subprocess.Popen(
                locust_command(cfg, LOCUSTFILE),
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
            evidence.start()
            watched.aborted, watched.alert_abort, watched.overran = _watch(proc, cfg, watched.watch)
        except KeyboardInterrupt as exc:
            # Ctrl-C, SIGTERM, SIGHUP: stop Locust as at the end of a run (streams in flight
            # get the drain), then finalize what was measured.
            watched.interrupted = exc
            print(
                "streamslo run: interrupted; stopping the load (streams in flight get the drain) "
                "and keeping the results",
                file=sys.stderr,
                flush=True,
            )
            if proc is not None:
                _stop(proc, cfg.drain)
        except BaseException:
            if proc is not None:
                _stop(proc, 5.0)
            raise
        finally:
            evidence.stop()
            watched.watch.finish(time.time() - start)
            if watched.watch.exporter is not None:
                watched.watch.exporter.stop()
    watched.rc = proc.returncode if proc is not None else None
    return watched


def signal_name(exc: KeyboardInterrupt | None) -> str | None:

    return None if exc is None else signal.Signals(exit_code_of(exc) - 128).name


def exit_words(rc: int | None) -> str:
    if rc is not None and rc < 0:
        return f"was killed by {signal.Signals(-rc).name}"
    return f"exited with code {rc}"


def _die_with_parent() -> None:
    """In the Locust child, before exec: have Linux send it SIGTERM if ``streamslo run`` dies
    without stopping it (SIGKILL), so that Locust stops and flushes instead of running on."""
    if not sys.platform.startswith("linux"):
        return

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG


def _new_watch(cfg: RunConfig, slo: SLO, out: Path) -> RunWatch:
    """The watch of this run, with its progress line and its Prometheus endpoint."""

    mode = "off" if cfg.quiet and cfg.progress == "auto" else cfg.progress
    exporter = None
    if cfg.prometheus_port:
        exporter = GeneratorExporter(cfg.prometheus_port)
        try:
            exporter.start()
        except OSError as exc:
            raise BadInputError(
                f"--prometheus-port {cfg.prometheus_port}: cannot listen ({exc.strerror})"
            ) from None
    progress = Progress(mode, cfg.progress_interval)
    return RunWatch(
        out, slo, cfg.budget, cfg.warmup + cfg.duration, progress, exporter, drain_s=cfg.drain
    )


def _watch(
    proc: subprocess.Popen[bytes], cfg: RunConfig, watch: RunWatch
) -> tuple[list[CheckResult], FiredAlert | None, bool]:
    """Wait for Locust; stop it early when an abortOnFail threshold fails or an abortOnFail
    alert fires (read from the windows and the running totals, see :mod:`streamslo.run.watch`),
    or when it runs far past its end (a hung generator).

    Returns:
        (the abortOnFail checks that stopped it, the alert that stopped it or None, whether it
        ran past its end and was stopped).
    """

    start: float | None = None if cfg.master else time.monotonic()
    said = -math.inf
    limit = cfg.warmup + cfg.duration + cfg.drain + 120.0
    while proc.poll() is None:
        time.sleep(1.0)
        if start is None:
            # A master's clock starts when its workers start the load: until then say so
            # (a progress line would count down a run that has not begun).
            if read_run_start(Layout(cfg.out)) is None:
                if time.monotonic() - said >= 15.0 and not cfg.quiet and cfg.progress != "off":
                    said = time.monotonic()
                    print(waiting_words(cfg), file=sys.stderr, flush=True)
                continue
            start = time.monotonic()
        elapsed = time.monotonic() - start
        if elapsed > limit:
            print(
                f"streamslo run: locust still runs {elapsed:.0f}s after the start; stopping it",
                file=sys.stderr,
            )
            _stop(proc, 5.0)
            return [], None, True
        verdict = watch.poll(elapsed)
        if verdict:
            if verdict.alert is not None:
                print(
                    f"streamslo run: budget alert {verdict.alert.name} fired (abortOnFail); stopping the run",
                    file=sys.stderr,
                    flush=True,
                )
            _stop(proc, cfg.drain)
            return list(verdict.failed), verdict.alert, False
    return [], None, False


def _stop(proc: subprocess.Popen[bytes], drain: float) -> None:
    """SIGTERM Locust's process group (streams in flight get ``drain``), SIGKILL it after."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=drain + 15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
