"""One Layout: every file of a results directory is named in streamslo/results/layout.py only."""

from __future__ import annotations

import ast
from pathlib import Path

from streamslo.results.layout import Layout

PACKAGE = Path(__file__).resolve().parents[2] / "streamslo"

FILE_NAMES = {
    "run.json",
    "streams.csv",
    "gaps.parquet",
    "summary.json",
    "slo.json",
    "windows.csv",
    "locust.log",
    "metrics.jsonl",
    "stalls.json",
    "workers.json",
    ".run_start",
}
FOLDER_NAMES = {"server", "procs", "writers"}

#: Modules of the load generator that still spell a name; each is replaced by the Layout
#: attribute at merge (see docs/results.md). Empty this as they go: the test says when.
PENDING: dict[str, set[str]] = {}


def _spelled(path: Path) -> set[str]:
    """Results-directory names a module spells in code: a file name as a string, or a folder
    name joined onto a path (``x / "server"``). Docstrings do not count."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and node.value in FILE_NAMES:
            found.add(node.value)
        if (
            isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.Div)
            and isinstance(node.right, ast.Constant)
            and node.right.value in FOLDER_NAMES
        ):
            found.add(node.right.value)
    return found


def test_no_module_but_results_spells_a_results_file():
    offenders = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel == "results/layout.py":
            continue
        names = _spelled(path)
        if names:
            offenders[rel] = names
    assert offenders == PENDING


def test_layout_paths(tmp_path):
    lay = Layout(tmp_path)
    assert lay == Layout(str(tmp_path)) and lay.root == tmp_path
    assert {
        p.relative_to(tmp_path).as_posix()
        for p in (
            lay.run_json,
            lay.streams_csv,
            lay.gaps_dir,
            lay.summary_json,
            lay.slo_json,
            lay.windows_csv,
            lay.procs_dir,
            lay.writers_dir,
            lay.server_dir,
            lay.server_metrics,
            lay.server_stalls,
            lay.server_workers,
            lay.run_start_marker,
            lay.locust_log,
        )
    } == {
        "run.json",
        "streams.csv",
        "gaps.parquet",
        "summary.json",
        "slo.json",
        "windows.csv",
        "procs",
        "writers",
        "server",
        "server/metrics.jsonl",
        "server/stalls.json",
        "server/workers.json",
        ".run_start",
        "locust.log",
    }
    assert lay.proc_json("p1") == tmp_path / "procs" / "p1.json"
    assert lay.writer_json("w1") == tmp_path / "writers" / "w1.json"
    assert lay.gap_part("123-abc", 7) == tmp_path / "gaps.parquet" / "part-123-abc-00007.parquet"


def test_new_modules_declare_their_api():
    from tests.test_cli import test_all_matches_public_names

    for name in (
        "streamslo.results.gaps",
        "streamslo.results.writer",
        "streamslo.run.signals",
        "streamslo.results._streams_csv",
    ):
        test_all_matches_public_names(name)
