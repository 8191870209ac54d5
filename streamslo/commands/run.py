"""``streamslo run``: a headless Locust run that writes a results directory (docs/results.md,
docs/cli.md). The shell: the options and the entry point; :mod:`streamslo.run.execute` runs it."""

from __future__ import annotations

import argparse

from streamslo.options.redact import install_log_redaction
from streamslo.options.run_options import add_cli_arguments
from streamslo.run.execute import config_from_args, execute

__all__ = ["add_arguments", "main"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``streamslo run`` options, from the run-options table (``docs/cli.md``).
    Defaults are None, so that a scenario's values apply where the command line is silent."""
    add_cli_arguments(p, required=("out",))


def main(args: argparse.Namespace) -> int:
    """``streamslo run``."""
    from streamslo.history.record import record_after_run

    cfg = config_from_args(args)
    install_log_redaction(cfg.headers.redactor())
    code = execute(cfg)
    record_after_run(cfg.history, cfg.out)
    return code
