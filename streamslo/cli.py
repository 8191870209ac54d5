"""The ``streamslo`` command line: one entry point, thin, that hands each sub-command to the
module that owns it. Every owner module exposes ``add_arguments(parser)`` and
``main(args) -> int`` and keeps heavy imports (torch, pandas, locust) inside ``main``.

Exit codes (docs/results.md for the stop signals): 0 all thresholds held, 99 a threshold failed,
2 bad input, 1 internal;
a command stopped by a signal exits 128 + its number (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import signal
import sys
from collections.abc import Sequence

from streamslo import __version__
from streamslo.errors import EXIT_BAD_INPUT, EXIT_INTERNAL, BadInputError
from streamslo.run.signals import StopSignals, exit_code_of

__all__ = ["COMMANDS", "STOPPABLE", "build_parser", "main"]

#: sub-command -> (owner module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("streamslo.server.launch", "run the bundled PyTorch streaming target server"),
    "run": ("streamslo.commands.run", "a headless Locust load run that writes a results directory"),
    "verify": ("streamslo.verify.command", "check a results directory (or an SLO file) against thresholds"),
    "report": ("streamslo.reports.command", "the before/after SLO report (HTML, Markdown, JSON)"),
    "compare": ("streamslo.commands.compare", "the main job: naive vs fixed bundled server, with report"),
    "soak": ("streamslo.commands.soak", "a staged long run with thresholds that can abort it"),
    "sweep": ("streamslo.commands.sweep", "runs at rising request rates: the knee and the highest rate that meets the SLO"),
    "proxy": ("streamslo.proxy.command", "a fault-injecting TCP proxy to put between the suite and a server"),
    "finalize": ("streamslo.commands.finalize", "finalize the results directory of a run that was killed"),
}

#: Sub-commands that run children: SIGTERM and SIGHUP stop them like Ctrl-C (streamslo.run.signals).
STOPPABLE = frozenset({"run", "soak", "compare", "sweep"})


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message}\n")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """Build the parser. Only the chosen sub-command's module is imported (all of them when
    ``command`` is None), so one sub-command never pays for another's imports."""
    parser = _Parser(
        prog="streamslo",
        description="Load testing and SLO verification for streaming LLM endpoints (SSE and WebSocket).",
        epilog="Exit codes: 0 every threshold held, 99 a threshold failed, 2 bad input, 1 internal error, "
        "128+N stopped by signal N (130 Ctrl-C, 143 SIGTERM).",
    )
    parser.add_argument("--version", action="version", version=f"streamslo {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name, (module_name, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if command is None or command == name:
            module = importlib.import_module(module_name)
            module.add_arguments(p)
            p.set_defaults(_main=module.main)
    return parser


def _chosen(argv: Sequence[str]) -> str | None:
    for arg in argv:
        if arg in COMMANDS:
            return arg
        if not arg.startswith("-"):
            return None
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``streamslo`` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(_chosen(argv) or "")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        if args.command in STOPPABLE:
            with StopSignals():
                return int(args._main(args))
        return int(args._main(args))
    except BadInputError as exc:
        print(f"streamslo {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt as exc:
        code = exit_code_of(exc)
        print(f"streamslo {args.command}: interrupted ({signal.Signals(code - 128).name}); exit code {code}", file=sys.stderr)
        return code
    except Exception:
        logging.getLogger("streamslo").exception("internal error in %s", args.command)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
