"""Request traces to replay with their timing: Mooncake JSONL, plain JSONL/CSV, BurstGPT CSV.

A trace is a file of requests, one per line, each with the moment it arrived and its input and
output lengths (``docs/workloads.md`` lists each format's fields):

- ``mooncake``: JSON Lines ``{"timestamp": MS, "input_length": N, "output_length": N,
  "hash_ids": [ID, ...]}`` (Mooncake's published traces; ``timestamp`` in milliseconds; each
  hash id names one block of ``--trace-block-tokens`` prompt tokens, 512 in Mooncake);
- ``jsonl``: JSON Lines with a time field (``timestamp`` in milliseconds, or ``time`` /
  ``offset`` in seconds) and lengths (``input_length`` | ``input_tokens`` | ``prompt_tokens``,
  ``output_length`` | ``output_tokens`` | ``max_tokens``), ``hash_ids`` optional;
- ``csv``: the same fields as CSV columns;
- ``burstgpt``: BurstGPT's CSV (``Timestamp`` in seconds, ``Model``, ``Request tokens``,
  ``Response tokens``, ``Total tokens``, ``Log Type``); rows with no response tokens (failed
  requests in the trace) are skipped and counted.

Offsets count from the trace's first request. A trace is read line by line and never held in
memory (:func:`iter_trace`), so a day of traffic replays from disk; :func:`describe_trace`
reads it once up front for ``run.json`` (name, sha256, requests, span) and to reject a bad
line before any load. Pure: no clock, no network.
"""

from __future__ import annotations

import csv
import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streamslo.errors import BadInputError

__all__ = [
    "TRACE_FORMATS",
    "TraceInfo",
    "TraceRequest",
    "describe_trace",
    "detect_format",
    "iter_trace",
]

#: ``--trace-format`` values (``auto``: detected from the first line).
TRACE_FORMATS = ("auto", "mooncake", "jsonl", "csv", "burstgpt")

_BURSTGPT_COLUMNS = ("Timestamp", "Request tokens", "Response tokens")
_INPUT_KEYS = ("input_length", "input_tokens", "prompt_tokens")
_OUTPUT_KEYS = ("output_length", "output_tokens", "max_tokens")
#: Time fields: name -> seconds per unit.
_TIME_KEYS = (("timestamp", 0.001), ("time", 1.0), ("offset", 1.0))


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One request of a trace."""

    index: int
    """0 for the trace's first request, counting only requests replayed (skipped rows left out)."""
    offset_s: float
    """Seconds after the trace's first request, at speed 1."""
    input_tokens: int
    """The prompt's length in tokens."""
    output_tokens: int
    """The answer's length in tokens (the request's ``max_tokens``)."""
    hash_ids: tuple[int, ...] = ()
    """The prompt's blocks (Mooncake): equal ids mean equal text; empty when the trace has none."""


@dataclass(frozen=True)
class TraceInfo:
    """What ``run.json`` keeps about a trace (``workload.trace``)."""

    path: str
    format: str
    sha256: str
    requests: int
    skipped: int
    span_s: float
    """Seconds from the first request to the last, at speed 1."""
    blocks: int
    """Distinct hash ids (0 without)."""

    @property
    def name(self) -> str:
        return Path(self.path).name

    def as_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "path": self.path,
            "format": self.format,
            "sha256": self.sha256,
            "requests": self.requests,
            "skipped": self.skipped,
            "span_s": round(self.span_s, 6),
            "distinct_blocks": self.blocks,
        }


def _first_line(path: Path) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    return line.strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInputError(f"{path}: cannot read the trace ({exc})") from None
    raise BadInputError(f"{path}: the trace is empty")


def detect_format(path: str | Path, fmt: str = "auto") -> str:
    """The trace's format: ``fmt`` itself unless ``auto``, else from its first line.

    Raises:
        BadInputError: an unknown format, or a first line that fits none.
    """
    if fmt not in TRACE_FORMATS:
        raise BadInputError(
            f"--trace-format must be one of {', '.join(TRACE_FORMATS)}, not {fmt!r}"
        )
    if fmt != "auto":
        return fmt
    p = Path(path)
    first = _first_line(p)
    if first.startswith("{"):
        try:
            obj = json.loads(first)
        except ValueError:
            raise BadInputError(f"{p}:1: not valid JSON") from None
        if isinstance(obj, dict) and "hash_ids" in obj and "input_length" in obj:
            return "mooncake"
        return "jsonl"
    header = next(csv.reader([first]))
    if all(c in header for c in _BURSTGPT_COLUMNS):
        return "burstgpt"
    return "csv"


def _whole(value: object, what: str, where: str, minimum: int) -> int:
    if isinstance(value, bool):
        raise BadInputError(f"{where}: {what} must be a whole number, not {value!r}")
    try:
        f = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise BadInputError(f"{where}: {what} must be a whole number, not {value!r}") from None
    if not f.is_integer() or f < minimum:
        raise BadInputError(f"{where}: {what} must be a whole number >= {minimum}, not {value!r}")
    return int(f)


