"""The one reader of TOML files: SLO files (``--slo``) and scenario files (``--scenario``).

A file is read and parsed once, into a :class:`TomlFile` that keeps its text so that every later
error can name the line (``file:line: message``, :class:`~streamslo.errors.SLOFileError`); the
typed sections are built from it by their own parsers:

- ``[thresholds]``: :func:`streamslo.slo.thresholds.slo_of` (and ``load_slo``/``parse_slo``);
- ``[budget]``: :func:`streamslo.slo.budget.read_slo_file` / ``sections_of``;
- ``[load]`` and ``[scenarios.NAME]``: :func:`streamslo.workload.scenario_file.read_scenario`,
  which ``run``, ``soak`` and ``sweep`` share (``soak`` reads its scenario once).

This is the only module of the package that imports :mod:`tomllib`.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streamslo.errors import SLOFileError

__all__ = ["TomlFile", "header_line", "key_line", "parse_toml", "read_toml"]

_TOML_POS = re.compile(r"\s*\(at line (\d+), column \d+\)\s*$")
_TOML_END = re.compile(r"\s*\(at end of document\)\s*$")


def _part(name: str) -> str:
    esc = re.escape(name)
    return rf"""(?:"{esc}"|'{esc}'|{esc})"""


def header_line(text: str, *parts: str, prefix: bool = False) -> int | None:
    """The 1-based line of the table header ``[a.b]`` (each part bare or quoted, spaces around
    the dots, ``[[...]]`` too), None when absent. With ``prefix``, a header that begins with
    the parts counts as well (``[a.b.c]`` for ``a.b``)."""
    name = r"\s*\.\s*".join(_part(p) for p in parts)
    end = r"(?![A-Za-z0-9_-])" if prefix else r"\s*\]"
    pat = re.compile(rf"^\s*\[+\s*{name}{end}")
    return next((i + 1 for i, ln in enumerate(text.splitlines()) if pat.match(ln)), None)


def key_line(text: str, head: int | None, key: str) -> int | None:
    """The 1-based line that sets ``key`` (bare or quoted) in the table whose header is on line
    ``head``, before the next header; ``head`` when the key is not there, None without one."""
    if head is None:
        return None
    lines = text.splitlines()
    pat = re.compile(rf"^\s*{_part(key)}\s*=")
    for i in range(head, len(lines)):
        if lines[i].lstrip().startswith("["):
            break
        if pat.match(lines[i]):
            return i + 1
    return head


@dataclass(frozen=True)
class TomlFile:
    """A parsed TOML file: where it came from, its text (for line numbers) and its tables."""

    path: str
    """The file as the user named it (errors name it so)."""
    text: str
    """The file's text."""
    doc: Mapping[str, Any]
    """The parsed document (TOML values: tables, arrays, strings, numbers, dates)."""

    def __contains__(self, name: object) -> bool:
        return name in self.doc

    def table_line(self, name: str) -> int | None:
        """The line of the table header ``[name]`` (or ``[name.``...), None when absent."""
        return header_line(self.text, name, prefix=True)

    def key_line(self, table: str, key: str) -> int | None:
        """The line that sets ``key`` in ``[table]`` (else the table's header line)."""
        return key_line(self.text, self.table_line(table), key)

    def error(self, line: int | None, message: str) -> SLOFileError:
        """An error in this file (``path:line: message``)."""
        return SLOFileError(self.path, line, message)


_CLOSERS = {"[": "]", "{": "}"}
#: A line that starts a statement: a table header or ``key =``.
_STATEMENT = re.compile(r"""^\s*(?:\[|(?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*')\s*(?:\.|=))""")


def _open_brackets(text: str, stop_line: int | None) -> list[tuple[str, int]]:
    """The ``[`` and ``{`` still open (each with its 1-based line) where the parser stopped:
    the start of ``stop_line``'s next line, or the end (None). Strings and comments skipped."""
    stack: list[tuple[str, int]] = []
    i, line, n = 0, 1, len(text)
    while i < n:
        c = text[i]
        if c == "\n":
            if stop_line is not None and line >= stop_line:
                break
            line += 1
        elif c == "#":
            while i + 1 < n and text[i + 1] != "\n":
                i += 1
        elif c in "\"'":
            quote = text[i : i + 3] if text[i : i + 3] in ('"""', "'''") else c
            i += len(quote)
            while i < n and not text.startswith(quote, i):
                if text[i] == "\\" and c == '"':
                    i += 1
                elif text[i] == "\n":
                    if len(quote) == 1:
                        break  # a one-line string left open: tomllib names that line itself
                    line += 1
                i += 1
            i += len(quote) - 1
        elif c in _CLOSERS:
            stack.append((c, line))
        elif stack and c == _CLOSERS[stack[-1][0]]:
            stack.pop()
        i += 1
    return stack


def _left_open(text: str, line: int | None) -> tuple[int, str] | None:
    """Where an array or inline table was left open, when that is why the parser stopped on a
    later line (the next statement, or the end): its line and its missing closer."""
    lines = text.splitlines()
    if line is not None and not (0 < line <= len(lines) and _STATEMENT.match(lines[line - 1])):
        return None  # the parser stopped inside the value: its own line is the mistake
    stack = _open_brackets(text, None if line is None else line - 1)
    if not stack:
        return None
    opener, opened = stack[0]
    return opened, _CLOSERS[opener]


def parse_toml(text: str, path: str = "<string>") -> TomlFile:
    """Parse TOML text.

    Args:
        text: the TOML.
        path: the file name to put in errors.

    Raises:
        SLOFileError: not valid TOML (names the line where the parser says).
    """
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        msg = str(exc)
        line: int | None = None
        at_end = False
        m = _TOML_POS.search(msg)
        if m is not None:
            line, msg = int(m.group(1)), msg[: m.start()]
        elif _TOML_END.search(msg):
            at_end, msg = True, _TOML_END.sub("", msg)
        # An array or inline table left open is noticed on the next statement (or at the end):
        # name the line that opened it, where the mistake is, and the line the parser reached.
        left_open = _left_open(text, None if at_end else line)
        if left_open is not None and left_open[0] != line:
            opened, closer = left_open
            reached = "the end of the file" if at_end else f"line {line}"
            raise SLOFileError(
                path,
                opened,
                f"not valid TOML: the {'array' if closer == ']' else 'inline table'} opened on "
                f"this line is not closed: no {closer!r} before {reached} ({msg} there)",
            ) from None
        if at_end:
            line = max(1, len(text.splitlines()))
        raise SLOFileError(path, line, f"not valid TOML: {msg}") from None
    return TomlFile(path, text, doc)


def read_toml(path: str | Path, what: str = "an SLO file") -> TomlFile:
    """Read and parse a TOML file, once.

    Args:
        path: the file.
        what: what the file should be, for the error when it is a directory.

    Raises:
        SLOFileError: the file is missing, a directory, not UTF-8, unreadable or not valid TOML.
    """
    name = str(path)
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise SLOFileError(name, None, "no such file") from None
    except IsADirectoryError:
        raise SLOFileError(name, None, f"is a directory, expected {what} (TOML)") from None
    except UnicodeDecodeError as exc:
        raise SLOFileError(
            name, None, f"not UTF-8 text ({exc.reason} at byte {exc.start})"
        ) from None
    except OSError as exc:
        raise SLOFileError(name, None, f"cannot be read ({exc.strerror or exc})") from None
    return parse_toml(text, name)
