"""``[truth] require`` in an SLO file: what a run must be able to check, parsed with its line,
and a run that could not check it is named as failing it."""

from __future__ import annotations

import pytest

from streamslo.errors import SLOFileError
from streamslo.slo.thresholds import parse_slo, unmet_requirements
from streamslo.stream.truth import ForcedLength, Truth

TEXT = '[thresholds]\ntruncation_rate = ["rate<0.001"]\n\n[truth]\nrequire = ["silent_stop", "lost_chunk"]\n'


def test_the_table_is_read_with_its_line():
    slo = parse_slo(TEXT, "slo.toml")
    assert slo.require == ("silent_stop", "lost_chunk")
    assert slo.require_where == "slo.toml:5"


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (
            'require = ["silent_stops"]',
            "slo.toml:5: [truth] require: unknown check 'silent_stops' (did you mean 'silent_stop'?)",
        ),
        ("require = 3", "slo.toml:5: [truth] require must be a list of checks"),
        ('need = ["cut"]', "slo.toml:5: unknown [truth] key 'need'"),
    ],
)
def test_a_bad_table_names_its_line(table: str, message: str):
    text = '[thresholds]\ntruncation_rate = ["rate<0.001"]\n\n[truth]\n' + table + "\n"
    with pytest.raises(SLOFileError) as err:
        parse_slo(text, "slo.toml")
    assert str(err.value).startswith(message), str(err.value)


def test_a_run_that_could_not_see_what_is_required_is_named():
    slo = parse_slo(TEXT, "slo.toml")
    sees_all = Truth.of(forced=(ForcedLength.IGNORE_EOS,)).as_dict()
    assert unmet_requirements(slo, {"truth": sees_all}) == []
    blind = Truth.of(forced=(), coalesced=True, no_forcing="no forced length works here").as_dict()
    unmet = unmet_requirements(slo, {"truth": blind})
    assert unmet == [
        "slo.toml:5 requires that a run sees silent stop; this run could not: no forced length works here",
        "slo.toml:5 requires that a run sees lost chunk; this run could not: several tokens may share a chunk and the server gives no per-chunk count",
    ]
    (old,) = unmet_requirements(slo, {})
    assert "does not say what its run could check" in old
    assert unmet_requirements(parse_slo('[thresholds]\nitl_ms = ["p(99)<200"]\n'), {}) == []
