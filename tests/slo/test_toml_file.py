"""One reader of TOML files (streamslo.options.toml_file): a file is parsed once, and every
error names the file and the line."""

from __future__ import annotations

import argparse
import ast
import tomllib
from pathlib import Path

import pytest

from streamslo.errors import SLOFileError
from streamslo.options.toml_file import parse_toml, read_toml
from streamslo.slo.budget import read_slo_file
from streamslo.workload.scenario_file import read_scenario

PACKAGE = Path(__file__).resolve().parents[2] / "streamslo"

SCENARIO = """\
[load]
host = "http://127.0.0.1:9"
users = 3
duration = "5s"

[thresholds]
itl_ms = ["p(99)<200"]

[budget]
objective = "truncation_rate"
target = 0.999
"""


def test_only_the_reader_imports_tomllib():
    importers = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            if "tomllib" in names:
                importers.append(path.relative_to(PACKAGE).as_posix())
    assert importers == ["options/toml_file.py"]


def test_bad_toml_names_the_file_and_the_line(tmp_path):
    path = tmp_path / "slo.toml"
    path.write_text('[thresholds]\nitl_ms = ["p(99)<200"\n')
    with pytest.raises(SLOFileError) as err:
        read_toml(path)
    assert err.value.path == str(path) and err.value.line == 2
    assert str(err.value).startswith(f"{path}:2: not valid TOML")
    with pytest.raises(SLOFileError, match="no such file"):
        read_toml(tmp_path / "missing.toml")


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        # Left open: the parser notices on the next statement (or at the end); the opener's
        # line is named, and the line the parser reached.
        (
            '[load]\nusers = 2\nstages = [{ duration = "1m", target = 4 },\n\n[scenarios.a]\n',
            3,
            "the array opened on this line is not closed: no ']' before line 5",
        ),
        ('a = 1\nb = ["x]", \'[\', # ]\n"c" = 2\n', 2, "no ']' before line 3"),
        ("a = { b = 1\nc = 2\n", 1, "Unclosed inline table"),
        ('a = """\n[\n"""\nb = [1,\n', 4, "no ']' before the end of the file"),
        # The mistake inside a value that spans lines: the parser's own line.
        ("a = [\n  1,\n  2 3,\n]\n", 3, "not valid TOML: Unclosed array"),
        ('a = "x\nb = 1\n', 1, "not valid TOML: Illegal character"),
    ],
)
def test_a_bad_toml_file_names_the_line_of_the_mistake(text, line, fragment):
    with pytest.raises(SLOFileError) as err:
        parse_toml(text, "f.toml")
    assert err.value.line == line, str(err.value)
    assert fragment in str(err.value)


def test_line_lookups():
    toml = parse_toml('# x\n[load]\nusers = 2\n\n[thresholds]\n"itl_ms" = ["p(99)<1"]\n', "f")
    assert toml.table_line("load") == 2 and toml.key_line("load", "users") == 3
    assert toml.key_line("load", "nope") == 2 and toml.table_line("budget") is None


def test_one_line_lookup_serves_every_section():
    """Headers bare or quoted, with spaces around the dots; a table's key, not the same key in
    the next table; and no section keeps a lookup of its own (the old copies are gone)."""
    from streamslo.options.toml_file import header_line, key_line

    text = (
        "[load]\nusers = 2\n[ scenarios . 'a-b' ]\nrate = 1\n"
        '[scenarios."c"]\n"rate" = 3\n[thresholds.extra]\n[budget]\nwindow = "1h"\n'
    )
    assert header_line(text, "scenarios", "a-b") == 3 and header_line(text, "scenarios", "c") == 5
    assert header_line(text, "scenarios", "a") is None  # not a prefix of a-b
    assert header_line(text, "thresholds") is None
    assert header_line(text, "thresholds", prefix=True) == 7
    assert key_line(text, 3, "rate") == 4 and key_line(text, 5, "rate") == 6
    assert key_line(text, 1, "rate") == 1  # [load] has none: its header
    assert key_line(text, None, "rate") is None
    sources = [
        (PACKAGE / f).read_text(encoding="utf-8")
        for f in ("slo/_parse.py", "slo/budget.py", "workload/scenarios.py")
    ]
    assert not [s for s in sources if "def _table_line" in s or "def _header_line" in s]
    assert not [s for s in sources if "def _key_line" in s]


def test_a_scenario_file_is_read_into_typed_sections(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(SCENARIO)
    sc = read_scenario(path)
    assert sc.path == str(path)
    assert sc.values["users"] == 3 and sc.values["duration"] == 5.0
    assert sc.slo is not None and sc.slo.thresholds[0].line == 7
    assert sc.budget is not None and sc.budget.objective == "truncation_rate"
    slo, budget = read_slo_file(path)
    assert slo == sc.slo and budget == sc.budget


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("[load]\nusers = 2\nsurprise = 1\n", 3, "unknown [load] key 'surprise'"),
        ("[load]\nusers = 0\n", 2, "[load] users:"),
        ("[load]\nusers = 2\n\n[lode]\nx = 1\n", 4, "unknown top-level key 'lode'"),
    ],
)
def test_scenario_mistakes_name_the_file_and_the_line(tmp_path, text, line, message):
    path = tmp_path / "s.toml"
    path.write_text(text)
    with pytest.raises(SLOFileError) as err:
        read_scenario(path)
    assert err.value.line == line and message in err.value.detail
    assert str(err.value).startswith(f"{path}:{line}: ")


def test_soak_parses_its_scenario_once(tmp_path, monkeypatch):
    from streamslo.commands import soak
    from streamslo.run import execute

    path = tmp_path / "s.toml"
    path.write_text(SCENARIO)
    parses: list[str] = []
    loads = tomllib.loads

    def counting(text: str) -> dict:
        parses.append(text)
        return loads(text)

    ran = []
    monkeypatch.setattr(tomllib, "loads", counting)
    monkeypatch.setattr(execute, "execute", lambda cfg: ran.append(cfg) or 0)
    parser = argparse.ArgumentParser()
    soak.add_arguments(parser)
    args = parser.parse_args(["--scenario", str(path), "--out", str(tmp_path / "out")])
    assert soak.main(args) == 0
    (cfg,) = ran
    assert cfg.host == "http://127.0.0.1:9" and cfg.users == 3
    assert cfg.budget is not None and cfg.slo is not None
    assert parses == [SCENARIO]
