"""Decoding one JSON chunk from a server without trusting it.

``json.loads`` takes ``Infinity`` and ``NaN`` (not JSON; ``int()`` of them raises), and recurses
once per nesting level (a chunk nested 100,000 deep raises ``RecursionError``, which no caller
expected). :func:`loads_chunk` bounds the depth before decoding, rejects the non-standard
constants, and turns every failure into :class:`ChunkJSONError` (a ``ValueError``), so the
tracker's one ``except ValueError`` covers all of it.
"""

from __future__ import annotations

import json
import re
from typing import Any, NoReturn

from streamslo.stream.caps import MAX_JSON_DEPTH

__all__ = ["ChunkJSONError", "json_depth_exceeds", "loads_chunk"]

# The characters that matter to nesting: quotes and backslashes (strings), brackets.
_SPECIAL = re.compile(r'["\\\[\]{}]')


class ChunkJSONError(ValueError):
    """A chunk that is not JSON we accept (syntax, depth, or a non-finite constant)."""


def _reject_constant(name: str) -> NoReturn:
    raise ChunkJSONError(f"non-standard JSON constant {name}")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def json_depth_exceeds(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether ``text`` opens more than ``limit`` nested arrays/objects (strings skipped).

    Linear in the text, with no backtracking: it visits only quotes, backslashes and
    brackets, and stops as soon as the limit is passed.
    """
    if text.count("[") + text.count("{") <= limit:
        return False  # cheap and by far the common case: not enough brackets to be deep
    depth = 0
    in_string = False
    escaped_at = -1  # the position a backslash in a string escapes
    for m in _SPECIAL.finditer(text):
        pos = m.start()
        if pos == escaped_at:
            continue
        c = text[pos]
        if in_string:
            if c == "\\":
                escaped_at = pos + 1
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c == "[" or c == "{":
            depth += 1
            if depth > limit:
                return True
        elif c == "]" or c == "}":
            depth -= 1
    return False


def loads_chunk(text: str) -> Any:
    """Decode one chunk's JSON.

    Raises:
        ChunkJSONError: not JSON, nested deeper than ``MAX_JSON_DEPTH``, or holding
            ``Infinity``/``NaN``.
    """
    if json_depth_exceeds(text):
        raise ChunkJSONError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        return _DECODER.decode(text)
    except RecursionError:  # a backstop: the depth scan above should have caught it
        raise ChunkJSONError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels") from None
    except ChunkJSONError:
        raise
    except ValueError as exc:
        raise ChunkJSONError(str(exc)[:120]) from None
