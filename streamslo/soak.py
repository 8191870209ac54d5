"""``streamslo soak``: a staged long run (k6-style ``stages``) with thresholds that can abort.

The scenario file gives the load (``[load]``, with ``stages``) and the thresholds
(``[thresholds]``, usually with ``abortOnFail``). Without ``--host`` (and no ``host`` in the
scenario) the bundled server is started in fixed mode for the length of the soak.
"""

from __future__ import annotations

import argparse
import datetime as dt
from dataclasses import replace
from pathlib import Path

from streamslo.errors import BadInputError
from streamslo.run_options import add_cli_arguments

__all__ = ["add_arguments", "main"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``streamslo run``'s options (the scenario required), and how to start the bundled server."""
    add_cli_arguments(
        p,
        required=("scenario",),
        help={
            "scenario": "scenario TOML ([load] with stages, [thresholds])",
            "host": "server base URL (default: the scenario's, else the bundled server)",
            "out": "results directory (default results/soak-<timestamp>)",
            "slo_source": "an SLO file instead of the scenario's thresholds",
        },
    )
    p.add_argument("--serve", default="--mode fixed --server gunicorn --workers 1", help="streamslo serve options when the bundled server is started")


def main(args: argparse.Namespace) -> int:
    """``streamslo soak``."""
    import shlex

    from streamslo.bundled import BundledServer
    from streamslo.compare import split_cpus
    from streamslo.runner import config_from_args, execute, load_scenario
    from streamslo.stages import parse_stages, total_duration

    values, _ = load_scenario(args.scenario)
    if not (args.stages or values.get("stages")):
        raise BadInputError(f"{args.scenario}: a soak scenario needs [load] stages")
    out = args.out or Path("results") / f"soak-{dt.datetime.now():%Y%m%d-%H%M%S}"
    host = args.host or values.get("host")
    server = None
    server_cpus, gen_cpus = split_cpus()
    if not host:
        out.mkdir(parents=True, exist_ok=True)
        server = BundledServer(shlex.split(args.serve), out.parent / f"{out.name}-server.log", server_cpus)
        server.wait_ready()
        host = server.url
    try:
        args.host, args.out = host, out
        if args.generator_cpus is None:
            args.generator_cpus = gen_cpus
        cfg = config_from_args(args)
        # A stages run lasts as long as its stages.
        stages = parse_stages(cfg.stages)
        cfg = replace(cfg, duration=total_duration(stages), users=max(1, max(st.target for st in stages)))
        return execute(cfg)
    finally:
        if server is not None:
            server.stop()
