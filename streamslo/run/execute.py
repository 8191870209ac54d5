"""A headless Locust run that writes a results directory (docs/results.md, docs/cli.md): what
``streamslo run`` (:mod:`streamslo.commands.run`), ``compare``, ``soak`` and ``sweep`` execute.

Locust runs as a subprocess (it monkey-patches the interpreter with gevent); this process
watches it: it scrapes the target's evidence, reads the windows and running totals as they
come (:mod:`streamslo.run.watch`: live ``abortOnFail``, burn-rate alerts, progress, the Prometheus
exporter), finalizes the directory, prints the summary and returns the exit code.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Any

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
from streamslo.options.run_options import (
    locust_argv,
)
from streamslo.results.layout import Layout, load_run, new_run_json, read_run_start, write_json
from streamslo.results.summary_table import format_summary
from streamslo.run.adapt import Prepared, prepare_requests
from streamslo.run.config import RunConfig, config_from_args
from streamslo.run.evidence import ServerEvidence
from streamslo.run.exporter import GeneratorExporter
from streamslo.run.freed import FreedCheck
from streamslo.run.progress import Progress
from streamslo.run.signals import exit_code_of
from streamslo.run.watch import RunWatch
from streamslo.runfiles.finalize import finalize, iso_utc, last_record_epoch
from streamslo.server.bundled import free_port
from streamslo.slo import thresholds
from streamslo.stream.dialects import ENDPOINT_APIS
from streamslo.stream.envelope import WSEnvelope
from streamslo.stream.truth import forcing_text
from streamslo.transport.common import Target
from streamslo.transport.fetch import fetch
from streamslo.workload.requests import RequestOptions, Workload, resolve_system_prompt
from streamslo.workload.scenarios import from_wire

if TYPE_CHECKING:
    from streamslo.results.schema import RunJson

__all__ = ["RunConfig", "config_from_args", "execute", "prepare_out"]

# (RunConfig and config_from_args live in streamslo.run.config; named here too, since every
# command that runs one imports them beside execute.)


#: Plain runs: how long past the load's own end Locust's ``--run-time`` (a safety net) waits.
LOAD_START_SLACK_S = 60.0
#: ``[scenarios.*]`` runs: how long after the last scenario's end Locust's ``--run-time``
#: stops a run whose scenarios did not end it (a lost worker).
SCENARIO_SLACK_S = 30.0


def _describe_scenarios(wire: str) -> list[dict[str, Any]] | None:
    """run.json's ``scenarios``: each one's name, executor and schedule (None without)."""
    if not wire:
        return None

    return [
        {
            "name": sc.name,
            "executor": sc.executor,
            "start_s": sc.start_time,
            "duration_s": sc.duration,
            "graceful_stop_s": sc.graceful_stop,
            "peak_vus": sc.peak_vus(),
            "protocol": dict(sc.protocol) if sc.protocol is not None else None,
        }
        for sc in from_wire(wire)
    ]


def _locust_command(cfg: RunConfig, locustfile: Path) -> list[str]:
    """Locust's command line: its own options translated, then every stream-user option that
    differs from its default (never a secret: see :meth:`RunConfig.locust_environment`)."""
    run_time, load_time = _run_time(cfg)
    spawn = cfg.spawn_rate if cfg.spawn_rate > 0 else float(cfg.users)
    # The open loop splits --request-rate over the generating processes: a master's workers.
    forwarded = (
        replace(cfg, processes=cfg.expect_workers, load_time=load_time)
        if cfg.master
        else replace(cfg, load_time=load_time)
    )
    # The web UI tab checks the run's SLO: its file, or the scenario holding the thresholds.
    if not cfg.slo_source and cfg.slo is not None and cfg.scenario:
        forwarded = replace(forwarded, slo_source=cfg.scenario)
    cmd = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(locustfile),
        "--headless",
        "--host",
        cfg.host,
        "-u",
        str(cfg.users),
        "-r",
        f"{spawn:g}",
        "--run-time",
        f"{max(1, round(run_time))}s",
        "--stop-timeout",
        str(math.ceil(cfg.drain)),
        "--exit-code-on-error",
        "0",
        "--only-summary",
        "--loglevel",
        "WARNING",
        *locust_argv(forwarded),
        *_process_options(cfg),
    ]
    if cfg.generator_cpus:
        cmd = ["taskset", "-c", cfg.generator_cpus, *cmd]
    return [*cmd, *cfg.extra_locust_args]


def _run_time(cfg: RunConfig) -> tuple[float, float]:
    """Locust's ``--run-time`` (a safety net past the load's own end) and the load's length
    from its first request (0: the scenarios, a trace or the stages end it)."""
    run_time = cfg.warmup + cfg.duration
    load_time = 0.0
    if cfg.scenarios or cfg.trace:
        # The scenarios (a trace) end the run themselves (Locust's clock starts before they do): its
        # run time is only a safety net.
        run_time += SCENARIO_SLACK_S
    elif not cfg.stages and not cfg.shape:
        # The load lasts --duration from its first request (loadgen/loadtime.py): Locust's
        # clock starts before the spawn and the model lookup, which took 2.2 s of a 5 s run.
        load_time = run_time
        run_time += LOAD_START_SLACK_S
    return run_time, load_time


def _process_options(cfg: RunConfig) -> list[str]:
    """Locust's options for a master (workers elsewhere) or local processes."""
    if cfg.master:
        return [
            "--master",
            "--expect-workers",
            str(cfg.expect_workers),
            "--master-bind-host",
            cfg.master_bind_host,
            "--master-bind-port",
            str(cfg.master_bind_port),
        ]
    if cfg.processes <= 1:
        return []
    # Locust's master binds every interface unless told otherwise; its forks are local.
    # A free port of its own: on the default one (5557), two runs on one machine take each
    # other's workers (seen: "Discarded report from unrecognized worker", windows and
    # Locust's own statistics lost). Locust needs the port twice, or its forks hang.

    port = str(free_port())
    return [
        "--processes",
        str(cfg.processes),
        "--master-bind-host",
        "127.0.0.1",
        "--master-bind-port",
        port,
        "--master-port",
        port,
    ]


