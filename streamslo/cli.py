"""The ``streamslo`` command line: one entry point, thin, that hands each sub-command to the
module that owns it. Every owner module exposes ``add_arguments(parser)`` and
``main(args) -> int`` and keeps heavy imports (torch, pandas, locust) inside ``main``.

Exit codes (docs/results.md for the stop signals): 0 all thresholds held, 99 a threshold failed,
2 bad input, 1 internal;
a command stopped by a signal exits 128 + its number (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP).
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import logging
import re
import signal
import sys
from collections.abc import Sequence

from streamslo import __version__
from streamslo.errors import EXIT_BAD_INPUT, EXIT_INTERNAL, BadInputError
from streamslo.options.units import duration_arg, unit_form
from streamslo.run.signals import StopSignals, exit_code_of

__all__ = ["COMMANDS", "GLOBAL_FLAGS", "STOPPABLE", "build_parser", "main"]

#: sub-command -> (its shell in :mod:`streamslo.commands`, one-line help); only the chosen one is
#: imported (tests/test_cli.py checks every shell lives there).
COMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("streamslo.commands.serve", "run the bundled PyTorch streaming target server"),
    "run": ("streamslo.commands.run", "a headless Locust load run that writes a results directory"),
    "verify": (
        "streamslo.commands.verify",
        "check a results directory (or an SLO file) against thresholds",
    ),
    "report": ("streamslo.commands.report", "the before/after SLO report (HTML, Markdown, JSON)"),
    "compare": (
        "streamslo.commands.compare",
        "the main job: naive vs fixed bundled server, with report",
    ),
    "soak": ("streamslo.commands.soak", "a staged long run with thresholds that can abort it"),
    "sweep": (
        "streamslo.commands.sweep",
        "runs at rising request rates: the knee and the highest rate that meets the SLO",
    ),
    "proxy": (
        "streamslo.commands.proxy",
        "a fault-injecting TCP proxy to put between the suite and a server",
    ),
    "finalize": (
        "streamslo.commands.finalize",
        "finalize the results directory of a run that was killed",
    ),
    "check": (
        "streamslo.commands.check",
        "check a server's stream contract before load testing it (exit 0 / 99 / 2)",
    ),
    "history": (
        "streamslo.commands.history",
        "runs kept over time: trends, and a regression verdict for the newest (exit 0 / 99 / 2)",
    ),
}

#: Sub-commands that run children: SIGTERM and SIGHUP stop them like Ctrl-C (streamslo.run.signals).
STOPPABLE = frozenset({"run", "soak", "compare", "sweep"})


#: Global options, accepted anywhere on the line (before or after the sub-command).
GLOBAL_FLAGS = frozenset({"-v", "--verbose"})


class _Parser(argparse.ArgumentParser):
    """Errors in one line, then a short usage: the option a typo meant ("did you mean"), the
    value a flag refused ("--duration: must be positive, got -5s"), never the whole usage."""

    def error(self, message: str) -> None:  # type: ignore[override]
        message = _did_you_mean(self, _plain(message))
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message}\n{self.short_usage()}\n")

    def short_usage(self) -> str:
        positionals = [
            a for a in self._actions if not a.option_strings and a.help != argparse.SUPPRESS
        ]
        words = []
        for a in positionals:
            if isinstance(a, argparse._SubParsersAction):
                words.append("COMMAND")
            else:
                name = a.metavar if isinstance(a.metavar, str) else a.dest.upper()
                words.append(
                    {"?": f"[{name}]", "*": f"[{name} ...]", "+": f"{name} ..."}.get(
                        str(a.nargs), name
                    )
                )
        required = [
            a.option_strings[-1] + (f" {a.metavar}" if isinstance(a.metavar, str) else "")
            for a in self._actions
            if a.required and a.option_strings
        ]
        line = " ".join([f"usage: {self.prog}", *required, "[options]", *words])
        return f"{line}\n(`{self.prog} --help` lists every option)"


def _plain(message: str) -> str:
    """argparse's ``argument --duration: ...`` as ``--duration: ...``."""
    if message.startswith("argument "):
        flag, sep, rest = message[len("argument ") :].partition(": ")
        if sep:
            return f"{flag.split('/')[-1]}: {rest}"
    return message


def _did_you_mean(parser: argparse.ArgumentParser, message: str) -> str:
    """Append the closest known option to each unrecognised one."""
    choice = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
    if choice:
        options = re.findall(r"'([^']*)'", choice.group(2))
        close = difflib.get_close_matches(choice.group(1), options, n=1, cutoff=0.6)
        return message + (f"\n  did you mean {close[0]}?" if close else "")
    prefix = "unrecognized arguments: "
    if not message.startswith(prefix):
        return message
    known = [o for a in parser._actions for o in a.option_strings if o.startswith("--")]
    hints = []
    for word in message[len(prefix) :].split("\n", 1)[0].split():
        if not word.startswith("-"):
            continue
        close = difflib.get_close_matches(word.split("=", 1)[0], known, n=1, cutoff=0.6)
        if close:
            hints.append(f"{word}: did you mean {close[0]}?")
    return message + ("\n  " + "\n  ".join(hints) if hints else "")


