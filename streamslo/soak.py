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

__all__ = ["add_arguments", "main"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scenario", required=True, help="scenario TOML ([load] with stages, [thresholds])")
    p.add_argument("--host", help="server base URL (default: the scenario's, else the bundled server)")
    p.add_argument("--out", type=Path, help="results directory (default results/soak-<timestamp>)")
    p.add_argument("--serve", default="--mode fixed --server gunicorn --workers 1", help="streamslo serve options when the bundled server is started")
    p.add_argument("--slo", help="an SLO file instead of the scenario's thresholds")
    p.add_argument("--allow-invalid", action="store_true", help="a saturated generator does not fail the soak")


def main(args: argparse.Namespace) -> int:
    """``streamslo soak``."""
    import shlex

    from streamslo.bundled import BundledServer
    from streamslo.compare import split_cpus
    from streamslo.runner import config_from_args, execute, load_scenario
    from streamslo.stages import parse_stages, total_duration

    values, _ = load_scenario(args.scenario)
    if not values.get("stages"):
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
        run_args = argparse.Namespace(**{k: None for k in _RUN_KEYS})
        run_args.scenario = args.scenario
        run_args.host = host
        run_args.out = out
        run_args.slo = args.slo
        run_args.allow_invalid = args.allow_invalid or None
        run_args.generator_cpus = gen_cpus
        run_args.quiet = False
        cfg = config_from_args(run_args)
        # A stages run lasts as long as its stages.
        stages = parse_stages(cfg.stages)
        cfg = replace(cfg, duration=total_duration(stages), users=max(1, max(st.target for st in stages)))
        return execute(cfg)
    finally:
        if server is not None:
            server.stop()


_RUN_KEYS = (
    "host", "out", "protocol", "users", "spawn_rate", "duration", "max_tokens", "slow_readers",
    "stall_timeout", "request_timeout", "drain", "warmup", "processes", "coalesced_chunks",
    "scenario", "slo", "model", "endpoint", "api_key_env", "header", "insecure", "prompt_file",
    "prompt_tokens", "seed", "request_rate", "burstiness", "max_concurrency", "no_ignore_eos",
    "no_usage", "no_done_marker", "stages", "shape", "allow_invalid", "generator_cpus", "quiet",
)
