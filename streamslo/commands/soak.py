"""``streamslo soak``: a long run of a scenario, with windows, an error budget, drift verdicts
and thresholds that can abort (``docs/soak.md``).

The scenario file gives the load (k6 executors in ``[scenarios.NAME]`` tables, ramping or at a
constant VU count or arrival rate, ``docs/scenarios.md``; or, in ``[load]``, k6-style
``stages``, a constant ``users`` load for ``duration``, or ``request_rate``), the thresholds
(``[thresholds]``, usually with ``abortOnFail``) and the budget (``[budget]``). Every option of
``streamslo run`` applies (``--host``, ``--out``, ``--max-tokens``, ``--window``,
``--metrics-url``...). Without ``--host`` (and no ``host`` in the scenario) the bundled server is
started in fixed mode for the length of the soak, and its processes are watched for leaks.
"""

from __future__ import annotations

import argparse
import datetime as dt
from dataclasses import dataclass, field, replace
from pathlib import Path

from streamslo.options import declare
from streamslo.options.run_options import add_cli_arguments
from streamslo.options.values import Text, flag_option

__all__ = ["SoakOptions", "add_arguments", "main"]


@dataclass(frozen=True)
class SoakOptions:
    """``soak``'s own option, beside ``run``'s (docs/soak.md)."""

    serve: str = field(
        default="--mode fixed --server gunicorn --workers 1",
        metadata=flag_option(
            Text(optional=False, name="OPTIONS"),
            "streamslo serve options when the bundled server is started",
        ),
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``streamslo run``'s options (the scenario required), and how to start the bundled server."""
    add_cli_arguments(
        p,
        required=("scenario",),
        help={
            "scenario": "scenario TOML ([scenarios.*], [load], [thresholds], [budget])",
            "host": "server base URL (default: the scenario's, else the bundled server)",
            "out": "results directory (default results/soak-<timestamp>)",
            "slo_source": "an SLO file instead of the scenario's thresholds",
        },
    )
    declare.add_arguments(p, SoakOptions)


def main(args: argparse.Namespace) -> int:
    """``streamslo soak``."""
    from streamslo.options.stages import parse_stages, total_duration
    from streamslo.run.execute import config_from_args, execute
    from streamslo.scenario_files import resolve_scenario
    from streamslo.server.bundled import split_cpus, start_bundled
    from streamslo.workload.scenario_file import read_scenario

    # A file, or a packaged name (nightly); read once: its host here, the rest in the config.
    scenario = read_scenario(resolve_scenario(args.scenario))
    args.scenario = scenario.path
    out = args.out or Path("results") / f"soak-{dt.datetime.now():%Y%m%d-%H%M%S}"
    host = args.host or scenario.values.get("host")
    server = None
    server_cpus, gen_cpus = split_cpus()
    if not host:
        out.mkdir(parents=True, exist_ok=True)
        server = start_bundled(args.serve, out.parent / f"{out.name}-server.log", server_cpus)
        host = server.url
    try:
        args.host, args.out = host, out
        if args.generator_cpus is None:
            args.generator_cpus = gen_cpus
        cfg = config_from_args(args, scenario)
        # [scenarios.*] set their own length (config_from_args); a stages run lasts as long as
        # its stages; else --duration.
        if cfg.stages:
            stages = parse_stages(cfg.stages)
            cfg = replace(
                cfg, duration=total_duration(stages), users=max(1, max(st.target for st in stages))
            )
        code = execute(cfg)
        from streamslo.history.record import record_after_run

        record_after_run(cfg.history, cfg.out)
        return code
    finally:
        if server is not None:
            server.stop()
