"""Adding finished results directories to the store: what is kept, the series a run belongs
to, a directory added twice, and what is refused (named)."""

from __future__ import annotations

import json
import sqlite3

import numpy as np
import pytest

from streamslo.errors import BadInputError, ResultsError
from streamslo.history.record import read_run, record_run, series_of
from streamslo.history.store import (
    DEFAULT_STORE,
    SCHEMA_VERSION,
    STORE_ENV,
    open_store,
    store_path,
)
from streamslo.results.layout import Layout, read_json, write_json
from streamslo.slo.regression import HISTORY_METRICS
from tests.history.nights import Night, write_night

T0 = 1_800_000_000.0


@pytest.fixture(scope="module")
def night(tmp_path_factory):
    return write_night(tmp_path_factory.mktemp("n") / "run", Night(seed=3, start=T0, streams=60))


def test_a_run_is_kept_with_its_figures_windows_and_what_was_asked(night, tmp_path):
    added = record_run(tmp_path / "h.sqlite", night)
    assert added.new and added.run.passed is True and added.run.valid
    with open_store(tmp_path / "h.sqlite") as store:
        (run,) = store.runs("nightly", "http://llm.internal:8000")
        windows = store.windows(run.id)
    summary = read_json(Layout(night).summary_json)
    # The figure is summary.json's own, to the last digit; the resamples surround it.
    m = run.figures["itl_ms.p99"]
    assert m.value == summary["itl_ms"]["p99"] and m.resamples.size == 400
    assert np.percentile(m.resamples, 2.5) < m.value < np.percentile(m.resamples, 97.5)
    assert run.figures["truncation_rate"].value == summary["truncation_rate"] == 0.0
    assert run.figures["tokens_per_s"].value == pytest.approx(summary["tokens_per_s"])
    assert set(run.figures) == set(HISTORY_METRICS)
    assert sum(w["requests"] for w in windows) == summary["requests"] == 60
    assert run.options["max_tokens"] == 40 and run.summary["requests"] == 60
    assert run.slo and all(c["passed"] for c in run.slo)
    assert run.tool_version == "0.1.0" and run.locust_version == "2.47.0"
    assert run.start == "2027-01-15T08:00:00.000Z" and run.path == str(night.resolve())


def test_adding_a_run_again_adds_nothing(night, tmp_path):
    assert record_run(tmp_path / "h.sqlite", night).new
    again = record_run(tmp_path / "h.sqlite", night)
    assert not again.new
    with open_store(tmp_path / "h.sqlite") as store:
        assert [s.runs for s in store.series()] == [1]


def test_a_series_can_be_named(night, tmp_path):
    record_run(tmp_path / "h.sqlite", night, scenario="soak", target="staging")
    with open_store(tmp_path / "h.sqlite") as store:
        assert [(s.scenario, s.target) for s in store.series()] == [("soak", "staging")]


def test_the_bundled_server_is_one_target_whatever_its_port():
    a = series_of(
        {"scenario": "/x/nightly.toml", "target": "http://127.0.0.1:41234", "server_mode": "fixed"}
    )
    b = series_of(
        {"scenario": "nightly.toml", "target": "http://127.0.0.1:39999", "server_mode": "fixed"}
    )
    assert a == b == ("nightly", "bundled:fixed")
    assert series_of({"target": "http://vllm:8000/"}) == ("-", "http://vllm:8000")


def test_a_run_not_finalized_is_refused_by_name(night, tmp_path):
    import shutil

    d = tmp_path / "killed"
    shutil.copytree(night, d)
    run = read_json(Layout(d).run_json)
    write_json(Layout(d).run_json, {**run, "complete": False})
    with pytest.raises(ResultsError, match=r"not finalized.*streamslo finalize"):
        read_run(d)
    with pytest.raises(ResultsError, match="not a results directory"):
        read_run(tmp_path / "nothing")


def test_a_file_that_is_not_a_store_is_refused(tmp_path):
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"not sqlite at all, just bytes" * 100)
    with pytest.raises(BadInputError, match=r"junk\.sqlite: not a history store"), open_store(junk):
        pass
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as c:
        c.execute("CREATE TABLE t(x)")
    c.close()
    with pytest.raises(BadInputError, match="not a streamslo history store"), open_store(other):
        pass
    with pytest.raises(BadInputError, match="no history store here"), open_store(tmp_path / "none"):
        pass


def test_a_store_from_a_newer_streamslo_is_refused(tmp_path):
    path = tmp_path / "h.sqlite"
    with open_store(path, create=True):
        pass
    with sqlite3.connect(path) as c:
        c.execute(
            "UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),)
        )
    c.close()
    with pytest.raises(BadInputError, match="newer streamslo"), open_store(path):
        pass


def test_the_store_path_comes_from_the_flag_the_environment_or_the_default(monkeypatch, tmp_path):
    monkeypatch.delenv(STORE_ENV, raising=False)
    assert store_path(None) == DEFAULT_STORE
    monkeypatch.setenv(STORE_ENV, str(tmp_path / "env.sqlite"))
    assert store_path(None) == tmp_path / "env.sqlite"
    assert store_path(tmp_path / "flag.sqlite") == tmp_path / "flag.sqlite"


def test_history_add_refuses_every_directory_before_adding_any(night, tmp_path, capsys):
    from streamslo.cli import main

    store = tmp_path / "h.sqlite"
    assert (
        main(["history", "add", str(night), str(tmp_path / "missing"), "--store", str(store)]) == 2
    )
    assert "missing: not a results directory" in capsys.readouterr().err
    assert not store.exists()
    assert main(["history", "add", str(night), "--store", str(store)]) == 0
    out = capsys.readouterr().out
    assert "added" in out and "series nightly against http://llm.internal:8000, 1 runs" in out
    assert main(["history", "--store", str(store), "--out", str(tmp_path / "o.html")]) == 0
    assert json.loads((tmp_path / "o.json").read_text())["verdict"] == "no baseline"
