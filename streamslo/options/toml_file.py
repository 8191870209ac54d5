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
        m = _TOML_POS.search(msg)
        if m is not None:
            line, msg = int(m.group(1)), msg[: m.start()]
        elif _TOML_END.search(msg):
            line, msg = max(1, len(text.splitlines())), _TOML_END.sub("", msg)
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
