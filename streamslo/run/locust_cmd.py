"""Locust's command line for a run (docs/cli.md): its own options translated from the run's,
then every stream-user option that differs from its default; and the command a worker of a
``--master`` runs.

Secrets never go on a command line (``ps`` and CI logs show them): :meth:`RunConfig.locust_environment`
hands them to the child through its environment.
"""

from __future__ import annotations

import math
import sys
from dataclasses import replace
from pathlib import Path

from streamslo.options.run_options import locust_argv
from streamslo.run.config import RunConfig
from streamslo.server.bundled import free_port

__all__ = [
    "LOAD_START_SLACK_S",
    "LOCUSTFILE",
    "SCENARIO_SLACK_S",
    "locust_command",
    "run_time",
    "waiting_words",
]

#: The locustfile ``streamslo run`` starts (and a ``--master``'s workers run): the package's own.
LOCUSTFILE = Path(__file__).resolve().parents[1] / "loadgen" / "locustfile.py"

#: Plain runs: how long past the load's own end Locust's ``--run-time`` (a safety net) waits.
LOAD_START_SLACK_S = 60.0
#: ``[scenarios.*]`` runs: how long after the last scenario's end Locust's ``--run-time``
#: stops a run whose scenarios did not end it (a lost worker).
SCENARIO_SLACK_S = 30.0


def locust_command(cfg: RunConfig, locustfile: Path = LOCUSTFILE) -> list[str]:
    """Locust's command line: its own options translated, then every stream-user option that
    differs from its default (never a secret: see :meth:`RunConfig.locust_environment`)."""
    run_time_s, load_time = run_time(cfg)
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
        f"{max(1, round(run_time_s))}s",
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


def run_time(cfg: RunConfig) -> tuple[float, float]:
    """Locust's ``--run-time`` (a safety net past the load's own end) and the load's length
    from its first request (0: the scenarios, a trace or the stages end it)."""
    total = cfg.warmup + cfg.duration
    load_time = 0.0
    if cfg.scenarios or cfg.trace:
        # The scenarios (a trace) end the run themselves (Locust's clock starts before they do): its
        # run time is only a safety net.
        total += SCENARIO_SLACK_S
    elif not cfg.stages and not cfg.shape:
        # The load lasts --duration from its first request (loadgen/loadtime.py): Locust's
        # clock starts before the spawn and the model lookup, which took 2.2 s of a 5 s run.
        load_time = total
        total += LOAD_START_SLACK_S
    return total, load_time


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


def waiting_words(cfg: RunConfig) -> str:
    """What a master says while no worker has started the load."""
    n = cfg.expect_workers
    return (
        f"streamslo run: master waiting for {n} worker{'s' if n != 1 else ''} on "
        f"{cfg.master_bind_host}:{cfg.master_bind_port}; the run starts when {'all' if n != 1 else 'it'} "
        f"connected. Start {'each' if n != 1 else 'it'} with: locust -f {LOCUSTFILE} --worker "
        f"--master-host HOST --master-port {cfg.master_bind_port}"
    )
