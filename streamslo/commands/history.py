"""``streamslo history``: runs kept over time, their trends, and a regression verdict
(docs/history.md).

- ``streamslo history add DIR... [--store PATH]`` adds finished results directories to the
  store (made when missing; a run already there is not added twice).
- ``streamslo history [--store PATH] [--slo FILE] [--metric M ...] [--last N] [--baseline K]
  [--out FILE]`` judges the newest run of a series (the newest run's, or ``--scenario`` and
  ``--target``) against the last K runs before it that passed, and writes ``history.html``
  (trend charts), ``history.md`` (for a CI comment) and ``history.json``.

The store: ``--store``, else ``$STREAMSLO_HISTORY``, else ``.streamslo/history.sqlite``.
Exit codes: 0 no regression (or no verdict yet), 99 the newest run is a regression, 2 bad
input (a results directory that is missing or not finalized, a store that is not one, an SLO
file that does not parse).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

from streamslo.errors import EXIT_OK
from streamslo.options import declare
from streamslo.options.values import Integer, PathValue, Text, TextList, flag_option

__all__ = ["HistoryOptions", "add_arguments", "main"]


@dataclass(frozen=True)
class HistoryOptions:
    """``streamslo history``'s options and ``history add``'s (docs/history.md)."""

    dirs: tuple[str, ...] = field(
        default=(),
        metadata=flag_option(
            TextList(name="DIR"), "history add: results directories", positional=True
        ),
    )
    store: Path | None = field(
        default=None,
        metadata=flag_option(
            PathValue(name="PATH"),
            "the history store (default: $STREAMSLO_HISTORY, else .streamslo/history.sqlite)",
        ),
    )
    scenario: str | None = field(
        default=None,
        metadata=flag_option(
            Text(name="NAME"), "the series' scenario name (default: the newest run's series)"
        ),
    )
    target: str | None = field(
        default=None,
        metadata=flag_option(Text(name="NAME"), "the series' target (default: the newest run's)"),
    )
    slo: Path | None = field(
        default=None,
        metadata=flag_option(
            PathValue(name="FILE"),
            "an SLO file whose [regression] table sets the baseline, margins and metrics",
        ),
    )
    metric: tuple[str, ...] = field(
        default=(),
        metadata=flag_option(
            TextList(name="M"),
            "a metric to show and judge (repeatable; default: the [regression] metrics), "
            "e.g. itl_ms.p99, ttft_ms.p50, truncation_rate, tokens_per_s",
        ),
    )
    last: int | None = field(
        default=None, metadata=flag_option(Integer(), "runs in the trend (default 30)")
    )
    baseline: int | None = field(
        default=None,
        metadata=flag_option(Integer(), "judge against the last K runs that passed (default 7)"),
    )
    out: Path | None = field(
        default=None,
        metadata=flag_option(
            PathValue(name="FILE"),
            "history.html (and .md, .json beside it), a folder for them, or a .md or .json "
            "file alone (default: ./history.html)",
        ),
    )
    seed: int = field(default=0, metadata=flag_option(Integer(), "bootstrap seed"))


#: ``history add``'s options (the store and the series given before ``add`` stand).
ADD_OPTIONS = ("dirs", "store", "scenario", "target")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``history``'s options, and ``history add``'s (:class:`HistoryOptions`)."""
    declare.add_arguments(p, HistoryOptions, exclude=("dirs",))
    sub = p.add_subparsers(dest="history_action", metavar="add", parser_class=type(p))
    add = sub.add_parser(
        "add",
        help="add finished results directories to the store",
        description="add finished results directories to the history store",
    )
    declare.add_arguments(
        add,
        HistoryOptions,
        only=ADD_OPTIONS,
        required=("dirs",),
        suppress=True,
        help={
            "dirs": "results directories",
            "scenario": "the series' scenario name (default: from run.json)",
            "target": "the series' target (default: from run.json)",
        },
    )


def _add(args: argparse.Namespace) -> int:
    from streamslo.history.record import read_run
    from streamslo.history.store import open_store, store_path

    path = store_path(args.store)
    # Every directory is read (and refused, with its name) before any is added.
    runs = [read_run(d, scenario=args.scenario, target=args.target) for d in args.dirs]
    with open_store(path, create=True) as store:
        for d, (run, windows) in zip(args.dirs, runs, strict=True):
            _, new = store.add(run, windows)
            total = next(
                s.runs
                for s in store.series()
                if (s.scenario, s.target) == (run.scenario, run.target)
            )
            what = "added" if new else "already in the store:"
            print(
                f"{what} {d} (series {run.scenario} against {run.target}, {total} runs; "
                f"thresholds {'held' if run.passed else 'failed' if run.passed is False else 'unknown'})"
            )
    print(f"store: {path}")
    return EXIT_OK


def main(args: argparse.Namespace) -> int:
    """``streamslo history``: exit 0 no regression, 99 a regression, 2 bad input."""
    if getattr(args, "history_action", None) == "add":
        return _add(args)
    from streamslo.history.outputs import summary_lines, write_history
    from streamslo.history.series import build_history, with_overrides
    from streamslo.history.store import store_path
    from streamslo.slo.regression import DEFAULT_REGRESSION, read_regression

    settings = read_regression(args.slo) if args.slo is not None else DEFAULT_REGRESSION
    settings = with_overrides(settings, args.metric, args.last, args.baseline)
    report = build_history(
        store_path(args.store),
        settings,
        scenario=args.scenario,
        target=args.target,
        seed=args.seed,
    )
    written = write_history(report, args.out)
    print(summary_lines(report))
    print("\nhistory: " + "\n         ".join(str(p) for p in written.paths()))
    return report.exit_code
