"""The history store: one SQLite file, embedded (no server), that CI can keep between nights.

Why SQLite and not DuckDB over Parquet, measured side by side by ``bench/bench_history.py``
(bench/RESULTS.md, "Run history"; 1,000 runs in 10 series, 2 shared cores): reading the trend
of one series' last 30 runs took 3.3 ms from SQLite and 228 ms from DuckDB over Parquet (a
Parquet file cannot be appended to: a file per run and table, every query opens them all);
adding a run took 3.8 ms and 2.1 ms; the files were 125 MB and 87 MB; DuckDB costs a 68 MB
dependency and 82 ms of import, ``sqlite3`` is in the standard library. What DuckDB is good
at, scanning millions of rows, a history of nightly runs never does.

Tables (``SCHEMA_VERSION`` in ``meta``)::

    runs     one row per added results directory: the series it belongs to (scenario, target),
             its start, where it was, the code's version, whether its thresholds held, and as
             JSON its options, summary.json and slo.json
    figures  one row per run and history metric: the value, and its stream-resamples
             (float64 little-endian bytes)
    windows  one row per run and window of windows.csv (the row as JSON)

A run is identified by its series and its start (``run_key``): adding a directory again adds
nothing.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from streamslo.errors import BadInputError
from streamslo.history.measure import Measured

__all__ = [
    "DEFAULT_STORE",
    "SCHEMA_VERSION",
    "STORE_ENV",
    "HistoryRun",
    "HistoryStore",
    "Series",
    "open_store",
    "store_path",
]

#: The store's format; a store written by a newer streamslo is refused, not guessed at.
SCHEMA_VERSION = 1
#: Where the store is without ``--store``: beside the results, in the current folder.
DEFAULT_STORE = Path(".streamslo") / "history.sqlite"
#: The environment variable that names the store when ``--store`` is not given.
STORE_ENV = "STREAMSLO_HISTORY"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs(
    id INTEGER PRIMARY KEY,
    run_key TEXT NOT NULL UNIQUE,
    scenario TEXT NOT NULL,
    target TEXT NOT NULL,
    start TEXT NOT NULL,
    start_epoch REAL NOT NULL,
    end_time TEXT,
    added_at TEXT NOT NULL,
    path TEXT NOT NULL,
    tool_version TEXT,
    code_version TEXT,
    locust_version TEXT,
    passed INTEGER,
    valid INTEGER NOT NULL,
    resamples INTEGER NOT NULL,
    seed INTEGER NOT NULL,
    options TEXT NOT NULL,
    summary TEXT NOT NULL,
    slo TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_series ON runs(scenario, target, start_epoch);
CREATE TABLE IF NOT EXISTS figures(
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    metric TEXT NOT NULL,
    value REAL,
    resamples BLOB NOT NULL,
    PRIMARY KEY(run_id, metric)
);
CREATE TABLE IF NOT EXISTS windows(
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    window_start REAL NOT NULL,
    row TEXT NOT NULL,
    PRIMARY KEY(run_id, window_start)
);
"""


def store_path(given: str | os.PathLike[str] | None) -> Path:
    """The store: ``--store`` when given, else ``$STREAMSLO_HISTORY``, else
    :data:`DEFAULT_STORE` (``.streamslo/history.sqlite`` in the current folder)."""
    if given is not None:
        return Path(given)
    env = os.environ.get(STORE_ENV)
    return Path(env) if env else DEFAULT_STORE


@dataclass(frozen=True)
class HistoryRun:
    """One run as the store holds it (without its windows: :meth:`HistoryStore.windows`)."""

    id: int
    run_key: str
    scenario: str
    target: str
    start: str
    """ISO 8601 UTC."""
    start_epoch: float
    path: str
    """The results directory when it was added."""
    tool_version: str | None
    code_version: str | None
    """``git describe`` of the code that ran, when it ran from a git checkout."""
    passed: bool | None
    """Whether every threshold held and the run was valid (None: no ``slo.json``)."""
    valid: bool
    figures: Mapping[str, Measured]
    options: Mapping[str, Any] = field(default_factory=dict)
    summary: Mapping[str, Any] = field(default_factory=dict)
    slo: Sequence[Mapping[str, Any]] = ()
    end: str | None = None
    added_at: str = ""
    locust_version: str | None = None
    resamples: int = 0
    seed: int = 0


