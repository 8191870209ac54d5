"""``streamslo compare``: the main job. The bundled server in naive mode, a load run; the
bundled server in fixed mode, the same load run; the before/after report and the verdicts.

The embedded defaults are sized for a 2-core machine, with wide margins so the verdicts do
not flake: the naive server breaks the incidents' SLO by far more than 2x (its per-token sync
and loop-blocking generation put ITL p99 in the seconds, its 2 s generation deadline ends
streams early with ``finish_reason: "stop"`` — silent truncations — and a 10 s Gunicorn
timeout kills its blocked worker mid-stream), the fixed one stays well under half of each
bound. Server and load
generator are pinned to different cores when the machine has two.

Each run ramps through rising concurrency: ``--levels`` held levels, halving down from
``--users`` (40: 1, 2, 5, 10, 20, 40); the top level holds half of ``--duration``, the lower
ones share the other half (each a one-second ramp, then held). The report shows where each
server turns (its "Load levels" section and chart: truncation rate, ITL p99 and TTFT p99
against concurrency); the verdicts are the whole runs'.

Any two server commands (``--before-cmd``/``--after-cmd``) or two running servers
(``--before-url``/``--after-url``) can be compared the same way.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from streamslo.errors import EXIT_OK, EXIT_THRESHOLD, BadInputError
from streamslo.options import declare
from streamslo.options.run_options import add_cli_arguments
from streamslo.options.values import Integer, Switch, Text, flag_option
from streamslo.server.bundled import split_cpus, start_bundled

__all__ = [
    "DEFAULTS",
    "RUN_OPTIONS",
    "CompareDefaults",
    "CompareOptions",
    "add_arguments",
    "level_counts",
    "main",
    "ramp_stages",
]


@dataclass(frozen=True)
class CompareDefaults:
    """The embedded defaults of the main job."""

    users: int = 40
    duration: float = 40.0
    max_tokens: int = 48
    protocol: str = "mixed"
    drain: float = 15.0
    levels: int = 6
    ramp_s: float = 1.0
    stall_timeout: float = 10.0
    naive_server: str = "--mode naive --server gunicorn --workers 1 --timeout 10"
    fixed_server: str = "--mode fixed --server gunicorn --workers 1 --timeout 30"


DEFAULTS = CompareDefaults()
#: Seconds added to a ramped run's --run-time: its stages stop it first.
RUN_TIME_MARGIN_S = 5.0


#: The run options ``compare`` takes, from the option table (docs/cli.md), with its defaults.
RUN_OPTIONS = ("out", "users", "duration", "max_tokens", "protocol", "slow_readers", "drain")


@dataclass(frozen=True)
class CompareOptions:
    """``compare``'s own options, beside the run options it shares (docs/cli.md)."""

    levels: int = field(
        default=DEFAULTS.levels,
        metadata=flag_option(
            Integer(1),
            "concurrency levels each run ramps through, halving down from --users (1: constant load)",
        ),
    )
    before_cmd: str | None = field(
        default=None,
        metadata=flag_option(
            Text(name="OPTIONS"),
            f"streamslo serve options for the before server (default: {DEFAULTS.naive_server!r})",
        ),
    )
    after_cmd: str | None = field(
        default=None,
        metadata=flag_option(
            Text(name="OPTIONS"),
            f"streamslo serve options for the after server (default: {DEFAULTS.fixed_server!r})",
        ),
    )
    before_url: str | None = field(
        default=None,
        metadata=flag_option(
            Text(name="URL"), "compare a running server instead of starting the bundled one"
        ),
    )
    after_url: str | None = field(
        default=None,
        metadata=flag_option(
            Text(name="URL"), "compare a running server instead of starting the bundled one"
        ),
    )
    allow_invalid: bool = field(
        default=False,
        metadata=flag_option(Switch(), "a saturated generator does not fail the after run"),
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The run options ``compare`` shares with ``streamslo run`` (from the option table, with
    the embedded defaults), the SLO, and the two servers."""
    d = DEFAULTS
    add_cli_arguments(
        p,
        only=(*RUN_OPTIONS, "slo_source"),
        defaults={
            "users": d.users,
            "duration": d.duration,
            "max_tokens": d.max_tokens,
            "protocol": d.protocol,
            "slow_readers": 0.0,
            "drain": d.drain,
        },
        help={
            "out": "output folder (default reports/out/<timestamp>/)",
            "users": f"concurrent streams at the top level (default {d.users})",
            "duration": f"each run's length, shared by its levels (default {d.duration:g}s)",
            "max_tokens": f"tokens per stream (default {d.max_tokens})",
            "slo_source": "SLO TOML file (default: the incidents' SLO)",
        },
    )
    declare.add_arguments(p, CompareOptions)


def level_counts(top: int, levels: int) -> tuple[int, ...]:
    """Concurrency levels: ``top`` halved ``levels - 1`` times (rounded, at least 1), rising,
    without repeats (so fewer when ``top`` is small)."""
    return tuple(sorted({max(1, round(top / 2**k)) for k in range(levels)}))


def ramp_stages(top: int, levels: int, duration: float, ramp_s: float = DEFAULTS.ramp_s) -> str:
    """``--stages`` for a ramp through :func:`level_counts`: the top level holds half of
    ``duration``, the lower levels share the other half equally; each level spends ``ramp_s``
    (at most half its share) reaching its count, then holds it.

    The top level keeps most of the samples so that the whole run's verdicts rest on as many
    high-load gaps as a constant load would give: one machine-wide pause then stays under 1 %
    of them.

    Raises:
        BadInputError: a level's share is shorter than a second.
    """
    counts = level_counts(top, levels)
    lower = len(counts) - 1
    shares = [duration / (2 * lower)] * lower + [duration / 2] if lower else [duration]
    if min(shares) < 1.0:
        raise BadInputError(
            f"--duration {duration:g}s is too short for {len(counts)} levels (at least 1s each)"
        )
    parts = []
    for n, share in zip(counts, shares, strict=True):
        ramp = min(ramp_s, share / 2)
        parts.append(f"{ramp:.3g}s:{n},{share - ramp:.3g}s:{n}")
    return ",".join(parts)


def _one_run(
    label: str, args: argparse.Namespace, out: Path, url: str | None, serve_args: str
) -> int:
    """One load run, against ``url`` or a bundled server started (and always stopped) here.

    Raises:
        KeyboardInterrupt: a stop signal; the run's directory is finalized, the server stopped.
    """
    from streamslo.run.execute import RunConfig, execute

    server_cpus, gen_cpus = split_cpus()
    server = None
    try:
        if url is None:
            print(
                f"[{label}] starting the bundled server: streamslo serve {serve_args}", flush=True
            )
            server = start_bundled(serve_args, out.parent / f"{label}-server.log", server_cpus)
            url = server.url
        print(
            f"[{label}] load: {args.protocol} streams x {args.max_tokens} tokens for {args.duration:g}s, "
            f"ramping through {', '.join(map(str, level_counts(args.users, args.levels)))} streams, against {url}",
            flush=True,
        )
        cfg = RunConfig(
            host=url,
            out=out,
            users=args.users,
            # The stages end the run; the margin keeps Locust's --run-time (counted from its
            # own start-up) from cutting the top level short.
            duration=args.duration + RUN_TIME_MARGIN_S,
            stages=args.stages,
            protocol=args.protocol,
            max_tokens=args.max_tokens,
            slow_readers=args.slow_readers,
            drain=args.drain,
            stall_timeout=DEFAULTS.stall_timeout,
            slo=args.slo_obj,
            slo_source=args.slo_source,
            allow_invalid=True,
            generator_cpus=gen_cpus,
            quiet=True,
        )
        return execute(cfg)
    finally:
        if server is not None:
            server.stop()


def main(args: argparse.Namespace) -> int:
    """``streamslo compare``.

    Raises:
        KeyboardInterrupt: Ctrl-C or a stop signal: the run under way is finalized, its server
            stopped, and compare stops there (no next run, no report).
    """
    from streamslo.reports import build_report
    from streamslo.results.layout import Layout, read_json
    from streamslo.slo import thresholds

    args.slo_obj = thresholds.load_slo(args.slo_source) if args.slo_source else None
    args.stages = ramp_stages(args.users, args.levels, args.duration)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out: Path = args.out or Path("reports") / "out" / stamp
    if out.exists() and any(out.iterdir()):
        raise BadInputError(f"{out}: the output folder is not empty")
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    before_args = args.before_cmd or DEFAULTS.naive_server
    after_args = args.after_cmd or DEFAULTS.fixed_server
    label = "naive"
    try:
        _one_run("naive", args, out / "naive", args.before_url, before_args)
        label = "fixed"
        after_rc = _one_run("fixed", args, out / "fixed", args.after_url, after_args)
    except KeyboardInterrupt:
        print(
            f"compare: interrupted during the {label} run; its results are in {out / label}; "
            "no further run, no report",
            file=sys.stderr,
            flush=True,
        )
        raise
    result = build_report(
        out / "naive", out / "fixed", out / "report.html", args.slo_obj, stages=args.stages
    )
    print(result.summary)
    print(
        f"\nreport: {result.html.resolve()}\n        {result.markdown.resolve()}\n        {result.json.resolve()}"
    )
    print(f"compare took {time.monotonic() - t0:.0f}s")
    fixed_valid = bool(read_json(Layout(out / "fixed").run_json).get("valid", False))
    if not result.passed or after_rc != EXIT_OK:
        print("verdict: the fixed server did NOT meet the SLO", file=sys.stderr)
        return EXIT_THRESHOLD
    if not fixed_valid and not args.allow_invalid:
        print(
            "verdict: the fixed run is invalid (its load generator was saturated), so its "
            "latencies measure the client; rerun with fewer --users or pass --allow-invalid",
            file=sys.stderr,
        )
        return EXIT_THRESHOLD
    print("verdict: the fixed server met the SLO; the naive one is the 'before'")
    return EXIT_OK