@dataclass
class _Prepared:
    """Phase 1, before any load: the results directory, what the run sends, the target's answer."""

    layout: Any
    """The directory's :class:`~streamslo.results.layout.Layout`."""
    slo: Any
    workload: dict[str, Any]
    requests: Prepared
    """The preflight's findings, the adapted configuration and the truth the run can check."""

    @property
    def preflight(self) -> list[dict[str, Any]] | None:
        return self.requests.preflight


@dataclass
class _Target:
    """Phase 2: what the target says of itself before the load (and the baseline the freed
    check returns to)."""

    evidence: Any
    """The :class:`~streamslo.run.evidence.ServerEvidence` that scrapes it during the run."""
    server: dict[str, Any] | None
    freed: Any = None


@dataclass
class _Watched:
    """Phases 3 and 4: how the load generator's run went."""

    start: float
    watch: Any
    rc: int | None = None
    aborted: list[Any] = field(default_factory=list)
    alert_abort: Any = None
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


@dataclass
class _Finalized:
    """Phase 5: the finalized directory."""

    summary: Any
    checks: list[Any]
    data: Any
    """The run as loaded after finalizing (:class:`~streamslo.results.layout.RunData`)."""
    server_freed: dict[str, Any] | None
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
    watched = _launch_and_watch(cfg, prepared, target, start)
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
        workload = _describe_workload(cfg)  # a bad dataset or tokenizer: exit 2 before any load
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
        "protocol_mix": _mix(cfg),
        "endpoint": cfg.endpoint,
        "api": cfg.api or ENDPOINT_APIS[cfg.endpoint],
        "max_tokens": cfg.max_tokens,
        "stall_timeout": cfg.stall_timeout,
        "request_timeout": cfg.request_timeout,
        "request_rate": cfg.request_rate or None,
        "scenarios": _describe_scenarios(cfg.scenarios),
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


