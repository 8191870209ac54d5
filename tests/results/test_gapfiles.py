"""Merging gap part files is idempotent: a kill at any step never doubles (or loses) a gap."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from streamslo.results import gaps as gapfiles
from streamslo.results.layout import Layout, compact_gaps, load_run
from streamslo.results.writer import ResultsWriter
from tests.results.helpers import record

REPO = Path(__file__).resolve().parents[2]


class Killed(Exception):
    """Stands for a kill at one step of a merge."""


def _three_parts(directory: Path) -> Path:
    w = ResultsWriter(directory, run_start=1.0, flush_interval=3600)
    for n in range(3):  # three flushes: three part files
        for i in range(4):
            w.add(record(10 * n + i, gaps=5))
        w.flush(wait=True)
    return directory


def _steps(directory: Path) -> list[str]:
    seen: list[str] = []
    probe = directory.parent / "probe"
    shutil.copytree(directory, probe)
    gapfiles.compact(Layout(probe).gaps_dir, checkpoint=seen.append)
    return seen


def _gap_keys(directory: Path) -> pd.DataFrame:
    return load_run(directory).gaps[["stream_id", "index"]]


@pytest.fixture
def parts(tmp_path):
    return _three_parts(tmp_path / "run")


def test_merge_leaves_one_file_with_every_gap_once(parts):
    before = _gap_keys(parts)
    assert len(list(Layout(parts).gaps_dir.glob("part-*.parquet"))) == 3
    compact_gaps(parts)
    files = list(Layout(parts).gaps_dir.iterdir())
    assert len(files) == 1 and files[0].name.startswith(gapfiles.MERGED_PREFIX)
    after = _gap_keys(parts)
    assert len(after) == len(before) == 12 * 5
    assert not after.duplicated().any()


def test_a_kill_at_any_step_doubles_nothing(parts, tmp_path):
    steps = _steps(parts)
    assert steps[:2] == ["written", "renamed"] and len(steps) == 2 + 3
    expected = len(_gap_keys(parts))
    for step in steps:
        run = tmp_path / f"at-{step.replace(' ', '-')}"
        shutil.copytree(parts, run)

        def kill(name: str, step: str = step) -> None:
            if name == step:
                raise Killed(name)

        with pytest.raises(Killed):
            gapfiles.compact(Layout(run).gaps_dir, checkpoint=kill)
        keys = _gap_keys(run)
        assert len(keys) == expected, f"after a kill at {step!r}"
        assert not keys.duplicated().any(), f"after a kill at {step!r}"
        compact_gaps(run)  # the next finalize finishes the job
        assert len(list(Layout(run).gaps_dir.iterdir())) == 1, step
        assert len(_gap_keys(run)) == expected, step


def test_a_real_kill_after_the_merged_file_is_in_place(parts):
    """The process dies (os._exit) right after the rename, before deleting any part."""
    script = textwrap.dedent(
        """
        import os, sys
        from pathlib import Path
        from streamslo.results import gaps as gapfiles

        def die(step):
            if step == "renamed":
                os._exit(9)

        gapfiles.compact(Path(sys.argv[1]), checkpoint=die)
        """
    )
    expected = len(_gap_keys(parts))
    r = subprocess.run(
        [sys.executable, "-c", script, str(Layout(parts).gaps_dir)], cwd=REPO, timeout=60
    )
    assert r.returncode == 9
    names = sorted(p.name for p in Layout(parts).gaps_dir.iterdir())
    assert len(names) == 4  # the merged file and its three parts, all on disk
    assert len(_gap_keys(parts)) == expected
    compact_gaps(parts)
    assert len(_gap_keys(parts)) == expected


def test_merging_again_with_new_parts(parts):
    compact_gaps(parts)
    w = ResultsWriter(parts, run_start=1.0, flush_interval=3600)
    w.add(record(99, gaps=7))
    w.flush(wait=True)
    assert len(_gap_keys(parts)) == 12 * 5 + 7
    merged = gapfiles.compact(Layout(parts).gaps_dir)
    assert merged is not None
    assert len(list(Layout(parts).gaps_dir.iterdir())) == 1
    assert len(_gap_keys(parts)) == 12 * 5 + 7
    assert gapfiles.compact(Layout(parts).gaps_dir) == merged  # nothing left to do


def test_a_single_gaps_file_is_read_and_left_alone(tmp_path):
    from streamslo.verify.testing import stream_row, write_run

    write_run(tmp_path, [stream_row("a")], gaps={"a": [20.0, 30.0]})
    compact_gaps(tmp_path)
    assert Layout(tmp_path).gaps_dir.is_file()
    assert list(load_run(tmp_path).gaps["gap_ms"]) == [20.0, 30.0]
