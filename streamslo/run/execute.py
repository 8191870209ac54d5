"""A headless Locust run that writes a results directory (docs/results.md, docs/cli.md): what
``streamslo run`` (:mod:`streamslo.commands.run`), ``compare``, ``soak`` and ``sweep`` execute.

Locust runs as a subprocess (it monkey-patches the interpreter with gevent); this process
watches it: it scrapes the target's evidence, reads the windows and running totals as they
come (:mod:`streamslo.run.watch`: live ``abortOnFail``, burn-rate alerts, progress, the Prometheus
exporter), finalizes the directory, prints the summary and returns the exit code.
"""

from __future__ import annotations

import contextlib
import errno
import sys
import tempfile
import time
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING

from streamslo import __version__
from streamslo.errors import (
    EXIT_BAD_INPUT,
    EXIT_INTERNAL,
    EXIT_OK,
    EXIT_THRESHOLD,
    BadInputError,
    ProtocolError,
)
from streamslo.figures.registry import GoodputBounds
from streamslo.results.layout import Layout, load_run, new_run_json, read_run_start, write_json
from streamslo.results.summary_table import format_summary
from streamslo.run.adapt import Prepared, prepare_requests
from streamslo.run.child import Watched, exit_words, launch_and_watch, signal_name
from streamslo.run.config import (
    RunConfig,
    config_from_args,
    describe_scenarios,
    describe_workload,
    protocol_mix,
)
from streamslo.run.evidence import ServerEvidence
from streamslo.run.freed import FreedCheck
from streamslo.runfiles.finalize import finalize, iso_utc, last_record_epoch
from streamslo.slo import thresholds
from streamslo.stream.dialects import ENDPOINT_APIS
from streamslo.stream.truth import forcing_text
from streamslo.transport.common import Target
from streamslo.transport.fetch import fetch
from streamslo.workload.requests import RequestOptions

if TYPE_CHECKING:
    from streamslo.results.layout import RunData
    from streamslo.results.schema import RunJson, SummaryJson
    from streamslo.slo.thresholds import SLO, CheckResult

__all__ = ["RunConfig", "config_from_args", "execute", "prepare_out"]

# (RunConfig and config_from_args live in streamslo.run.config; named here too, since every
# command that runs one imports them beside execute.)


@dataclass
class _Prepared:
    """Phase 1, before any load: the results directory, what the run sends, the target's answer."""

    layout: Layout
    slo: SLO
    """The thresholds the run is judged by (the incidents' default when none was given)."""
    workload: dict[str, object]
    requests: Prepared
    """The preflight's findings, the adapted configuration and the truth the run can check."""

    @property
    def preflight(self) -> list[dict[str, object]] | None:
        return self.requests.preflight


@dataclass
class _Target:
    """Phase 2: what the target says of itself before the load (and the baseline the freed
    check returns to)."""

    evidence: ServerEvidence
    """What scrapes it during the run."""
    server: dict[str, object] | None
    freed: FreedCheck | None = None


@dataclass
class _Finalized:
    """Phase 5: the finalized directory."""

    summary: SummaryJson
    checks: list[CheckResult]
    data: RunData
    """The run as loaded after finalizing."""
    server_freed: dict[str, object] | None
    tail: str
    """The end of Locust's log, when it died."""


def execute(cfg: RunConfig) -> int:
    """Run the load, finalize the directory, return the exit code: prepare (results directory,
    workload, preflight), ask the target, launch and watch Locust, finalize, report.

    The results directory says ``complete: false`` from the start; it is finalized however the
    run ends: at its end, after an ``abortOnFail``, after a stop signal, or after Locust died.

    Returns:
        0 every threshold held; 99 a threshold failed (or the run is invalid, not allowed);
        1 the load generator died (the directory is finalized with ``killed: true``).

    Raises:
        BadInputError: the directory is not empty, or Locust rejected the options.
        KeyboardInterrupt: Ctrl-C or a stop signal (:class:`streamslo.run.signals.Interrupted`)
            stopped the run; raised again once the directory is finalized, so that a caller
            (``compare``, ``soak``) stops too.
    """
    prepared = _prepare(cfg)
    cfg = prepared.requests.cfg  # adapted to what the preflight learned of the server
    target = _ask_target(cfg, prepared)
    start = _write_run_json(cfg, prepared, target)
    watched = launch_and_watch(cfg, prepared.slo, prepared.layout, target.evidence, start)
    done = _finalize(cfg, prepared, target, watched)
    _print_report(cfg, prepared, done, watched)
    return _exit_code(cfg, prepared, done, watched)


