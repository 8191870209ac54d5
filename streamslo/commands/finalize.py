"""``streamslo finalize DIR``: finalize the results directory of a run that was killed. The
shell; :mod:`streamslo.runfiles.finalize` does it."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from streamslo.options import declare
from streamslo.options.values import Text, flag_option
from streamslo.results.layout import Layout, read_json
from streamslo.results.schema import RunJson
from streamslo.runfiles.finalize import finalize_killed

__all__ = ["FinalizeOptions", "add_arguments", "main"]


@dataclass(frozen=True)
class FinalizeOptions:
    """``streamslo finalize``'s options (docs/results.md)."""

    run_dir: str = field(
        metadata=flag_option(
            Text(optional=False, name="DIR"),
            "the results directory of a run that was killed",
            positional=True,
        )
    )
    slo: str | None = field(
        default=None,
        metadata=flag_option(
            Text(name="FILE"),
            "SLO file to check (default: the one the run used, else the incidents' SLO)",
        ),
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``streamslo finalize DIR [--slo FILE]`` (:class:`FinalizeOptions`)."""
    declare.add_arguments(p, FinalizeOptions)


def main(args: argparse.Namespace) -> int:
    """``streamslo finalize``: 0 once the directory is complete (whatever its thresholds say;
    ``streamslo verify`` is the gate), 2 when it is not a readable results directory."""
    from streamslo.errors import EXIT_OK
    from streamslo.results.summary_table import format_summary
    from streamslo.slo import thresholds

    slo = thresholds.load_slo(args.slo) if args.slo else None
    summary, checks, done = finalize_killed(Path(args.run_dir), slo)
    run = cast(RunJson, read_json(Layout(Path(args.run_dir)).run_json))
    print(format_summary(summary, checks, run))
    if done:
        print(
            f"\nstreamslo finalize: {args.run_dir} finalized (complete: true, killed: true; "
            f"end {run.get('end')}, its last record)"
        )
    else:
        print(
            f"\nstreamslo finalize: {args.run_dir} was already complete; nothing changed",
            file=sys.stderr,
        )
    return EXIT_OK