@dataclass(frozen=True)
class Series:
    """Runs of one scenario against one target."""

    scenario: str
    target: str
    runs: int
    last_start: str


def _blob(a: np.ndarray) -> bytes:
    return np.asarray(a, dtype="<f8").tobytes()


def _array(b: bytes) -> np.ndarray:
    return np.frombuffer(b, dtype="<f8").copy()


class HistoryStore:
    """An open store (use :func:`open_store`)."""

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self._conn = conn
        self.path = path

    # ------------------------------------------------------------------ writing
    def add(
        self, run: HistoryRun, windows: Sequence[Mapping[str, object]] = ()
    ) -> tuple[int, bool]:
        """Add a run (its id is ignored) with its windows, in one transaction.

        Returns:
            (the run's id in the store, whether it was new: a run already there is not added
            again).
        """
        c = self._conn
        row = c.execute("SELECT id FROM runs WHERE run_key = ?", (run.run_key,)).fetchone()
        if row is not None:
            return int(row[0]), False
        with c:
            cur = c.execute(
                "INSERT INTO runs(run_key, scenario, target, start, start_epoch, end_time,"
                " added_at, path, tool_version, code_version, locust_version, passed, valid,"
                " resamples, seed, options, summary, slo)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    run.run_key,
                    run.scenario,
                    run.target,
                    run.start,
                    run.start_epoch,
                    run.end,
                    run.added_at,
                    run.path,
                    run.tool_version,
                    run.code_version,
                    run.locust_version,
                    None if run.passed is None else int(run.passed),
                    int(run.valid),
                    run.resamples,
                    run.seed,
                    json.dumps(run.options, default=str),
                    json.dumps(run.summary, default=str),
                    json.dumps(list(run.slo), default=str),
                ),
            )
            run_id = int(cur.lastrowid or 0)
            c.executemany(
                "INSERT INTO figures(run_id, metric, value, resamples) VALUES (?, ?, ?, ?)",
                [(run_id, k, m.value, _blob(m.resamples)) for k, m in run.figures.items()],
            )
            c.executemany(
                "INSERT OR REPLACE INTO windows(run_id, window_start, row) VALUES (?, ?, ?)",
                [
                    (run_id, float(start), json.dumps(dict(w), default=str))
                    for w in windows
                    if isinstance(start := w.get("window_start"), (int, float))
                ],
            )
        return run_id, True

    # ------------------------------------------------------------------ reading
    def series(self) -> list[Series]:
        """Every series in the store, the most recently run first."""
        rows = self._conn.execute(
            "SELECT scenario, target, COUNT(*), MAX(start) FROM runs"
            " GROUP BY scenario, target ORDER BY MAX(start_epoch) DESC"
        ).fetchall()
        return [Series(str(s), str(t), int(n), str(last)) for s, t, n, last in rows]

    def newest(self) -> HistoryRun | None:
        """The run that started last, of any series (without figures)."""
        row = self._conn.execute(
            f"SELECT {_COLUMNS} FROM runs ORDER BY start_epoch DESC, id DESC LIMIT 1"
        ).fetchone()
        return None if row is None else _run(row, {})

    def runs(self, scenario: str, target: str, last: int | None = None) -> list[HistoryRun]:
        """The runs of one series, oldest first: all of them, or the last ``last``."""
        sql = f"SELECT {_COLUMNS} FROM runs WHERE scenario = ? AND target = ? ORDER BY start_epoch DESC, id DESC"
        params: tuple[Any, ...] = (scenario, target)
        if last is not None:
            sql += " LIMIT ?"
            params += (last,)
        rows = self._conn.execute(sql, params).fetchall()[::-1]
        if not rows:
            return []
        ids = [int(r[0]) for r in rows]
        figures: dict[int, dict[str, Measured]] = {i: {} for i in ids}
        marks = ",".join("?" * len(ids))
        for run_id, metric, value, blob in self._conn.execute(
            f"SELECT run_id, metric, value, resamples FROM figures WHERE run_id IN ({marks})", ids
        ):
            figures[int(run_id)][str(metric)] = Measured(
                None if value is None else float(value), _array(blob)
            )
        return [_run(r, figures[int(r[0])]) for r in rows]

    def windows(self, run_id: int) -> list[dict[str, object]]:
        """The windows of one run, in order."""
        return [
            json.loads(r[0])
            for r in self._conn.execute(
                "SELECT row FROM windows WHERE run_id = ? ORDER BY window_start", (run_id,)
            )
        ]

    def close(self) -> None:
        self._conn.close()


