"""Parsing of durations and other command-line values.

Durations are seconds (``30``, ``2.5``) or k6-style (``500ms``, ``30s``, ``5m``, ``1h``,
``1m30s``).
"""

from __future__ import annotations

import argparse
import re

__all__ = ["duration_arg", "fraction_arg", "parse_duration", "positive_int_arg"]

_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")


def parse_duration(text: str | float | int) -> float:
    """Parse a duration into seconds.

    Args:
        text: ``"30"``, ``"30s"``, ``"5m"``, ``"1h"``, ``"1m30s"``, ``"250ms"`` or a number.

    Returns:
        The duration in seconds (never negative).

    Raises:
        ValueError: the text is not a duration.
    """
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        s = text.strip().lower()
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
                raise ValueError(
                    f"not a duration: {text!r} (use seconds, or 500ms, 30s, 5m, 1h)"
                ) from None
    if value < 0:
        raise ValueError(f"a duration cannot be negative: {text!r}")
    return value


def duration_arg(text: str) -> float:
    """argparse ``type=`` for durations."""
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def fraction_arg(text: str) -> float:
    """argparse ``type=`` for a fraction in [0, 1]."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1: {text!r}")
    return value


def positive_int_arg(text: str) -> int:
    """argparse ``type=`` for an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text!r}")
    return value