def _prepare(cfg: RunConfig) -> _Prepared:
    """The results directory (new or empty), the workload read, the preflight passed; a bad
    input leaves no empty directory behind.

    Raises:
        BadInputError: a bad directory, dataset, tokenizer, or a wrong target.
    """

    layout = Layout(cfg.out)
    created = not layout.root.exists()
    prepare_out(layout.root)
    try:
        workload = describe_workload(cfg)  # a bad dataset or tokenizer: exit 2 before any load
        requests = prepare_requests(cfg, layout.root)  # a wrong target: exit 2 before any load
    except BadInputError:
        if created:  # leave no empty directory behind a run that never started
            with contextlib.suppress(OSError):
                layout.root.rmdir()
        raise
    slo = cfg.slo if cfg.slo is not None else thresholds.DEFAULT_SLO
    return _Prepared(layout, slo, workload, requests)


def _ask_target(cfg: RunConfig, prepared: _Prepared) -> _Target:
    """What the target says of itself (the bundled server's mode, its evidence), and the
    in-flight baseline of the freed check (``--cancel-rate``)."""

    evidence = ServerEvidence(
        cfg.host, prepared.layout.root, insecure=cfg.insecure, metrics_url=cfg.metrics_url
    )
    server = evidence.probe()
    if (
        server is None
        and any(p["outcome"] != "ok" for p in prepared.preflight or ())
        and not _answers(cfg, "/healthz")
    ):
        # The preflight's stream went wrong and /healthz got no answer at all: a server busy
        # finishing that stream (a blocked event loop, a worker being replaced) may answer
        # in a moment. (A server without /healthz answers 404 at once: no wait for it.)
        for _ in range(2):
            time.sleep(1.0)
            server = evidence.probe()
            if server is not None:
                break
    freed = None
    if cfg.cancel_rate > 0 and evidence.metrics_url:
        freed = FreedCheck(evidence.metrics_url)
        freed.before()  # the in-flight gauge before any load: the baseline it must return to
    return _Target(evidence, server, freed)


def _write_run_json(cfg: RunConfig, prepared: _Prepared, target: _Target) -> float:
    """run.json as the run starts (``complete: false``); returns the start (epoch s)."""

    start = time.time()
    server = target.server
    contract = prepared.requests.contract
    info: RunJson = {
        "tool_version": __version__,
        "start": iso_utc(start),
        "start_epoch": start,
        "target": cfg.host,
        "scenario": cfg.scenario,
        "users": cfg.users,
        "spawn_rate": cfg.spawn_rate,
        "duration_s": cfg.duration,
        "warmup_s": cfg.warmup,
        "drain_s": cfg.drain,
        "protocol": cfg.protocol,
        "protocol_mix": protocol_mix(cfg),
        "endpoint": cfg.endpoint,
        "api": cfg.api or ENDPOINT_APIS[cfg.endpoint],
        "max_tokens": cfg.max_tokens,
        "stall_timeout": cfg.stall_timeout,
        "request_timeout": cfg.request_timeout,
        "request_rate": cfg.request_rate or None,
        "scenarios": describe_scenarios(cfg.scenarios),
        "processes": cfg.processes,
        "expect_workers": cfg.expect_workers if cfg.master else None,
        "slo": cfg.slo_source or ("scenario" if cfg.slo is not None else "default"),
        "window_s": cfg.window,
        "budget": cfg.budget.as_dict() if cfg.budget is not None else None,
        "metrics_url": target.evidence.metrics_url,
        "locust_version": version("locust"),
        "server_mode": str(server["mode"]) if server and server.get("mode") is not None else None,
        "server": server,
        "workload": prepared.workload,
        "preflight": prepared.preflight,
        "contract": None if contract is None else contract.as_dict(),
        "truth": prepared.requests.truth.as_dict(),
        "forced_length": forcing_text(RequestOptions.of(cfg).forced),
    }
    if cfg.goodput:
        info["goodput"] = GoodputBounds.parse(cfg.goodput).as_dict()
    write_json(prepared.layout.run_json, new_run_json(info))
    return start


def _finalize(cfg: RunConfig, prepared: _Prepared, target: _Target, w: Watched) -> _Finalized:
    """Finalize the directory however the run ended (a killed Locust: its end is its last
    record).

    Raises:
        BadInputError: Locust rejected the options.
    """

    layout, died = prepared.layout, w.died
    tail = layout.locust_log.read_text(errors="replace")[-2000:] if died else ""
    if died and (w.rc == EXIT_BAD_INPUT or ("error:" in tail and "usage:" in tail)):
        raise BadInputError(f"locust rejected the options:\n{tail}")
    run_start = read_run_start(layout) or w.start
    end = time.time()
    freed = target.freed
    server_freed = freed.after(cfg.cancel_check) if freed is not None and not died else None
    if died:
        # Locust was killed: the run's end is its last record, not now.
        end = last_record_epoch(load_run(layout.root)) or end
    ended: RunJson = {
        "start": iso_utc(run_start),
        "start_epoch": run_start,
        "end": iso_utc(end),
        "end_epoch": end,
        "aborted": [c.as_dict() for c in w.aborted] or None,
        "aborted_by_alert": w.alert_abort.as_dict() if w.alert_abort is not None else None,
        "alerts": [a.as_dict() for a in w.watch.alerts] if cfg.budget is not None else None,
        "interrupted": w.interrupted is not None,
        "stop_signal": signal_name(w.interrupted),
        "killed": died,
        "overran": w.overran,
        "locust_exit_code": w.rc,
    }
    if server_freed is not None:
        ended["server_freed"] = server_freed
    summary, checks = finalize(layout.root, ended, prepared.slo, extra_checks=w.aborted)
    return _Finalized(summary, list(checks), load_run(layout.root), server_freed, tail)