def _launch_and_watch(
    cfg: RunConfig, prepared: _Prepared, target: _Target, start: float
) -> _Watched:
    """Start Locust and watch it to its end (live thresholds, alerts, progress); a stop signal
    stops it as at the end of a run (streams in flight get the drain)."""
    locustfile = Path(__file__).resolve().parents[1] / "loadgen" / "locustfile.py"
    env = dict(os.environ, STREAMSLO_RUNNER="1", PYTHONUNBUFFERED="1", **cfg.locust_environment())
    watched = _Watched(start, _new_watch(cfg, prepared.slo, prepared.layout.root))
    proc: subprocess.Popen[bytes] | None = None
    with open(prepared.layout.locust_log, "wb") as log:
        try:
            proc = subprocess.Popen(
                _locust_command(cfg, locustfile),
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
            target.evidence.start()
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
            target.evidence.stop()
            watched.watch.finish(time.time() - start)
            if watched.watch.exporter is not None:
                watched.watch.exporter.stop()
    watched.rc = proc.returncode if proc is not None else None
    return watched


def _finalize(cfg: RunConfig, prepared: _Prepared, target: _Target, w: _Watched) -> _Finalized:
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
        "stop_signal": _signal_name(w.interrupted),
        "killed": died,
        "overran": w.overran,
        "locust_exit_code": w.rc,
    }
    if server_freed is not None:
        ended["server_freed"] = server_freed
    summary, checks = finalize(layout.root, ended, prepared.slo, extra_checks=w.aborted)
    return _Finalized(summary, list(checks), load_run(layout.root), server_freed, tail)


def _print_report(cfg: RunConfig, prepared: _Prepared, done: _Finalized, w: _Watched) -> None:
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


def _exit_code(cfg: RunConfig, prepared: _Prepared, done: _Finalized, w: _Watched) -> int:
    """The run's exit code (k6's); a stop signal is raised again once everything is written.

    Raises:
        KeyboardInterrupt: the run was stopped by a signal.
    """

    if w.interrupted is not None:
        raise w.interrupted
    if w.died:
        print(
            f"streamslo run: the load generator (locust) {_exit_words(w.rc)} before the run's "
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


def _describe_workload(cfg: RunConfig) -> dict[str, Any]:
    """What ``run.json`` keeps about the prompts (``workload``: source, dataset name and
    sha256, lengths, turns); reading the inputs here rejects a bad one before Locust starts.

    Raises:
        BadInputError: an unreadable dataset, prompt file, tokenizer, system prompt file or
            WebSocket request template.
    """

    resolve_system_prompt(cfg.system_prompt)
    envelope = WSEnvelope.from_options(
        cfg.ws_request_template, cfg.ws_chunk_path, cfg.ws_done_message
    )
    out = Workload(cfg).describe()
    if not envelope.plain:
        out["ws_envelope"] = {
            "request_template": cfg.ws_request_template,
            "chunk_path": cfg.ws_chunk_path,
            "done_message": cfg.ws_done_message,
        }
    return out


def _answers(cfg: RunConfig, path: str) -> bool:
    """Whether the target answers ``GET path`` (any status) within 3 s."""

    try:
        fetch(Target.from_url(cfg.host, cfg.headers.as_dict(), cfg.insecure), path, timeout=3.0)
    except (OSError, ProtocolError, ValueError):
        return False
    return True


def _signal_name(exc: KeyboardInterrupt | None) -> str | None:

    return None if exc is None else signal.Signals(exit_code_of(exc) - 128).name


def _exit_words(rc: int | None) -> str:
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


def _mix(cfg: RunConfig) -> dict[str, float]:
    f = cfg.slow_readers
    if cfg.protocol == "mixed":
        return {"sse": 0.5, "ws": 0.5, "slow_readers": f}
    return {cfg.protocol: 1.0, "slow_readers": f}


def _new_watch(cfg: RunConfig, slo: Any, out: Path) -> Any:
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
    return RunWatch(out, slo, cfg.budget, cfg.warmup + cfg.duration, progress, exporter)


def _watch(
    proc: subprocess.Popen[bytes], cfg: RunConfig, watch: Any
) -> tuple[list[Any], Any, bool]:
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
                    print(_waiting_words(cfg), file=sys.stderr, flush=True)
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


def _waiting_words(cfg: RunConfig) -> str:
    """What a master says while no worker has started the load."""
    n = cfg.expect_workers
    locustfile = Path(__file__).resolve().parent / "loadgen" / "locustfile.py"
    return (
        f"streamslo run: master waiting for {n} worker{'s' if n != 1 else ''} on "
        f"{cfg.master_bind_host}:{cfg.master_bind_port}; the run starts when {'all' if n != 1 else 'it'} "
        f"connected. Start {'each' if n != 1 else 'it'} with: locust -f {locustfile} --worker "
        f"--master-host HOST --master-port {cfg.master_bind_port}"
    )


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