def _time_s(row: dict[str, Any], where: str) -> float:
    for key, scale in _TIME_KEYS:
        raw = row.get(key)
        if raw is not None and raw != "":
            try:
                t = float(raw) * scale
            except (TypeError, ValueError):
                raise BadInputError(f"{where}: {key} must be a number, not {raw!r}") from None
            if t != t or t in (float("inf"), float("-inf")):
                raise BadInputError(f"{where}: {key} must be a finite number")
            return t
    raise BadInputError(f"{where}: no time field (timestamp in ms, or time / offset in seconds)")


def _length(row: dict[str, Any], keys: tuple[str, ...], what: str, where: str, minimum: int) -> int:
    for key in keys:
        raw = row.get(key)
        if raw is not None and raw != "":
            return _whole(raw, key, where, minimum)
    raise BadInputError(f"{where}: no {what} field ({' | '.join(keys)})")


def _hash_ids(raw: object, where: str) -> tuple[int, ...]:
    if raw is None or raw == "":
        return ()
    if isinstance(raw, str):  # a CSV cell: "1 2 3", "1,2,3" or "[1, 2, 3]"
        raw = [p for p in raw.strip("[]").replace(",", " ").split() if p]
    if not isinstance(raw, list):
        raise BadInputError(f"{where}: hash_ids must be a list of integers")
    return tuple(_whole(v, "a hash id", where, 0) for v in raw)


def _rows(path: Path, fmt: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, row) for every non-empty line, read as it goes."""
    try:
        f = open(path, encoding="utf-8", newline="")  # noqa: SIM115 (closed by the with below)
    except OSError as exc:
        raise BadInputError(f"{path}: cannot read the trace ({exc.strerror})") from None
    with f:
        if fmt in ("mooncake", "jsonl"):
            for no, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    obj = json.loads(line)
                except ValueError:
                    raise BadInputError(f"{path}:{no}: not valid JSON") from None
                if not isinstance(obj, dict):
                    raise BadInputError(f"{path}:{no}: a trace line must be a JSON object")
                yield f"{path}:{no}", obj
        else:
            reader = csv.DictReader(f)
            for row in reader:
                if not any((v or "").strip() for v in row.values() if isinstance(v, str)):
                    continue
                yield (
                    f"{path}:{reader.line_num}",
                    {
                        k.strip(): (v.strip() if isinstance(v, str) else v)
                        for k, v in row.items()
                        if k is not None
                    },
                )


def _parse(path: Path, fmt: str) -> Iterator[TraceRequest | None]:
    """Every row as a request, or None for a row the format says to skip."""
    first_t: float | None = None
    index = 0
    for where, row in _rows(path, fmt):
        if fmt == "burstgpt":
            t = _time_s({"time": row.get("Timestamp")}, where)
            out = _whole(row.get("Response tokens"), "Response tokens", where, 0)
            inp = _whole(row.get("Request tokens"), "Request tokens", where, 0)
            if out < 1 or inp < 1:
                yield None  # a failed request in the trace: nothing to replay
                continue
            hashes: tuple[int, ...] = ()
        else:
            t = _time_s(row, where)
            inp = _length(row, _INPUT_KEYS, "input length", where, 1)
            out = _length(row, _OUTPUT_KEYS, "output length", where, 1)
            hashes = _hash_ids(row.get("hash_ids"), where)
        if first_t is None:
            first_t = t
        yield TraceRequest(index, t - first_t, inp, out, hashes)
        index += 1


def iter_trace(path: str | Path, fmt: str = "auto") -> Iterator[TraceRequest]:
    """The trace's requests in file order, read line by line.

    Offsets count from the first request; an offset earlier than the one before it (an
    unsorted trace) is kept: that request is simply due at once.

    Raises:
        BadInputError: an unreadable file, or a bad line (the message names the file and line).
    """
    p = Path(path)
    for req in _parse(p, detect_format(p, fmt)):
        if req is not None:
            yield req


def describe_trace(path: str | Path, fmt: str = "auto") -> TraceInfo:
    """Read the whole trace once (streaming): its hash, size and span; rejects a bad line.

    Raises:
        BadInputError: as :func:`iter_trace`, or a trace with no request to replay.
    """
    p = Path(path)
    kind = detect_format(p, fmt)
    digest = hashlib.sha256()
    try:
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
    except OSError as exc:
        raise BadInputError(f"{p}: cannot read the trace ({exc.strerror})") from None
    requests = skipped = 0
    last = 0.0
    blocks: set[int] = set()
    for req in _parse(p, kind):
        if req is None:
            skipped += 1
            continue
        requests += 1
        last = max(last, req.offset_s)
        if len(blocks) < 10_000_000:  # a bound on memory for the count, not on the trace
            blocks.update(req.hash_ids)
    if requests == 0:
        raise BadInputError(f"{p}: the trace holds no request to replay")
    return TraceInfo(str(p), kind, digest.hexdigest(), requests, skipped, last, len(blocks))
