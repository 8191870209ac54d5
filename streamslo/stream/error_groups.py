"""The one rule that groups failed streams for people (docs/report.md, "Failures"): the terminal
summary, ``summary.json``'s ``top_errors``, the report and Locust's Failures tab all use it.

A failed stream belongs to the group of its **outcome**, its **cause**
(:class:`~streamslo.stream.cause.Cause`) and its **error text with the numbers masked**: counts,
sizes and durations become ``N`` (``61 token positions arrived of 64`` and ``62 token positions
arrived of 64`` are one group), while a number that names something stays (an HTTP status, a
WebSocket close code, an errno: ``HTTP 503``, ``close 1011``, ``Errno 111``). A group is shown
as its most frequent exact text (ties: the first in text order) with the group's count, and how
many distinct texts it holds.

Grouping is for reading only: no decision reads an error's words (the cause decides). Pure: no
I/O, nothing imported beyond the standard library.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

__all__ = [
    "MAX_TEXTS",
    "NO_TEXT",
    "ErrorKey",
    "ErrorTally",
    "GroupView",
    "error_key",
    "exact_text",
    "group_counts",
    "group_label",
    "mask_numbers",
    "representative",
    "with_similar",
]

#: What a failed stream without an error text is shown as (its text for grouping too).
NO_TEXT = "(no error text recorded)"

#: A number standing alone (not inside a word or an id), with an optional unit right after it
#: (``10s``, ``250ms``, ``4KiB``); not one that names a status, a close code, an errno or a code.
_NUMBER = re.compile(
    r"(?<![\w.])(?<!HTTP )(?<!status )(?<!close )(?<!code )(?<!Errno )(?<!errno )"
    r"\d+(?:\.\d+)?(?=(?:ms|s|KiB|MiB|GiB|bytes|B)?(?![\w.]))"
)

#: Distinct exact texts an incremental tally keeps per group (the rest still count in the
#: group's total): a server that puts a request id in every error must not grow memory.
MAX_TEXTS = 64


def mask_numbers(text: str) -> str:
    """``text`` with its counts, sizes and durations as ``N`` (see the module's docstring)."""
    return _NUMBER.sub("N", text)


class ErrorKey(NamedTuple):
    """The group of a failed stream."""

    outcome: str
    cause: str
    """The stream's cause; empty where the results predate causes (schema < 7)."""
    text: str
    """The error text with its numbers masked (:data:`NO_TEXT` when there was none)."""


def _text(error: object) -> str:
    if error is None or (isinstance(error, float) and error != error):  # None or NaN
        return NO_TEXT
    text = " ".join(str(error).split())
    return text or NO_TEXT


def error_key(outcome: object, cause: object, error: object) -> ErrorKey:
    """The group of a stream that ended ``outcome`` for ``cause`` with the text ``error``
    (None, NaN or blank: :data:`NO_TEXT`)."""
    c = "" if cause is None or (isinstance(cause, float) and cause != cause) else str(cause)
    return ErrorKey(str(outcome), c, mask_numbers(_text(error)))


def exact_text(error: object) -> str:
    """The text a group shows for ``error`` (whitespace collapsed, :data:`NO_TEXT` if none)."""
    return _text(error)


def representative(texts: Mapping[str, int]) -> str:
    """A group's shown text: its most frequent exact text, ties by text order."""
    return min(texts.items(), key=lambda kv: (-kv[1], kv[0]))[0]


def with_similar(text: str, texts: int) -> str:
    """A group's text with how many other texts it holds: ``after 6 of 64 tokens (and 2
    similar texts)``."""
    if texts <= 1:
        return text
    return f"{text} (and {texts - 1} similar text{'s' if texts > 2 else ''})"


def group_label(outcome: str, cause: str, text: str) -> str:
    """How one group reads in one line: ``silent_truncation (positions_missing): 61 token
    positions arrived of 64 the server counted``."""
    head = f"{outcome} ({cause})" if cause else outcome
    return f"{head}: {text}"


@dataclass(frozen=True)
class GroupView:
    """One group as it is shown."""

    key: ErrorKey
    count: int
    """Streams in the group."""
    text: str
    """Its most frequent exact text."""
    texts: int
    """Distinct exact texts in it (at least 1; a tally counts up to :data:`MAX_TEXTS`)."""


class ErrorTally:
    """Groups counted as streams end (Locust's Failures tab counts live): per group its count
    and up to :data:`MAX_TEXTS` exact texts with theirs."""

    def __init__(self) -> None:
        self._groups: dict[ErrorKey, tuple[int, dict[str, int]]] = {}

    def add(self, outcome: object, cause: object, error: object, n: int = 1) -> ErrorKey:
        """Count ``n`` streams with this ending; returns their group."""
        key = error_key(outcome, cause, error)
        count, texts = self._groups.get(key, (0, {}))
        text = exact_text(error)
        if text in texts or len(texts) < MAX_TEXTS:
            texts[text] = texts.get(text, 0) + n
        self._groups[key] = (count + n, texts)
        return key

    def view(self, key: ErrorKey) -> GroupView:
        """The group ``key`` as it is shown.

        Raises:
            KeyError: nothing was counted in it.
        """
        count, texts = self._groups[key]
        return GroupView(key, count, representative(texts), len(texts))

    def views(self) -> list[GroupView]:
        """Every group, the largest first (ties: outcome, cause, text)."""
        out = [self.view(k) for k in self._groups]
        out.sort(key=lambda g: (-g.count, g.key))
        return out

    def clear(self) -> None:
        self._groups.clear()

    def __len__(self) -> int:
        return len(self._groups)


def group_counts(rows: Iterable[tuple[object, object, object, int]]) -> list[GroupView]:
    """Every group of ``(outcome, cause, error, streams)`` rows (one row per distinct ending,
    as a DataFrame's value counts give them), the largest first."""
    groups: dict[ErrorKey, dict[str, int]] = {}
    for outcome, cause, error, n in rows:
        texts = groups.setdefault(error_key(outcome, cause, error), {})
        text = exact_text(error)
        texts[text] = texts.get(text, 0) + int(n)
    out = [
        GroupView(key, sum(texts.values()), representative(texts), len(texts))
        for key, texts in groups.items()
    ]
    out.sort(key=lambda g: (-g.count, g.key))
    return out