_COLUMNS = (
    "id, run_key, scenario, target, start, start_epoch, path, tool_version, code_version,"
    " passed, valid, options, summary, slo, end_time, added_at, locust_version, resamples, seed"
)


def _run(row: Sequence[Any], figures: Mapping[str, Measured]) -> HistoryRun:
    (rid, key, scenario, target, start, epoch, path, tool, code, passed, valid) = row[:11]
    options, summary, slo, end, added, locust, resamples, seed = row[11:]
    return HistoryRun(
        id=int(rid),
        run_key=str(key),
        scenario=str(scenario),
        target=str(target),
        start=str(start),
        start_epoch=float(epoch),
        path=str(path),
        tool_version=tool,
        code_version=code,
        passed=None if passed is None else bool(passed),
        valid=bool(valid),
        figures=figures,
        options=json.loads(options),
        summary=json.loads(summary),
        slo=json.loads(slo),
        end=end,
        added_at=str(added),
        locust_version=locust,
        resamples=int(resamples),
        seed=int(seed),
    )


@contextmanager
def open_store(path: Path, create: bool = False) -> Iterator[HistoryStore]:
    """Open the store at ``path``.

    Args:
        path: the SQLite file.
        create: make it (and its folder) when it is not there.

    Raises:
        BadInputError: no store there (and ``create`` is false), a file that is not a
            history store, or one written by a newer streamslo (the message names the file).
    """
    path = Path(path)
    if not path.exists():
        if not create:
            raise BadInputError(
                f"{path}: no history store here (add runs with `streamslo history add DIR "
                f"--store {path}`)"
            )
        path.parent.mkdir(parents=True, exist_ok=True)
    elif path.is_dir():
        raise BadInputError(f"{path}: is a directory, expected a history store (a SQLite file)")
    conn = sqlite3.connect(path, timeout=30.0)
    try:
        try:
            conn.execute("PRAGMA foreign_keys = ON")
            version = _check_version(conn, path)
            if version is None:
                with conn:
                    conn.executescript(_SCHEMA)
                    conn.execute(
                        "INSERT OR REPLACE INTO meta(key, value) VALUES ('schema_version', ?)",
                        (str(SCHEMA_VERSION),),
                    )
        except sqlite3.DatabaseError as exc:
            raise BadInputError(f"{path}: not a history store ({exc})") from None
        yield HistoryStore(conn, path)
    finally:
        conn.close()


def _check_version(conn: sqlite3.Connection, path: Path) -> int | None:
    """The store's schema version; None for a new (empty) file."""
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if not tables:
        return None
    if "meta" not in tables or "runs" not in tables:
        raise BadInputError(f"{path}: a SQLite file, but not a streamslo history store")
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    version = int(row[0]) if row is not None else 0
    if version > SCHEMA_VERSION:
        raise BadInputError(
            f"{path}: a history store of format {version}, written by a newer streamslo "
            f"(this one reads format {SCHEMA_VERSION})"
        )
    return version
