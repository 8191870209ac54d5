"""Parsing of durations, counts and fractions: command-line text and scenario (TOML) values.

Durations are seconds (``30``, ``2.5``) or k6-style (``500ms``, ``30s``, ``5m``, ``1h``,
``1m30s``). Every parser here takes either text (a command line, Locust's web UI) or the
native value a TOML file holds (``64``, ``2.5``), and raises :class:`ValueError` with a
message that says what was expected; callers add where the value came from.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from typing import TypeVar

__all__ = [
    "duration_arg",
    "format_duration",
    "fraction_arg",
    "parse_duration",
    "parse_float",
    "parse_fraction",
    "parse_int",
    "positive_int_arg",
    "unit_form",
]

_T = TypeVar("_T")

_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
#: Units as people spell them, and the one each is written as.
_UNIT_WORDS = {
    **dict.fromkeys(("ms", "msec", "msecs", "millisecond", "milliseconds"), "ms"),
    **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), "s"),
    **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), "m"),
    **dict.fromkeys(("h", "hr", "hrs", "hour", "hours"), "h"),
}
_SPELLED = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]+)")


def unit_form(text: str) -> str | None:
    """A duration spelled out in words, as a duration is written: ``"5 minutes"`` → ``"5m"``,
    ``"1 hour 30 min"`` → ``"1h30m"``; None when ``text`` is not one."""
    s = text.strip().lower().replace(",", " ").replace(" and ", " ")
    pos, parts = 0, []
    for m in _SPELLED.finditer(s):
        if s[pos : m.start()].strip() or m.group(2) not in _UNIT_WORDS:
            return None
        parts.append(m.group(1) + _UNIT_WORDS[m.group(2)])
        pos = m.end()
    return "".join(parts) if parts and not s[pos:].strip() else None


def parse_duration(text: str | float | int) -> float:
    """Parse a duration into seconds.

    Args:
        text: ``"30"``, ``"30s"``, ``"5m"``, ``"1h"``, ``"1m30s"``, ``"250ms"`` or a number.

    Returns:
        The duration in seconds (never negative).

    Raises:
        ValueError: the text is not a duration.
    """
    if isinstance(text, bool):
        raise ValueError(f"not a duration: {text!r} (use seconds, or 500ms, 30s, 5m, 1h)")
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        s = str(text).strip().lower()
        try:
            value = float(s)
        except ValueError:
            pos, value = 0, 0.0
            for m in _PART.finditer(s):
                if m.start() != pos:
                    break
                value += float(m.group(1)) * _UNIT_S[m.group(2)]
                pos = m.end()
            if pos != len(s) or not s:
                spelled = unit_form(s)
                hint = f": did you mean {spelled}?" if spelled else ""
                raise ValueError(
                    f"not a duration: {text!r}{hint} (use seconds, or 500ms, 30s, 5m, 1h)"
                ) from None
    if value < 0:
        raise ValueError(f"a duration cannot be negative: {text!r}")
    return value


def format_duration(seconds: float) -> str:
    """The shortest text :func:`parse_duration` reads back as ``seconds``: ``10s``, ``50ms``."""
    if seconds and seconds < 1 and round(seconds * 1000, 6).is_integer():
        return f"{round(seconds * 1000):d}ms"
    return f"{seconds:g}s"


def parse_int(value: object, minimum: int | None = None) -> int:
    """An integer from text or a TOML integer.

    Raises:
        ValueError: not an integer (a bool or a fraction is not), or below ``minimum``.
    """
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise ValueError(f"not an integer: {value!r}")
    try:
        number = int(value) if isinstance(value, (int, float)) else int(str(value).strip())
    except ValueError:
        raise ValueError(f"not an integer: {value!r}") from None
    if minimum is not None and number < minimum:
        raise ValueError(f"must be at least {minimum}: {value!r}")
    return number


def parse_float(
    value: object,
    minimum: float | None = None,
    maximum: float | None = None,
    *,
    above: bool = False,
) -> float:
    """A number from text or a TOML number.

    Args:
        value: the text or number.
        minimum: the lowest value allowed (or, with ``above``, the value it must exceed).
        maximum: the highest value allowed.
        above: ``minimum`` itself is not allowed.

    Raises:
        ValueError: not a finite number, or out of range.
    """
    if isinstance(value, bool):
        raise ValueError(f"not a number: {value!r}")
    try:
        number = float(value) if isinstance(value, (int, float)) else float(str(value).strip())
    except ValueError:
        raise ValueError(f"not a number: {value!r}") from None
    if number != number or number in (float("inf"), float("-inf")):
        raise ValueError(f"not a finite number: {value!r}")
    if minimum is not None and (number <= minimum if above else number < minimum):
        raise ValueError(f"must be {'above' if above else 'at least'} {minimum:g}: {value!r}")
    if maximum is not None and number > maximum:
        raise ValueError(f"must be at most {maximum:g}: {value!r}")
    return number


def parse_fraction(value: object) -> float:
    """A number in [0, 1].

    Raises:
        ValueError: not a number, or outside [0, 1].
    """
    number = parse_float(value)
    if not 0.0 <= number <= 1.0:
        raise ValueError(f"must be between 0 and 1: {value!r}")
    return number


def _arg(parse: Callable[[str], _T]) -> Callable[[str], _T]:
    """An argparse ``type=`` that reports the parser's own message (argparse would replace a
    ValueError's text with a generic "invalid value")."""

    def convert(text: str) -> _T:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = parse.__name__
    return convert


duration_arg = _arg(parse_duration)
"""argparse ``type=`` for durations."""
fraction_arg = _arg(parse_fraction)
"""argparse ``type=`` for a fraction in [0, 1]."""
positive_int_arg = _arg(lambda text: parse_int(text, 1))
"""argparse ``type=`` for an integer >= 1."""
