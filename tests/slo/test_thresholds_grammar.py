"""The SLO file grammar: k6's expressions, selectors, tables, and errors naming file:line."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamslo.errors import SLOFileError
from streamslo.figures.metrics import COUNTER_METRICS, RATE_METRICS, TREND_METRICS
from streamslo.slo.thresholds import (
    DEFAULT_SLO,
    OPERATORS,
    load_slo,
    parse_expression,
    parse_metric_key,
    parse_slo,
    parse_thresholds_table,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("rate<0.001", ("rate", None, "<", 0.001)),
        ("p(99)<200", ("p", 99.0, "<", 200.0)),
        ("p(99.9) <= 500", ("p", 99.9, "<=", 500.0)),
        ("p(0)>=1", ("p", 0.0, ">=", 1.0)),
        ("p(100)>1e3", ("p", 100.0, ">", 1000.0)),
        ("avg==12.5", ("avg", None, "==", 12.5)),
        ("min != -3", ("min", None, "!=", -3.0)),
        ("max<1", ("max", None, "<", 1.0)),
        ("med<=.5", ("med", None, "<=", 0.5)),
        ("count>0", ("count", None, ">", 0.0)),
        ("  p( 95 )  <  2000  ", ("p", 95.0, "<", 2000.0)),
    ],
)
def test_parse_expression(text: str, expected: tuple[object, ...]) -> None:
    assert parse_expression(text) == expected


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("p99<200", "unknown aggregation 'p99' (did you mean p(99)?)"),
        ("mean<3", "unknown aggregation 'mean'"),
        ("avg(3)<3", "unknown aggregation"),
        ("p()<3", "bad percentile"),
        ("p(101)<3", "bad percentile '101'"),
        ("p(-1)<3", "bad percentile"),
        ("p<3", "needs a percentile"),
        ("p(99)=200", "bad operator '='"),
        ("p(99)=<200", "bad operator '=<'"),
        ("p(99)=>200", "bad operator '=>'"),
        ("p(99)<>200", "bad operator '<>'"),
        ("p(99) 200", "bad operator"),
        ("p(99)<", "bad value ''"),
        ("p(99)<2s", "bad value '2s'"),
        ("p(99)<inf", "bad value 'inf'"),
        ("", "bad threshold"),
    ],
)
def test_bad_expressions_say_what_was_expected(text: str, fragment: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_expression(text)
    assert fragment in str(info.value)


def test_operators_are_k6s() -> None:
    assert OPERATORS == ("<", "<=", ">", ">=", "==", "!=")


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("itl_ms", ("itl_ms", ())),
        ("itl_ms{protocol:ws}", ("itl_ms", (("protocol", "ws"),))),
        (
            "ttft_ms{user_class:SlowSSEUser, protocol : sse}",
            ("ttft_ms", (("user_class", "SlowSSEUser"), ("protocol", "sse"))),
        ),
        ("truncation_rate{status:200}", ("truncation_rate", (("status", "200"),))),
    ],
)
def test_parse_metric_key(key: str, expected: object) -> None:
    assert parse_metric_key(key) == expected


@pytest.mark.parametrize(
    ("key", "fragment"),
    [
        ("itl_ms{}", "empty selector"),
        ("itl_ms{protocol}", "expected key:value"),
        ("itl_ms{host:x}", "unknown selector key 'host'"),
        ("itl_ms{protocol:ws,protocol:sse}", "given twice"),
        ("itl ms", "bad metric key"),
    ],
)
def test_bad_metric_keys(key: str, fragment: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_metric_key(key)
    assert fragment in str(info.value)


SPEC_EXAMPLE = """\
[thresholds]
truncation_rate = ["rate<0.001"]
http_5xx_rate   = ["rate<0.001"]
itl_ms          = ["p(99)<200"]
ttft_ms         = ["p(95)<2000", { threshold = "p(99)<5000", abortOnFail = true }]
"itl_ms{protocol:ws}" = [
  "p(99.9)<=500",
  { threshold = "max<30000", abortOnFail = true, delayAbortEval = "1m30s" },
]
requests = ["count>0", "rate>=1"]
"""


def test_the_spec_example_parses_into_frozen_checks() -> None:
    slo = parse_slo(SPEC_EXAMPLE, "slo.toml")
    names = [th.name for th in slo.thresholds]
    assert names == [
        "truncation_rate rate<0.001",
        "http_5xx_rate rate<0.001",
        "itl_ms p(99)<200",
        "ttft_ms p(95)<2000",
        "ttft_ms p(99)<5000",
        "itl_ms{protocol:ws} p(99.9)<=500",
        "itl_ms{protocol:ws} max<30000",
        "requests count>0",
        "requests rate>=1",
    ]
    lines = [th.line for th in slo.thresholds]
    assert lines == [2, 3, 4, 5, 5, 7, 8, 10, 10]
    ws_max = slo.thresholds[6]
    assert ws_max.abort_on_fail and ws_max.delay_abort_eval_s == 90.0
    assert ws_max.selector == (("protocol", "ws"),)
    assert ws_max.where == "slo.toml:8"
    assert slo.thresholds[4].abort_on_fail and slo.thresholds[4].delay_abort_eval_s == 0.0
    assert not slo.thresholds[3].abort_on_fail
    with pytest.raises(AttributeError):
        slo.thresholds[0].value = 1.0  # type: ignore[misc]


def test_default_slo_is_the_incidents() -> None:
    parsed = parse_slo(
        '[thresholds]\ntruncation_rate = ["rate<0.001"]\nhttp_5xx_rate = ["rate<0.001"]\n'
        'connect_error_rate = ["rate<0.001"]\nitl_ms = ["p(99)<200"]\n'
    )

    def key(th: object) -> tuple[object, ...]:
        return tuple(
            getattr(th, f)
            for f in (
                "metric",
                "selector",
                "expression",
                "aggregation",
                "percentile",
                "op",
                "value",
                "abort_on_fail",
            )
        )

    assert [key(t) for t in DEFAULT_SLO.thresholds] == [key(t) for t in parsed.thresholds]
    assert DEFAULT_SLO.source == "<default>"


@pytest.mark.parametrize("metric", TREND_METRICS)
@pytest.mark.parametrize("agg", ["p(50)", "p(99.99)", "avg", "min", "max", "med", "count"])
def test_trend_aggregations(metric: str, agg: str) -> None:
    slo = parse_thresholds_table({metric: [f"{agg}<1"]})
    assert slo.thresholds[0].expression == f"{agg}<1"


@pytest.mark.parametrize("metric", RATE_METRICS)
def test_rate_metrics_take_rate(metric: str) -> None:
    assert parse_thresholds_table({metric: ["rate<0.5"]}).thresholds[0].aggregation == "rate"


@pytest.mark.parametrize("metric", COUNTER_METRICS)
@pytest.mark.parametrize("agg", ["count", "rate"])
def test_counter_aggregations(metric: str, agg: str) -> None:
    assert parse_thresholds_table({metric: [f"{agg}>0"]}).thresholds[0].aggregation == agg


@pytest.mark.parametrize(
    ("metric", "expr", "kind"),
    [
        ("itl_ms", "rate<1", "trend"),
        ("truncation_rate", "p(99)<1", "rate"),
        ("truncation_rate", "count<1", "rate"),
        ("requests", "avg<1", "counter"),
        ("tokens", "p(50)<1", "counter"),
    ],
)
def test_aggregation_must_fit_the_metric_kind(metric: str, expr: str, kind: str) -> None:
    with pytest.raises(SLOFileError, match=f"does not apply to the {kind} metric"):
        parse_thresholds_table({metric: [expr]})


def _error(tmp_path: Path, text: str) -> SLOFileError:
    path = tmp_path / "slo.toml"
    path.write_text(text)
    with pytest.raises(SLOFileError) as info:
        load_slo(path)
    assert info.value.path == str(path)
    return info.value


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        (
            '[thresholds]\nitl_ms = ["p(99)<200"\n',
            2,
            "not valid TOML: the array opened on this line is not closed: no ']' before the end",
        ),
        (
            '[thresholds]\nitl_ms = ["p(99)<200"]\nttft_ms = ["p(95)<2000"\nhttp_5xx_rate = []\n',
            3,
            "the array opened on this line is not closed: no ']' before line 4",
        ),
        ('[thresholds]\nitl_ms = "p(99)<200" x\n', 2, "not valid TOML"),
        (
            '# SLO\n\n[thresholds]\nitl_ms = ["p(99)<200"]\nitl = ["p(99)<200"]\n',
            5,
            "unknown metric 'itl' (did you mean 'itl_ms'?); known metrics: trends: ttft_ms",
        ),
        ('[thresholds]\nitl_ms = [\n  "p(99)<200",\n  "p(99)=<200",\n]\n', 4, "bad operator '=<'"),
        (
            '[thresholds]\nttft_ms = ["avg<1"]\n"itl_ms{proto:ws}" = ["p(99)<1"]\n',
            3,
            "unknown selector key 'proto'",
        ),
        ('[thresholds]\nitl_ms = ["q(1)<1"]\n', 2, "unknown aggregation 'q(1)'"),
        ('[thresholds]\nitl_ms = "p(99)<200"\n', 2, "expected a list of thresholds"),
        ("[thresholds]\nitl_ms = []\n", 2, "the list of thresholds is empty"),
        ("[thresholds]\nitl_ms = [200]\n", 2, "expected a threshold string"),
        (
            '[thresholds]\nitl_ms = [\n { threshold = "p(99)<1", abortOnFial = true },\n]\n',
            3,
            "unknown key 'abortOnFial'",
        ),
        ("[thresholds]\nitl_ms = [{ abortOnFail = true }]\n", 2, "needs threshold"),
        (
            '[thresholds]\nitl_ms = [{ threshold = "p(99)<1", abortOnFail = "yes" }]\n',
            2,
            "abortOnFail must be true or false",
        ),
        (
            '[thresholds]\nitl_ms = [{ threshold = "p(99)<1", delayAbortEval = "soon" }]\n',
            2,
            "not a duration",
        ),
        (
            '[thresholds]\nitl_ms = ["p(99)<1"]\n[options]\nx = 1\n',
            3,
            "unknown top-level key 'options'",
        ),
        ("[thresholds]\n", 1, "[thresholds] is empty"),
    ],
)
def test_bad_files_name_file_and_line(tmp_path: Path, text: str, line: int, fragment: str) -> None:
    err = _error(tmp_path, text)
    assert err.line == line
    assert str(err).startswith(f"{tmp_path / 'slo.toml'}:{line}: ")
    assert fragment in str(err)


def test_missing_thresholds_table(tmp_path: Path) -> None:
    err = _error(tmp_path, "# nothing here\n")
    assert "no [thresholds] table" in str(err)


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(SLOFileError, match="no such file"):
        load_slo(tmp_path / "missing.toml")
    with pytest.raises(SLOFileError, match="is a directory"):
        load_slo(tmp_path)
    bad = tmp_path / "latin1.toml"
    bad.write_bytes(b"[thresholds]\n# caf\xe9\n")
    with pytest.raises(SLOFileError, match="not UTF-8"):
        load_slo(bad)


def test_unknown_metric_lists_every_known_metric() -> None:
    with pytest.raises(SLOFileError) as info:
        parse_thresholds_table({"latency": ["p(99)<1"]}, source="inline")
    for name in (*TREND_METRICS, *RATE_METRICS, *COUNTER_METRICS):
        assert name in str(info.value)
    assert str(info.value).startswith("inline: unknown metric 'latency'")
