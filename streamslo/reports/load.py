"""Results directories (docs/results.md) turned into tidy pandas frames for the report.

A :class:`LoadedRun` wraps :func:`streamslo.results.layout.load_run` (the same loader ``verify`` uses,
so the report and ``verify`` see the same rows) with a label (``before``, ``after`` or ``run``),
a human name, the run's start and duration, and any server-side evidence found in
``DIR/server/``:

- ``metrics.jsonl``: one Prometheus scrape a line, ``{"t": s, "epoch": s, "metrics": {sample:
  value}, "types": {...}}``, loaded as a tidy frame ``t, epoch, sample, name, labels, value``
  (values ``"NaN"``, ``"+Inf"``, ``"-Inf"`` as floats) and the samples' types;
- ``stalls.json`` / ``workers.json``: the bundled server's ``/debug/stalls`` and
  ``/debug/workers`` at the end of the run, kept as parsed JSON.

Evidence is optional: absent files give an empty :class:`ServerEvidence`. A damaged file gives
:class:`~streamslo.errors.ResultsError` naming it (a half-written *last* line of
``metrics.jsonl``, which a killed run can leave, is skipped).

:func:`comparability_warnings` says, in words, how two runs differ where a comparison would
mislead (scenario, users, duration, protocol, max_tokens).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from streamslo.errors import ResultsError
from streamslo.figures.metrics import run_duration_s
from streamslo.results.layout import Layout, RunData, load_run
from streamslo.results.schema import RunJson

__all__ = [
    "DURATION_TOLERANCE",
    "LoadedRun",
    "ServerEvidence",
    "comparability_warnings",
    "load_report_runs",
    "load_server_evidence",
    "parse_sample_name",
]

#: Durations that differ by more than this fraction make a comparison warning.
DURATION_TOLERANCE = 0.10

_NON_FINITE = ("NaN", "+Inf", "-Inf")
_SAMPLE = re.compile(r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>.*)\})?$")


@dataclass(frozen=True)
class ServerEvidence:
    """What the target server said about itself during a run (all optional)."""

    metrics: pd.DataFrame
    """Tidy scrapes: ``t`` (s since the scraping began), ``epoch`` (the scrape's time; NaN in
    files written before it was recorded), ``sample``, ``name``, ``labels``, ``value``."""
    stalls: Any = None
    """Parsed ``stalls.json`` (``/debug/stalls`` at the end of the run), or None."""
    workers: Any = None
    """Parsed ``workers.json`` (``/debug/workers`` at the end of the run), or None."""
    notes: tuple[str, ...] = field(default=())
    """Things worth telling the reader about the evidence (skipped lines...)."""
    types: dict[str, str] = field(default_factory=dict)
    """Each sample name's family type from the server's ``# TYPE`` lines (``counter``,
    ``gauge``, ``histogram``, ``summary``, ``unknown``); empty for older files."""

    @property
    def present(self) -> bool:
        """Whether any evidence was found."""
        return len(self.metrics) > 0 or self.stalls is not None or self.workers is not None


@dataclass(frozen=True)
class LoadedRun:
    """One results directory, loaded and labelled for the report."""

    label: str
    """``before``, ``after`` or ``run`` (a single-run report)."""
    name: str
    """Human name: the bundled server's mode when known, else the directory's name."""
    data: RunData
    """The loaded run, as :mod:`streamslo.figures.metrics` expects it."""
    start_epoch: float | None
    """Epoch seconds of the run's start (run.json, else the first stream's start)."""
    duration_s: float | None
    """Length of the run in seconds (run.json, else the span of its streams)."""
    server: ServerEvidence
    """Server-side evidence from ``DIR/server/``."""

    @property
    def path(self) -> Path:
        """The results directory."""
        return self.data.path

    @property
    def run(self) -> RunJson:
        """run.json (empty when absent)."""
        return self.data.run

    @property
    def streams(self) -> pd.DataFrame:
        """streams.csv as a frame."""
        return self.data.streams  # type: ignore[no-any-return,unused-ignore]

    @property
    def gaps(self) -> pd.DataFrame:
        """gaps.parquet as a frame."""
        return self.data.gaps  # type: ignore[no-any-return,unused-ignore]


def parse_sample_name(sample: str) -> tuple[str, str]:
    """Split a Prometheus sample name ``name{labels}`` into ``(name, labels)``."""
    m = _SAMPLE.match(sample.strip())
    if not m:
        return sample, ""
    return m.group("name"), m.group("labels") or ""


def _read_json_any(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ResultsError(f"{path}: cannot be read as JSON ({exc})") from None


def _read_metrics(path: Path) -> tuple[pd.DataFrame, dict[str, str], tuple[str, ...]]:
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise ResultsError(f"{path}: cannot be read ({exc})") from None
    rows: list[tuple[float, float, str, str, str, float]] = []
    types: dict[str, str] = {}
    notes: list[str] = []
    numbered = [(i, ln) for i, ln in enumerate(lines, start=1) if ln.strip()]
    for pos, (lineno, line) in enumerate(numbered):
        try:
            obj = json.loads(line)
            t = float(obj["t"])
            epoch = float(obj["epoch"]) if obj.get("epoch") is not None else float("nan")
            metrics = obj["metrics"]
            if not isinstance(metrics, dict):
                raise TypeError("metrics is not an object")
            new_rows = []
            for sample, value in metrics.items():
                if value is None:
                    continue
                if isinstance(value, str) and value not in _NON_FINITE:
                    raise ValueError(f"{sample}: {value!r} is not a value")
                name, labels = parse_sample_name(str(sample))
                # "NaN", "+Inf", "-Inf": how the writer keeps its JSON strict.
                new_rows.append((t, epoch, str(sample), name, labels, float(value)))
            line_types = obj.get("types") or {}
            if not isinstance(line_types, dict):
                raise TypeError("types is not an object")
        except (ValueError, KeyError, TypeError) as exc:
            if pos == len(numbered) - 1:
                # A run killed mid-scrape leaves half a last line: keep what came before.
                notes.append(f"{path.name}: skipped a damaged last line {lineno}")
                continue
            raise ResultsError(f"{path}:{lineno}: not a metrics scrape ({exc})") from None
        rows += new_rows
        types.update({str(k): str(v) for k, v in line_types.items()})
    frame = pd.DataFrame(rows, columns=["t", "epoch", "sample", "name", "labels", "value"])
    return (
        frame.astype({"t": "float64", "epoch": "float64", "value": "float64"}),
        types,
        tuple(notes),
    )


def load_server_evidence(directory: Path) -> ServerEvidence:
    """Load ``DIR/server/`` (metrics.jsonl, stalls.json, workers.json), each optional.

    Raises:
        ResultsError: a file that is there but damaged (the message names it).
    """
    layout = Layout(Path(directory))
    folder = layout.server_dir
    empty = pd.DataFrame(
        {
            "t": pd.Series(dtype="float64"),
            "epoch": pd.Series(dtype="float64"),
            "sample": pd.Series(dtype="object"),
            "name": pd.Series(dtype="object"),
            "labels": pd.Series(dtype="object"),
            "value": pd.Series(dtype="float64"),
        }
    )
    if not folder.is_dir():
        return ServerEvidence(metrics=empty)
    metrics: pd.DataFrame = empty
    notes: tuple[str, ...] = ()
    types: dict[str, str] = {}
    if layout.server_metrics.exists():
        metrics, types, notes = _read_metrics(layout.server_metrics)
    stalls = _read_json_any(layout.server_stalls) if layout.server_stalls.exists() else None
    workers = _read_json_any(layout.server_workers) if layout.server_workers.exists() else None
    return ServerEvidence(metrics=metrics, stalls=stalls, workers=workers, notes=notes, types=types)


def _start(data: RunData) -> float | None:
    start = data.run.get("start_epoch")
    if isinstance(start, (int, float)):
        return float(start)
    s = data.streams
    return float(s["started_at"].min()) if len(s) and s["started_at"].notna().any() else None


def _name(data: RunData) -> str:
    mode = data.run.get("server_mode")
    return str(mode) if mode else data.path.name


def _load_one(directory: Path, label: str) -> LoadedRun:
    data = load_run(directory)
    return LoadedRun(
        label=label,
        name=_name(data),
        data=data,
        start_epoch=_start(data),
        duration_s=run_duration_s(data),
        server=load_server_evidence(data.path),
    )


def load_report_runs(before_dir: Path | None, after_dir: Path) -> tuple[LoadedRun, ...]:
    """Load the runs of a report: ``(run,)`` alone, or ``(before, after)``.

    Raises:
        ResultsError: a directory or file that is missing or damaged (the message names it).
    """
    if before_dir is None:
        return (_load_one(Path(after_dir), "run"),)
    return (_load_one(Path(before_dir), "before"), _load_one(Path(after_dir), "after"))


def _protocol(run: RunJson) -> str:
    from streamslo.reports.glossary import protocol_text

    return protocol_text(run.get("protocol"), run.get("protocol_mix"))


def _word(v: Any) -> str:
    return "not set" if v is None or v == "" else str(v)


def comparability_warnings(before: LoadedRun, after: LoadedRun) -> tuple[str, ...]:
    """Every way two runs differ that makes their comparison questionable, in words.

    Checked: scenario, users, protocol (and mix), dialect (``api``), max_tokens, and duration (more than
    :data:`DURATION_TOLERANCE` apart). A value missing from both run.json files is no warning.
    """
    out: list[str] = []
    b, a = before.run, after.run
    for key, what in (("scenario", "scenario"), ("users", "users")):
        if b.get(key) != a.get(key):
            out.append(
                f"The runs differ in {what}: {_word(b.get(key))} before, {_word(a.get(key))} after."
            )
    if _protocol(b) != _protocol(a):
        out.append(f"The runs differ in protocol: {_protocol(b)} before, {_protocol(a)} after.")
    if b.get("api") and a.get("api") and b.get("api") != a.get("api"):
        out.append(
            f"The runs differ in dialect: {b.get('api')} before, {a.get('api')} after (the "
            "server answers each on another path, with its own events and stop reasons)."
        )
    if b.get("max_tokens") != a.get("max_tokens"):
        out.append(
            f"The runs differ in max_tokens: {_word(b.get('max_tokens'))} before, "
            f"{_word(a.get('max_tokens'))} after (TPOT and E2E are not comparable)."
        )
    # The configured length when run.json has it (a hung server's drain stretches the measured
    # one), else the measured one.
    db = b.get("duration_s") if isinstance(b.get("duration_s"), (int, float)) else before.duration_s
    da = a.get("duration_s") if isinstance(a.get("duration_s"), (int, float)) else after.duration_s
    if db and da and abs(db - da) / max(db, da) > DURATION_TOLERANCE:
        out.append(f"The runs differ in duration: {db:.1f} s before, {da:.1f} s after.")
    return tuple(out)
