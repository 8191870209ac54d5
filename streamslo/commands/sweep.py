"""``streamslo sweep``: load runs at rising request rates, and the highest rate that meets the SLO.

The rates are given (``--rates 1,2,4,8``) or found as GuideLLM finds them (``--find-max``, the
default): a *synchronous* run (one request at a time) measures the rate one stream sustains, a
*saturating* run (``--users`` streams held open) the most the server serves; then ``--steps``
rates evenly spaced from the first to the second, top included. Each rate runs open loop
(``--request-rate``) for ``--duration`` with every other run option as given, into its own
results directory under ``--out DIR``; then ``DIR/sweep.json``, ``DIR/sweep.html`` and
``DIR/sweep.md`` (``docs/workloads.md``).

Exit codes: 0 when ``max_passing_rate`` is set (the lowest rate, and every rate up to it, met
every threshold), 99 when it is not, 2 for bad input, 1 for an internal error; a stop signal
(128 + its number) stops the sweep once the run under way is finalized, with ``sweep.json``
written from the runs so far (``complete: false``).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from streamslo.errors import EXIT_OK, EXIT_THRESHOLD, BadInputError, StreamSLOError
from streamslo.options import declare
from streamslo.options.run_options import add_cli_arguments
from streamslo.options.values import Integer, Parsed, Switch, flag_option

__all__ = ["SweepOptions", "add_arguments", "even_rates", "main", "parse_rates"]


def parse_rates(text: str) -> tuple[float, ...]:
    """``"1,2,4.5"`` -> rising, positive rates.

    Raises:
        argparse.ArgumentTypeError: not a comma-separated list of positive numbers.
    """
    try:
        rates = tuple(float(p) for p in text.split(",") if p.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of rates: {text!r} (e.g. 1,2,4,8)") from None
    if not rates or any(not r > 0 for r in rates):
        raise argparse.ArgumentTypeError(f"rates must be positive numbers: {text!r}")
    return tuple(sorted(set(rates)))


def even_rates(low: float, high: float, steps: int) -> tuple[float, ...]:
    """``steps`` rates evenly spaced above ``low`` up to ``high`` (included), 3 significant
    digits; fewer when they round together."""
    if high <= low:
        return (float(f"{max(high, low):.3g}"),)
    return tuple(
        sorted({float(f"{low + (high - low) * k / steps:.3g}") for k in range(1, steps + 1)})
    )


@dataclass(frozen=True)
class SweepOptions:
    """``sweep``'s own options, beside the run options (docs/cli.md)."""

    rates: tuple[float, ...] | None = field(
        default=None,
        metadata=flag_option(
            Parsed(parse_rates, "RATES", "request rates, comma-separated (req/s)"),
            "request rates to run, e.g. 1,2,4,8 (req/s)",
            exclusive="how",
        ),
    )
    find_max: bool = field(
        default=False,
        metadata=flag_option(
            Switch(),
            "find the rates: a synchronous run, a saturating run, then rates between (the default)",
            exclusive="how",
        ),
    )
    steps: int = field(
        default=5,
        metadata=flag_option(
            Integer(1), "--find-max: rates between the synchronous and the saturating rate"
        ),
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The run options (``docs/cli.md``), and the sweep's own."""
    add_cli_arguments(
        p,
        help={
            "out": "the sweep's folder (new or empty): one results directory per run, sweep.json, sweep.html, sweep.md",
            "duration": "each run's length (default 60s)",
            "users": "--find-max: the streams the saturating run holds open (default 50)",
        },
        exclude=("request_rate", "stages", "shape"),
    )  # the sweep sets the load itself
    declare.add_arguments(p, SweepOptions)


def _run(base: Any, out: Path, label: str, **changes: Any) -> tuple[int, Any]:
    from streamslo.results.layout import load_run
    from streamslo.run.execute import execute

    cfg = replace(base, out=out, quiet=True, **changes)
    print(f"[sweep] {label}: {out.name}", flush=True)
    rc = execute(cfg)
    return rc, load_run(out)


def _write(root: Path, entries: list[Any], info: dict[str, Any], slo: Any) -> dict[str, Any]:
    """``sweep.json``, ``sweep.html``, ``sweep.md`` from the runs so far; the document."""
    from streamslo.reports.knee import find_knee
    from streamslo.reports.knee_charts import knee_chart, slo_bounds
    from streamslo.reports.sweep_report import (
        dump,
        render_sweep_html,
        render_sweep_markdown,
        sweep_document,
    )

    doc = sweep_document(entries, info)
    rate_points = [e.point for e in entries if e.kind == "rate"]
    chart = knee_chart(
        {"sweep": rate_points},
        key="sweep",
        title="Latency, failures and throughput against the request rate",
        xlabel="asked rate (req/s)",
        knees={"sweep": find_knee(rate_points)},
        bounds=slo_bounds(slo),
        throughput=True,
    )
    (root / "sweep.json").write_text(dump(doc), encoding="utf-8")
    (root / "sweep.html").write_text(
        render_sweep_html(doc, [chart] if chart else []), encoding="utf-8"
    )
    (root / "sweep.md").write_text(render_sweep_markdown(doc), encoding="utf-8")
    return doc


def main(args: argparse.Namespace) -> int:
    """``streamslo sweep``.

    Raises:
        BadInputError: bad options, or a non-empty ``--out``.
        KeyboardInterrupt: a stop signal: the run under way is finalized, the sweep's files
            are written from the runs so far (``complete: false``), and no further run starts.
    """
    from streamslo import __version__
    from streamslo.reports.knee import load_point
    from streamslo.reports.render import text_table
    from streamslo.reports.sweep_report import SweepEntry, sweep_rows
    from streamslo.run.execute import config_from_args
    from streamslo.slo import thresholds

    base = config_from_args(args)
    if base.request_rate or base.stages or base.shape or base.scenarios:
        raise BadInputError(
            "sweep sets the load itself: give --rates or --find-max, not --request-rate, "
            "--stages, --shape or a scenario file's [scenarios.*]"
        )
    root = Path(base.out)
    if root.exists() and any(root.iterdir()):
        raise BadInputError(f"{root}: the sweep's folder is not empty (choose a new --out)")
    root.mkdir(parents=True, exist_ok=True)
    slo = base.slo if base.slo is not None else thresholds.DEFAULT_SLO
    entries: list[SweepEntry] = []
    info: dict[str, Any] = {
        "tool_version": __version__,
        "generated_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "target": base.host,
        "slo": base.slo_source or "default",
        "mode": "rates" if args.rates else "find-max",
        "duration_s": base.duration,
        "complete": False,
    }

    under_way: list[tuple[str, float | None, str, str, float]] = []

    def step(
        kind: str, asked: float | None, name: str, label: str, x: float, **changes: Any
    ) -> None:
        under_way[:] = [(kind, asked, name, label, x)]
        rc, data = _run(base, root / name, label, **changes)
        record(kind, asked, name, rc, data, label, x)
        under_way.clear()

    def record(
        kind: str, asked: float | None, name: str, rc: int, data: Any, label: str, x: float
    ) -> None:
        point = load_point(data, x, label, slo=slo, asked=asked is not None)
        if not (data.valid or base.allow_invalid):
            point = replace(
                point,
                passed=False,
                failed=(*point.failed, "the run is invalid (saturated generator)"),
            )
        entries.append(SweepEntry(kind, asked, name, rc, point))

    try:
        rates: tuple[float, ...] = args.rates or ()
        if not rates:
            step("synchronous", None, "synchronous", "synchronous", 0.0, users=1, spawn_rate=0.0)
            step("throughput", None, "throughput", f"saturating ({base.users} users)", 0.0)
            low = entries[0].point.achieved_rate or 0.0
            high = entries[1].point.achieved_rate or 0.0
            if high <= 0:
                raise BadInputError(
                    "the saturating run sent fewer than two requests: no rate to sweep (is the server up?)"
                )
            rates = even_rates(low, high, args.steps)
            info["rates"] = list(rates)
            print(
                f"[sweep] synchronous {low:.3g} req/s, saturating {high:.3g} req/s: rates "
                f"{', '.join(f'{r:g}' for r in rates)}",
                flush=True,
            )
        for rate in rates:
            step("rate", rate, f"rate-{rate:g}", f"{rate:g} req/s", rate, request_rate=rate)
    except KeyboardInterrupt as exc:
        from streamslo.results.layout import load_run
        from streamslo.run.signals import exit_code_of

        for kind, asked, name, label, x in under_way:  # the interrupted run, finalized: keep it
            with contextlib.suppress(StreamSLOError, OSError, ValueError):
                record(kind, asked, name, exit_code_of(exc), load_run(root / name), label, x)
        _write(root, entries, info, slo)
        print(
            f"sweep: interrupted; the runs so far are in {root / 'sweep.json'}",
            file=sys.stderr,
            flush=True,
        )
        raise
    info["complete"] = True
    doc = _write(root, entries, info, slo)
    print(text_table(sweep_rows(doc)))
    best = doc["max_passing_rate"]
    print(f"\nsweep: {root / 'sweep.html'}\n       {root / 'sweep.json'}")
    if best is None:
        print("sweep: no rate met the SLO", file=sys.stderr)
        return EXIT_THRESHOLD
    print(f"sweep: the highest rate that met the SLO: {best:g} req/s")
    return EXIT_OK
