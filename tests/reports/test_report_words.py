"""Every claim of the report agrees with its model (issue 38): planted runs are reported, and
each number and verdict word of report.md is checked against report.json.

Two reports: a compare of two staged runs (the naive server fails the SLO from 2 users; the
fixed one meets it at every level while its TTFT p99 triples at the top, a latency knee that is
not the SLO), and a single run that is invalid, ran agentic sessions, failed in texts that
differ only in their numbers, and is too short for a drift verdict.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from streamslo.figures.drift import MIN_POINTS, MIN_SPAN_S
from streamslo.reports import build_report
from streamslo.reports.glossary import OUTCOME_MEANINGS
from streamslo.reports.knee import LATENCY_FACTOR, LATENCY_FLOOR_MS, RULES, TRUNCATION_RISE
from streamslo.runfiles.finalize import finalize
from streamslo.verify.testing import stream_row, write_run

T0 = 1_700_000_000.0
#: Three held levels: 1 user from 1 s, 2 from 7 s, 4 from 13 s (each after a 1 s ramp).
STAGES = "1s:1,5s:1,1s:2,5s:2,1s:4,5s:4"
LEVELS = ((1, 1.0), (2, 7.0), (4, 13.0))


@dataclass
class Planted:
    md: str
    model: dict[str, Any]
    summary: str


def _level_run(path: Path, mode: str, ttft: dict[int, float], gap: dict[int, float]) -> Path:
    """20 streams of 10 tokens a level, started while it held."""
    rows, gaps = [], {}
    for users, lo in LEVELS:
        for k in range(20):
            sid = f"{users}u{k}"
            g = [gap[users] + (k % 3)] * 9
            rows.append(
                stream_row(
                    sid,
                    started_at=T0 + lo - 1.0 + 0.2 * k,
                    ttft_ms=ttft[users] + k % 2,
                    e2e_ms=ttft[users] + sum(g),
                )
            )
            gaps[sid] = g
    meta = {"valid": True, "start_epoch": T0, "end_epoch": T0 + 20.0, "server_mode": mode}
    return write_run(path, rows, gaps, run=meta)


@pytest.fixture(scope="module")
def compared(tmp_path_factory: pytest.TempPathFactory) -> Planted:
    root = tmp_path_factory.mktemp("words")
    naive = _level_run(root / "naive", "naive", {1: 40, 2: 40, 4: 40}, {1: 20, 2: 600, 4: 600})
    fixed = _level_run(root / "fixed", "fixed", {1: 40, 2: 45, 4: 120}, {1: 20, 2: 20, 4: 21})
    res = build_report(naive, fixed, root / "out" / "report.html", resamples=50, stages=STAGES)
    return Planted(res.markdown.read_text(), json.loads(res.json.read_text()), res.summary)


def _session_rows() -> list[dict[str, object]]:
    rows = []
    for n in range(6):  # synthetic ids, as a run names them
        sid = f"4711-abc123-s{n + 1}"
        broken = n == 0
        for i, step in enumerate(("a", "b")):
            rows.append(
                stream_row(
                    f"{sid}-{step}",
                    session_id=sid,
                    step_id=step,
                    depth=i + 1,
                    session_steps=2,
                    started_at=T0 + 2.0 * n + i,
                    e2e_ms=300.0 + 100 * n,
                    wait_ms=200.0 if i else None,
                    parent_ids="a" if i else None,
                    outcome="truncated" if broken and i else "ok",
                    cause="cut" if broken and i else None,
                    error=f"reset after {n + 3} tokens" if broken and i else "",
                )
            )
    return rows


def _failure_rows() -> list[dict[str, object]]:
    rows = []
    for k, n in enumerate((61, 61, 61, 63, 62)):
        rows.append(
            stream_row(
                f"f{k}",
                started_at=T0 + 20 + k,
                outcome="silent_truncation",
                cause="positions_missing",
                tokens=n,
                expected_tokens=64,
                error=f"{n} token positions arrived of 64 the server counted",
            )
        )
    return rows


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> Planted:
    d = tmp_path_factory.mktemp("words") / "agents"
    reason = "generator process p1 greenlet lag p99 34.8 ms (limit 20 ms)"
    rows = (
        _session_rows()
        + _failure_rows()
        + [stream_row(f"ok{i}", started_at=T0 + i) for i in range(20)]
    )
    write_run(d, rows, run={"start_epoch": T0, "end_epoch": T0 + 40.0})
    server = d / "server"
    server.mkdir()
    (server / "resources.jsonl").write_text(
        "".join(
            json.dumps({"t": float(t), "rss_bytes": (200 + t) * 2**20, "open_files": 5 + t // 4})
            + "\n"
            for t in range(0, 40, 2)
        )
    )
    finalize(d, {"start_epoch": T0, "end_epoch": T0 + 40.0})
    run = json.loads((d / "run.json").read_text())
    run.update(valid=False, invalid_reason=reason)
    (d / "run.json").write_text(json.dumps(run))
    res = build_report(None, d, d.parent / "out" / "report.html", resamples=50)
    return Planted(res.markdown.read_text(), json.loads(res.json.read_text()), res.summary)


# ------------------------------------------------------------------ every number


def _numbers_in(obj: object) -> Iterator[float | str]:
    """Every number of the model: numeric values, and the digits inside its texts."""
    if isinstance(obj, bool) or obj is None:
        return
    if isinstance(obj, (int, float)):
        yield float(obj)
    elif isinstance(obj, str):
        yield from re.findall(r"\d+(?:\.\d+)?", obj)
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _numbers_in(v)
    elif isinstance(obj, list):
        yield len(obj)  # counts of things ("broke 1 of 4 thresholds")
        for v in obj:
            yield from _numbers_in(v)


def _forms(v: float | str) -> set[str]:
    """How a model number may be written: as it is, rounded to 0-4 places, as a percentage."""
    if isinstance(v, str):
        return {v, v.rstrip("0").rstrip(".") if "." in v else v}
    out = {f"{v:g}"}
    for x in (v, v * 100, abs(v), abs(v) * 100):
        out |= {f"{x:,.{d}f}" for d in range(5)} | {f"{x:.{d}f}" for d in range(5)}
    return out


#: What a report may say that is a rule's constant, not a run's figure.
RULE_TEXTS = [
    *RULES.values(),
    *OUTCOME_MEANINGS.values(),
    f"{LATENCY_FACTOR:g} {LATENCY_FLOOR_MS:g} {TRUNCATION_RISE * 100:g} {MIN_SPAN_S:g} {MIN_POINTS}",
    "95 % 99 % p50 p90 p95 p99 4xx 5xx 2xx 101 1xx 1011 1008 1013 1009 1000 [DONE]",
]


def _unexplained_numbers(md: str, model: dict[str, Any]) -> list[str]:
    allowed = {f for v in _numbers_in(model) for f in _forms(v)}
    allowed |= {
        f for text in RULE_TEXTS for v in re.findall(r"\d+(?:\.\d+)?", text) for f in _forms(v)
    }
    allowed |= {str(i) for i in range(11)}  # small counts and ordinals
    return [
        tok
        for tok in re.findall(r"\d[\d,]*(?:\.\d+)?", md)
        if tok.rstrip(",") not in allowed and tok.rstrip(",").rstrip("0").rstrip(".") not in allowed
    ]


@pytest.mark.parametrize("which", ["compared", "single"])
def test_every_number_in_the_markdown_is_the_models(which: str, request) -> None:  # type: ignore[no-untyped-def]
    planted: Planted = request.getfixturevalue(which)
    assert _unexplained_numbers(planted.md, planted.model) == []


# ------------------------------------------------------------- verdict words


def _table(md: str, heading: str) -> list[list[str]]:
    """The Markdown table under ``heading``: its rows as cells, header first."""
    part = md[md.index(heading) :].split("\n\n", 2)[1]
    return [
        [c.strip() for c in line.strip("|").split("|")]
        for line in part.splitlines()
        if not line.startswith("| ---")
    ]


def test_the_verdicts_and_the_headline_say_what_the_model_says(compared: Planted) -> None:
    model, md = compared.model, compared.md
    rows = _table(md, "### SLO verdicts")[1:]
    assert [(r[0], r[1], r[-1]) for r in rows] == [
        (v["metric"], v["expression"], v["verdict"]) for v in model["verdicts"]
    ]
    itl = next(v for v in model["verdicts"] if v["metric"] == "itl_ms")
    itl_row = next(r for r in rows if r[0] == "itl_ms")
    assert itl_row[2] == f"{itl['before']:,.1f} ms" and itl_row[3] == f"{itl['after']:,.1f} ms"
    assert itl["verdict"] == "fixed"
    fixed = sum(v["verdict"] == "fixed" for v in model["verdicts"])
    head = f"**PASS: the after run met all {len(model['verdicts'])} SLO thresholds ({fixed} fixed since the before run).**"
    assert model["passed"] is True and head in md
    assert head.strip("*") in compared.summary


def test_judged_changes_are_the_models(compared: Planted) -> None:
    words = [r[-1] for r in _table(compared.md, "### Latency (ms)")[1:] if r[1].startswith("p")]
    want = [
        d["change"]
        for lc in compared.model["latency"]
        if lc["after"]["count"]
        for d in lc["differences"]
    ]
    assert words == want and set(words) <= {"better", "worse", "within noise"}


def test_the_levels_say_where_the_slo_held_and_name_the_knee_by_its_rule(compared: Planted) -> None:
    """The fixed run met the SLO at every level; its TTFT p99 tripled at 4 users: a latency
    knee, named by its rule, and no level is called held."""
    part = compared.md[compared.md.index("### Load levels") :].split("\n\n")[1]
    lines = {ln.split(":", 1)[0].lstrip("- "): ln for ln in part.splitlines()}
    assert "held" not in part and "holds" not in part
    for series in compared.model["levels"]:
        line = lines[series["name"]]
        levels = {lv["label"]: lv for lv in series["levels"]}
        met = [int(lab.split()[0]) for lab, lv in levels.items() if lv["passed"]]
        failed = [int(lab.split()[0]) for lab, lv in levels.items() if lv["passed"] is False]
        m = re.match(r"- \w+: the SLO was (.*?); (no knee|knee) (.*)\.$", line)
        assert m, line
        slo = m.group(1)
        if not failed:
            assert slo.startswith("met at every level (")
        said_met = re.search(r"met at (?:every level \()?([\d, and]+) users?", slo)
        clause = slo.split("failed at", 1)[-1] if failed else ""
        for lv in series["levels"]:  # the thresholds each failing level names
            clause = clause.replace(f"({', '.join(lv['failed'])})", "")
        said_failed = re.findall(r"\d+", clause)
        assert (
            sorted(int(x) for x in re.findall(r"\d+", said_met.group(1))) == met
            if said_met
            else not met
        )
        assert sorted(int(x) for x in said_failed) == failed
        knee = series["knee"]
        assert f"by the rule '{RULES[knee['rule']]}'" in line and f"after {knee['label']}" in line
    fixed = next(s for s in compared.model["levels"] if s["name"] == "fixed")
    assert fixed["knee"]["rule"] == "ttft_p99" and all(lv["passed"] for lv in fixed["levels"])
    top = fixed["levels"][-1]["ttft_ms"]["p99"]
    base = fixed["levels"][0]["ttft_ms"]["p99"]
    assert f"TTFT p99 {top:.0f} ms, over 2x the lowest level's {base:.0f} ms" in lines["fixed"]
    naive = next(s for s in compared.model["levels"] if s["name"] == "naive")
    assert naive["knee"]["rule"] == "slo" and naive["knee"]["label"] == "1 user"


def test_an_invalid_run_is_said_first(single: Planted) -> None:
    (run,) = single.model["runs"]
    assert run["valid"] is False
    first = single.md.split("\n\n")[1].splitlines()[0]
    assert first == (
        f"> :warning: **The run (agents) is INVALID: {run['invalid_reason']}. Its latencies "
        "measure the load generator, not the server.**"
    )
    assert single.summary.startswith("!! The run (agents) is INVALID: ")


def test_the_sessions_summary_is_the_models(single: Planted) -> None:
    (ss,) = single.model["session_summary"]
    (row,) = _table(single.md, "### Agentic sessions")[1:]
    assert row[1:5] == [
        str(ss["sessions"]),
        str(ss["whole"]),
        f"{ss['success_rate'] * 100:.2f} %",
        f"{ss['e2e_p50_ms']:,.1f}",
    ]
    assert (ss["sessions"], ss["whole"]) == (6, 5)
    assert single.md.index("### Agentic sessions") < single.md.index("### Failure rates")


def test_the_failures_are_the_models_groups(single: Planted) -> None:
    rows = _table(single.md, "### Failures")[1:]
    shown = [(r[1], r[2], int(r[3]), r[4]) for r in rows]
    want = []
    for g in single.model["failures"]:
        for e in g["errors"]:
            k = e["texts"] - 1
            similar = f" (and {k} similar text{'s' if k > 1 else ''})" if k else ""
            want.append((g["outcome"], e["cause"], e["count"], e["error"] + similar))
    assert shown == want
    assert (
        "silent_truncation",
        "positions_missing",
        5,
        "61 token positions arrived of 64 the server counted (and 2 similar texts)",
    ) in shown


def test_drift_is_not_judged_on_a_40_s_run_and_says_what_it_needs(single: Planted) -> None:
    (soak,) = single.model["soak"]
    assert {d["verdict"] for d in soak["drift"].values()} == {"too short"}
    note = next(ln for ln in single.md.splitlines() if ln.startswith("_Drift not judged for"))
    for name, d in soak["drift"].items():
        assert f"{name} ({d['span_s']:,.0f} s, {d['points']} points)" in note
    assert note.endswith(f"a verdict needs at least {MIN_SPAN_S:.0f} s and {MIN_POINTS} points._")
    assert "Drift and leaks" not in single.md
    assert re.search(r"\bflat\b", single.md) is None
