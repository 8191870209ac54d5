"""One home for what the metrics mean: the vector masks agree with the stream core's scalar
rule, and every rate is numerator over denominator as the docs say."""

from __future__ import annotations

import pandas as pd
import pytest

from streamslo.figures import metrics
from streamslo.results.layout import RunData
from streamslo.stream.outcome import EXCLUDED_OUTCOMES, OUTCOMES, began

STATUSES = [None, 101, 200, 204, 299, 300, 404, 429, 500, 503]


def _frame(rows: list[tuple[int | None, str | None]]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "status": pd.array([s for s, _ in rows], dtype="Int64"),
            "outcome": pd.array([o for _, o in rows], dtype="string"),
        }
    )


def test_began_mask_is_the_scalar_rule_for_every_status_and_outcome() -> None:
    rows = [(s, o) for s in STATUSES for o in OUTCOMES]
    mask = metrics.began_mask(_frame(rows)).tolist()
    assert mask == [began(s, o) for s, o in rows]


def test_a_row_without_outcome_never_began_and_still_counts_as_a_failure() -> None:
    frame = _frame([(200, None), (200, "ok"), (200, "cancelled")])
    assert metrics.began_mask(frame).tolist() == [False, True, True]
    assert metrics.counted_mask(frame).tolist() == [True, True, False]
    assert metrics.failure_mask(frame, "error_rate").tolist() == [True, False, False]


@pytest.mark.parametrize(
    "rate",
    [
        r
        for r in metrics.RATE_METRICS
        if r not in ("goodput_fraction", "session_success_rate", "unchecked_stop_rate")
    ],
)
def test_every_rate_is_its_failures_over_its_population(rate: str) -> None:
    rows = [(s, o) for s in STATUSES for o in OUTCOMES]
    frame = _frame(rows)
    data = RunData(path=None, run={}, streams=frame, gaps=pd.DataFrame())  # type: ignore[arg-type]
    num, den = metrics.rate_value(data, rate)
    counted = [o not in EXCLUDED_OUTCOMES for _, o in rows]  # cancelled, client_cancelled
    if rate == "truncation_rate":
        population = [c and began(s, o) for (s, o), c in zip(rows, counted, strict=True)]
        failing = [p and o != "ok" for (_, o), p in zip(rows, population, strict=True)]
    elif rate == "error_rate":
        population = counted
        failing = [c and o != "ok" for (_, o), c in zip(rows, counted, strict=True)]
    else:
        population = counted
        failing = [
            c and o == rate[: -len("_rate")] for (_, o), c in zip(rows, counted, strict=True)
        ]
    assert (num, den) == (sum(failing), sum(population))


def test_registry_lists_each_metric_once_with_a_kind_and_unit() -> None:
    names = [
        *metrics.TREND_METRICS,
        *metrics.RATE_METRICS,
        *metrics.COUNTER_METRICS,
        *metrics.GAUGE_METRICS,
    ]
    assert len(names) == len(set(names)) == len(metrics.METRICS)
    for name, spec in metrics.METRICS.items():
        assert spec.name == name
        assert metrics.metric_kind(name) == spec.kind
        assert (
            spec.unit
            == {"trend": "ms", "rate": "ratio", "counter": "count", "gauge": "per_s"}[spec.kind]
        )
        assert spec.description
    assert metrics.metric_kind("nonsense") is None
    with pytest.raises(KeyError):
        metrics.failure_mask(_frame([(200, "ok")]), "itl_ms")


def test_every_metric_carries_its_compute_function() -> None:
    """The registry and the computation agree: every metric computes on a run with sessions,
    a trend to samples, a rate to (numerator, denominator), a counter to a number."""
    from streamslo.verify.testing import stream_row

    frame = pd.DataFrame(
        [
            stream_row("a", session_id="s", step_id="1", depth=1, session_steps=1, wait_ms=None),
            stream_row("b", outcome="truncated"),
        ]
    )
    data = RunData(
        path=None,
        run={"start_epoch": 1_700_000_000.0},
        streams=frame,
        gaps=pd.DataFrame(columns=["stream_id", "index", "gap_ms", "t", "open"]),
    )  # type: ignore[arg-type]
    assert set(metrics.COMPUTE) == set(metrics.METRICS)
    for name, compute in metrics.COMPUTE.items():
        value = compute(data)
        kind = metrics.metric_kind(name)
        if kind == "trend":
            assert hasattr(value, "shape"), name
        elif kind == "rate":
            assert isinstance(value, tuple) and len(value) == 2, name
        elif kind == "counter":
            assert isinstance(value, float), name
    assert metrics.COMPUTE["session_success_rate"](data) == (1, 1)
    assert metrics.COMPUTE["truncation_rate"](data) == (1, 2)
