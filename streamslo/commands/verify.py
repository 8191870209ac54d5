"""``streamslo verify DIR``: the SLO checks over a run, as pytest (docs/cli.md). The shell: the
options and the entry point; :mod:`streamslo.verify.runner` runs pytest over the run."""

from __future__ import annotations

import argparse

from streamslo.verify.runner import add_verify_arguments, verify

__all__ = ["add_arguments", "main"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``verify``'s options."""
    add_verify_arguments(p)


def main(args: argparse.Namespace) -> int:
    """``streamslo verify``: exit 0 every threshold held, 99 one failed, 2 bad input."""
    return verify(args)
