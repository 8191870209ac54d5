"""The command line: every sub-command of docs/cli.md exists, usage errors exit 2, and the public
modules declare their API."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from streamslo.cli import COMMANDS
from streamslo.commands.option_tables import TABLES
from streamslo.options.units import parse_duration, unit_form


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_sub_command_has_help(command):
    r = subprocess.run(
        [sys.executable, "-m", "streamslo", command, "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert "usage: streamslo " + command in r.stdout


def test_usage_error_exits_2():
    r = subprocess.run(
        [sys.executable, "-m", "streamslo", "run", "--users", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2
    assert "--users" in r.stderr
    r = subprocess.run(
        [sys.executable, "-m", "streamslo", "nope"], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 2


def test_run_requires_host_and_out():
    r = subprocess.run(
        [sys.executable, "-m", "streamslo", "run", "--out", "/tmp/x-never"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "--host" in r.stderr


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30", 30.0),
        ("2.5", 2.5),
        ("30s", 30.0),
        ("5m", 300.0),
        ("1h", 3600.0),
        ("1m30s", 90.0),
        ("250ms", 0.25),
    ],
)
def test_durations(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("bad", ["", "5x", "m5", "-3", "1h-2m"])
def test_bad_durations(bad):
    with pytest.raises(ValueError):
        parse_duration(bad)


@pytest.mark.parametrize(
    "words, written",
    [
        ("5 minutes", "5m"),
        ("1 hour 30 min", "1h30m"),
        ("1h 30m", "1h30m"),
        ("2.5 hours", "2.5h"),
        ("90 secs", "90s"),
        ("250 milliseconds", "250ms"),
        ("5 fortnights", None),
        ("minutes", None),
        ("5 minutes later", None),
        ("", None),
    ],
)
def test_a_duration_in_words_and_how_it_is_written(words, written):
    assert unit_form(words) == written
    if written is not None:
        with pytest.raises(ValueError, match=f"did you mean {written}\\?"):
            parse_duration(words)
        assert parse_duration(written) > 0


PUBLIC = [
    "streamslo.errors",
    "streamslo.options.units",
    "streamslo.results.layout",
    "streamslo.figures.metrics",
    "streamslo.workload.requests",
    "streamslo.runfiles.finalize",
    "streamslo.run.execute",
    "streamslo.commands.run",
    "streamslo.commands.compare",
    "streamslo.commands.soak",
    "streamslo.options.stages",
    "streamslo.run.evidence",
    "streamslo.results.summary_table",
    "streamslo.stream.sse",
    "streamslo.stream.tracker",
    "streamslo.stream.timing",
    "streamslo.stream.outcome",
    "streamslo.stream.http1",
    "streamslo.transport.sync",
    "streamslo.transport.common",
    "streamslo.transport.sse",
    "streamslo.transport.ws",
    "streamslo.transport.watchdog",
    "streamslo.server.bundled",
    "streamslo.slo._parse",
    "streamslo.options.run_options",
    "streamslo.options.values",
    "streamslo.options.redact",
    "streamslo.figures.histogram",
    "streamslo.figures.windows",
    "streamslo.runfiles.windows_csv",
    "streamslo.slo.live_eval",
    "streamslo.slo.budget",
    "streamslo.figures.drift",
    "streamslo.run.progress",
    "streamslo.run.exporter",
    "streamslo.run.watch",
    "streamslo.runfiles.soak",
    "streamslo.reports.soak",
    "streamslo.run.preflight",
    "streamslo.check.contract",
    "streamslo.commands.check",
    "streamslo.scenario_files",
]


@pytest.mark.parametrize("name", PUBLIC)
def test_all_matches_public_names(name):
    mod = importlib.import_module(name)
    declared = set(mod.__all__)
    public = {
        k
        for k, v in vars(mod).items()
        if not k.startswith("_")
        and getattr(v, "__module__", name) == name
        and (callable(v) or isinstance(v, type))
    }
    assert public <= declared, f"{name}: public but not in __all__: {sorted(public - declared)}"
    assert all(hasattr(mod, n) for n in declared)


def test_every_command_shell_lives_in_commands() -> None:
    """cli.py imports the chosen shell by name (the layer check cannot see that import): every
    shell is a module of streamslo.commands, with add_arguments and main, and nothing else in
    the tree is a shell."""
    import importlib

    from streamslo.cli import COMMANDS

    assert len(COMMANDS) == 11
    for name, (module_name, _) in COMMANDS.items():
        assert module_name.startswith("streamslo.commands."), (name, module_name)
        module = importlib.import_module(module_name)
        assert callable(module.add_arguments) and callable(module.main), name
    root = Path(__file__).resolve().parents[1] / "streamslo"
    stray = sorted(str(p.relative_to(root)) for p in root.rglob("command.py"))
    assert stray == [], stray


#: The only places that call argparse's add_argument themselves, and why.
_OWN_ADD_ARGUMENT = {
    "options/declare.py": "the one declaration style: every command's options go through it",
    "options/run_options.py": "registers run's declared options on Locust's own parser",
    "loadgen/options.py": "a parser shim that drops the keywords Locust's parser adds",
    "cli.py": "the root parser's --version and --verbose (no command's)",
    "server/trainer.py": "an internal child process of the bundled server, not a command",
}


def test_no_command_adds_an_argument_by_hand() -> None:
    """Every command declares its options in one dataclass (streamslo.options.declare): the
    parser, the typed values and the docs tables come from it. A hand-written add_argument
    elsewhere is a second declaration style."""
    import ast

    root = Path(__file__).resolve().parents[1] / "streamslo"
    found = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("add_argument", "add_mutually_exclusive_group")
            ):
                found.add(path.relative_to(root).as_posix())
    assert found - set(_OWN_ADD_ARGUMENT) == set()


@pytest.mark.parametrize("command", sorted(TABLES))
def test_each_command_parses_into_its_declaration(command: str) -> None:
    """The parser a command builds reads back into its options dataclass: every declared
    option is an argument, with the declared default."""
    import dataclasses

    from streamslo.cli import _subparser, build_parser
    from streamslo.options import declare

    _, cls, _ = TABLES[command]
    parser = _subparser(build_parser(command), command)
    assert parser is not None
    dests = {a.dest for a in parser._actions}
    for o in declare.rows(cls):
        if command == "history" and o.name == "dirs":
            continue  # history add's
        assert o.name in dests, (command, o.name)
    required = [
        o for o in declare.rows(cls) if o.required and not (command == "history" and o.positional)
    ]
    argv = []
    for o in required:
        value = "http://127.0.0.1:1" if o.name in ("url", "upstream") else "x"
        argv += ([] if o.positional else [o.flag]) + [value]
    if command in ("compare", "sweep", "soak"):
        return  # run's options beside them: run's own tests read those
    args = parser.parse_args(argv)
    got = declare.values(args, cls)
    for f in dataclasses.fields(cls):
        if f.name not in {o.name for o in required}:
            expected = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            assert getattr(got, f.name) == expected, (command, f.name)