def _is_duration(action: argparse.Action) -> bool:
    return action.type is duration_arg or getattr(action.type, "__name__", "") == "duration"


def _stray_words(parser: argparse.ArgumentParser, argv: list[str], extra: list[str]) -> str:
    """Hints for the bare words left over right after an option's value: ``--duration 5
    minutes`` (a duration is one word: ``5m``), ``--prompt hello world`` (quote it)."""
    by_flag = {o: a for a in parser._actions for o in a.option_strings}
    hints: list[str] = []
    i = 0
    while i < len(argv):
        flag, eq, inline = argv[i].partition("=")
        action = by_flag.get(flag)
        if action is None or action.nargs == 0 or not flag.startswith("-"):
            i += 1
            continue
        value_at = i if eq else i + 1
        value = inline if eq else (argv[value_at] if value_at < len(argv) else "")
        j = value_at + 1
        words = []
        while j < len(argv) and not argv[j].startswith("-") and argv[j] in extra:
            words.append(argv[j])
            j += 1
        if words:
            whole = " ".join([value, *words])
            spelled = unit_form(whole) if _is_duration(action) else None
            if spelled:
                hints.append(
                    f"{flag} {whole}: a duration is one word: {flag} {spelled}"
                    " (500ms, 30s, 5m, 1h, 1m30s)"
                )
            elif _is_duration(action):
                hints.append(f"{flag} takes one word, {value}: a duration is 500ms, 30s, 5m, 1h")
            else:
                hints.append(f'{flag} takes one value: quote it if it has spaces, {flag} "{whole}"')
        i = j
    return "".join(f"\n  {h}" for h in hints)


def _split_globals(argv: list[str]) -> tuple[list[str], bool]:
    """Take the global flags out of ``argv`` wherever they stand (not after ``--``)."""
    out, verbose = [], False
    for i, arg in enumerate(argv):
        if arg == "--":
            out += argv[i:]
            break
        if arg in GLOBAL_FLAGS:
            verbose = True
            continue
        out.append(arg)
    return out, verbose


def _negative_values(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """``--duration -5s`` as ``--duration=-5s``: argparse takes a value that starts with ``-``
    for an option ("expected one argument"), so a negative value would never reach the check
    that says what is wrong with it."""
    takes_value = {o for a in parser._actions for o in a.option_strings if a.nargs != 0}
    out: list[str] = []
    skip = False
    for i, arg in enumerate(argv):
        if skip:
            skip = False
            continue
        nxt = argv[i + 1] if i + 1 < len(argv) else ""
        if (
            arg in takes_value
            and len(nxt) > 1
            and nxt[0] == "-"
            and (nxt[1].isdigit() or nxt[1] == ".")
        ):
            out.append(f"{arg}={nxt}")
            skip = True
        else:
            out.append(arg)
    return out


def _path_reason(exc: OSError) -> str:
    """Why a path failed, in words: "a parent is a file" rather than "File exists"."""
    import errno
    from pathlib import Path

    if exc.errno in (errno.ENOTDIR, errno.EEXIST) and isinstance(exc.filename, str):
        if Path(exc.filename).is_file():
            return "a file is there where a directory is needed"
        for parent in Path(exc.filename).parents:
            if parent.exists():
                if not parent.is_dir():
                    return f"{parent} is a file, not a directory"
                break
    return exc.strerror or str(exc)


def _subparser(
    parser: argparse.ArgumentParser, command: str | None
) -> argparse.ArgumentParser | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and command in action.choices:
            sub: argparse.ArgumentParser = action.choices[command]
            return sub
    return None


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
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="debug logging; verify: pytest's own output (anywhere on the line)",
    )
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
    argv, verbose = _split_globals(list(sys.argv[1:] if argv is None else argv))
    chosen = _chosen(argv)
    parser = build_parser(chosen or "")
    sub = _subparser(parser, chosen)
    if sub is not None:
        argv = _negative_values(sub, argv)
    args, extra = parser.parse_known_args(argv)
    if extra:
        hints = _stray_words(sub or parser, argv, extra)
        (sub or parser).error(f"unrecognized arguments: {' '.join(extra)}{hints}")
    args.verbose = verbose
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
    except OSError as exc:
        if exc.filename is None:
            logging.getLogger("streamslo").exception("internal error in %s", args.command)
            return EXIT_INTERNAL
        # A path the user gave that cannot be read or written: bad input, named, no traceback.
        print(
            f"streamslo {args.command}: error: {exc.filename}: {_path_reason(exc)}", file=sys.stderr
        )
        return EXIT_BAD_INPUT
    except KeyboardInterrupt as exc:
        code = exit_code_of(exc)
        print(
            f"streamslo {args.command}: interrupted ({signal.Signals(code - 128).name}); exit code {code}",
            file=sys.stderr,
        )
        return code
    except Exception:
        logging.getLogger("streamslo").exception("internal error in %s", args.command)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
