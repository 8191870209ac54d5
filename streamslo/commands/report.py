"""``streamslo report [BEFORE_DIR] AFTER_DIR [--out PATH] [--force] [--slo FILE]``.

One directory reports a single run; two compare them. The report is three files,
``report.html``, ``report.md`` and ``report.json``, in one folder:

- by default ``report-<RUN>/`` in the current folder, named for the run's directory
  (``report-<BEFORE>-vs-<AFTER>/`` for a comparison);
- ``--out DIR`` puts them in ``DIR``; ``--out FILE.html`` names the HTML file itself (the
  Markdown and JSON take its stem).

An existing report is never overwritten without ``--force``. It then prints the summary table
and where the files are. Exit codes: 0 the report was written, 2 bad input (a missing or
damaged results file, an SLO file that does not parse, a report already there, a path that
cannot be written).
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from streamslo.errors import EXIT_OK, BadInputError
from streamslo.options import declare
from streamslo.options.values import Integer, Switch, Text, TextList, flag_option

__all__ = ["ReportOptions", "add_arguments", "default_out", "main", "report_paths"]


@dataclass(frozen=True)
class ReportOptions:
    """``streamslo report``'s options (docs/report.md)."""

    dirs: tuple[str, ...] = field(
        metadata=flag_option(
            TextList(name="DIR"),
            "[BEFORE_DIR] AFTER_DIR: one results directory reports it, two compare them",
            positional=True,
        )
    )
    out: str | None = field(
        default=None,
        metadata=flag_option(
            Text(name="PATH"),
            "a folder for report.html, report.md and report.json, or the .html file itself "
            "(default: report-<RUN>/ or report-<BEFORE>-vs-<AFTER>/ in the current folder)",
        ),
    )
    force: bool = field(
        default=False,
        metadata=flag_option(Switch(), "overwrite a report that is already there"),
    )
    slo: str | None = field(
        default=None,
        metadata=flag_option(
            Text(name="FILE"), "SLO thresholds (TOML); default: the incidents' SLO"
        ),
    )
    seed: int = field(default=0, metadata=flag_option(Integer(), "bootstrap seed"))
    resamples: int = field(
        default=1000,
        metadata=flag_option(
            Integer(1), "bootstrap resamples of whole streams (fewer for huge runs)"
        ),
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``streamslo report``'s options (:class:`ReportOptions`) to ``parser``."""
    declare.add_arguments(parser, ReportOptions)


def _slug(path: str) -> str:
    name = Path(path).resolve().name or "run"
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "run"


def default_out(dirs: list[str]) -> Path:
    """``report-<RUN>`` or ``report-<BEFORE>-vs-<AFTER>`` in the current folder."""
    return Path("report-" + "-vs-".join(_slug(d) for d in dirs))


def report_paths(out: str | Path) -> tuple[Path, Path, Path]:
    """The HTML, Markdown and JSON files ``--out`` names (a folder, or the .html file)."""
    p = Path(out)
    html = p if p.suffix.lower() in (".html", ".htm") else p / "report.html"
    return html, html.with_suffix(".md"), html.with_suffix(".json")


def _prepare(out: Path, force: bool) -> Path:
    """Check the three files can be written (and are not there, unless ``force``); make the
    folder. Returns the HTML path.

    Raises:
        BadInputError: a report already there, or a folder that cannot be made (the path and
            the reason).
    """
    html, md, js = report_paths(out)
    there = [p for p in (html, md, js) if p.exists()]
    if there and not force:
        raise BadInputError(
            f"{there[0]} already exists: add --force to overwrite it, or choose another --out"
        )
    for p in (html, md, js):
        if p.exists() and p.is_dir():
            raise BadInputError(f"{p} is a folder, not a file: choose another --out")
    folder = html.parent
    for parent in (folder, *folder.parents):
        if parent.exists():
            if not parent.is_dir():
                raise BadInputError(f"cannot write the report into {folder}: {parent} is a file")
            break
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadInputError(
            f"cannot write the report into {folder}: {exc.strerror or exc}"
        ) from None
    return html


def main(args: argparse.Namespace) -> int:
    """Run ``streamslo report``; returns the exit code."""
    dirs = list(args.dirs)
    if len(dirs) > 2:
        raise BadInputError(f"expected [BEFORE_DIR] AFTER_DIR, got {len(dirs)} directories")
    if args.resamples < 1:
        raise BadInputError(f"--resamples must be positive, not {args.resamples}")
    for d in dirs:
        if not Path(d).is_dir():
            why = "is not a folder" if Path(d).exists() else "does not exist"
            raise BadInputError(f"results directory {d} {why}")
    html = _prepare(Path(args.out) if args.out else default_out(dirs), args.force)
    from streamslo.reports.build import build_report

    before = dirs[0] if len(dirs) == 2 else None
    result = build_report(
        before, dirs[-1], html, args.slo, seed=args.seed, resamples=args.resamples
    )
    print(result.summary)
    print()
    print(f"report: {result.html.resolve()}")
    print(f"        {result.markdown.resolve()}")
    print(f"        {result.json.resolve()}")
    sys.stdout.flush()
    return EXIT_OK