def _print_report(cfg: RunConfig, prepared: _Prepared, done: _Finalized, w: Watched) -> None:
    """The terminal summary, drift and budget alerts, where the results are and what next."""
    if cfg.quiet:
        return

    out = prepared.layout.root
    print(format_summary(done.summary, list(w.aborted) + done.checks, done.data.run))
    for name, d in (done.summary.get("drift") or {}).items():
        if d.get("verdict") in ("leak", "shrinking", "restarts"):
            slope = (
                "" if d.get("slope_per_h") is None else f": {d['slope_per_h']:+.3g} {d['unit']}/h"
            )
            print(
                f"drift: {name} {d['verdict']}{slope} (start {d.get('start')}, end {d.get('end')})"
            )
    for a in w.watch.alerts:
        stopped = " (abortOnFail: the run stopped)" if a is w.alert_abort else ""
        print(
            f"budget alert {a.name} fired at {a.fired_at}: burn rate {a.burn_long:g} (long), "
            f"{a.burn_short:g} (short) > {a.factor:g}{stopped}"
        )
    print(
        f"\nresults: {out}\nnext:    streamslo verify {out}    # the SLO verdicts (exit 0 / 99)\n"
        f"         streamslo report {out}    # the HTML / Markdown report"
    )


def _exit_code(cfg: RunConfig, prepared: _Prepared, done: _Finalized, w: Watched) -> int:
    """The run's exit code (k6's); a stop signal is raised again once everything is written.

    Raises:
        KeyboardInterrupt: the run was stopped by a signal.
    """

    if w.interrupted is not None:
        raise w.interrupted
    if w.died:
        print(
            f"streamslo run: the load generator (locust) {exit_words(w.rc)} before the run's "
            f"end; what it had written is finalized in {prepared.layout.root} (run.json killed: "
            f"true). See {prepared.layout.locust_log}:\n{done.tail}",
            file=sys.stderr,
        )
        return EXIT_INTERNAL
    if done.server_freed is not None and done.server_freed.get("passed") is False:
        print(f"streamslo run: {done.server_freed['reason']}", file=sys.stderr)
        return EXIT_THRESHOLD
    if any(not c.passed for c in done.checks) or w.aborted or w.alert_abort is not None:
        return EXIT_THRESHOLD
    unmet = thresholds.unmet_requirements(prepared.slo, done.data.run)
    for line in unmet:
        print(f"streamslo run: {line}", file=sys.stderr)
    if unmet:
        return EXIT_THRESHOLD
    if not done.data.valid and not cfg.allow_invalid:
        print(
            f"streamslo run: the run is invalid: {done.data.run.get('invalid_reason')}",
            file=sys.stderr,
        )
        return EXIT_THRESHOLD
    return EXIT_OK


def prepare_out(out: Path) -> None:
    """Create the results directory ``out`` (new or empty) and make sure it can be written.

    Raises:
        BadInputError: not empty, not a directory, or not writable (the message names the
            path and the reason).
    """

    try:
        if out.exists() and not out.is_dir():
            raise BadInputError(
                f"--out {out}: a file is there, not a directory (choose a new --out)"
            )
        if out.exists() and any(out.iterdir()):
            raise BadInputError(
                f"--out {out}: the results directory is not empty (choose a new --out)"
            )
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as exc:
        reason = exc.strerror or str(exc)
        if exc.errno == errno.ENOTDIR or (exc.errno == errno.EEXIST and not out.is_dir()):
            reason = "a parent of it is a file, not a directory"
        where = exc.filename if isinstance(exc.filename, str) and exc.filename != str(out) else None
        raise BadInputError(
            f"--out {out}: cannot create or write the results directory: {reason}"
            + (f" ({where})" if where else "")
        ) from None


def _answers(cfg: RunConfig, path: str) -> bool:
    """Whether the target answers ``GET path`` (any status) within 3 s."""

    try:
        fetch(Target.from_url(cfg.host, cfg.headers.as_dict(), cfg.insecure), path, timeout=3.0)
    except (OSError, ProtocolError, ValueError):
        return False
    return True
