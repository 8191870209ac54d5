"""``streamslo report [BEFORE_DIR] AFTER_DIR [--out FILE] [--slo FILE]``.

One directory reports a single run; two compare them. Writes ``report.html`` (``--out``,
default ``report.html`` in the current folder) with ``report.md`` and ``report.json`` beside
it, then prints the summary table and where the HTML is. Exit codes: 0 the report was written,
2 bad input (a missing or damaged results file, an SLO file that does not parse).
"""

from __future__ import annotations

import argparse
import sys

from streamslo.errors import EXIT_OK, BadInputError

__all__ = ["add_arguments", "main"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``streamslo report``'s arguments to ``parser``."""
    parser.add_argument(
        "dirs", nargs="+", metavar="DIR",
        help="[BEFORE_DIR] AFTER_DIR: one results directory reports it, two compare them",
    )
    parser.add_argument(
        "--out", default="report.html", metavar="FILE",
        help="the HTML file; .md and .json are written beside it (default: report.html)",
    )
    parser.add_argument(
        "--slo", default=None, metavar="FILE",
        help="SLO thresholds (TOML); default: the incidents' SLO",
    )
    parser.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    parser.add_argument(
        "--resamples", type=int, default=1000,
        help="bootstrap resamples of whole streams (default 1000; fewer for huge runs)",
    )


def main(args: argparse.Namespace) -> int:
    """Run ``streamslo report``; returns the exit code."""
    dirs = list(args.dirs)
    if len(dirs) > 2:
        raise BadInputError(f"expected [BEFORE_DIR] AFTER_DIR, got {len(dirs)} directories")
    if args.resamples < 1:
        raise BadInputError(f"--resamples must be positive, not {args.resamples}")
    from streamslo.reports.build import build_report

    before = dirs[0] if len(dirs) == 2 else None
    result = build_report(before, dirs[-1], args.out, args.slo, seed=args.seed,
                          resamples=args.resamples)
    print(result.summary)
    print()
    print(f"report: {result.html.resolve()}")
    print(f"        {result.markdown.resolve()}")
    print(f"        {result.json.resolve()}")
    sys.stdout.flush()
    return EXIT_OK
