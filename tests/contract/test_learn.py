"""The contract probes (streamslo.contract.learn) against servers whose contract is known: each
means of forcing the length is found refused, ignored, proven, known or unproven as the server
makes it; the shape (terminal marker, usage, merged tokens) and the truth follow; a run's flags
override what is learned."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from streamslo.contract import Contract, learn
from streamslo.contract.probe import models_and_owner
from streamslo.stream.truth import ForcedLength
from streamslo.transport.common import Target
from streamslo.workload.requests import RequestOptions
from tests.contract.server import EOS, ContractServer, contract_server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ContractServer]:
    with contract_server(tmp_path_factory.mktemp("model")) as s:
        yield s


def probe(server: ContractServer, personality: str, **kw: object) -> Contract:
    target = Target.from_url(server.url(personality))
    _, ids, owner = models_and_owner(target)
    return learn(target, RequestOptions(model=ids[0]), owner=owner, **kw)  # type: ignore[arg-type]


def statuses(c: Contract) -> dict[str, str]:
    return {str(m.means): str(m.status) for m in c.means}


def flags(c: Contract) -> list[str]:
    return [a.flag for a in c.adaptations]


def test_a_server_that_honours_ignore_eos_needs_nothing(server: ContractServer) -> None:
    c = probe(server, "vllm")
    assert c.forced == (ForcedLength.IGNORE_EOS,) and c.natural_stop
    assert statuses(c)["ignore_eos"] == "proven"
    assert flags(c) == [] and c.done_marker and c.usage
    assert c.truth is not None and c.truth.missing == []
    assert c.probes <= 4  # the first means that works ends the search


def test_transformers_serve_is_learned_in_one_pass(server: ContractServer) -> None:
    """422 to ignore_eos and min_tokens, min_new_tokens honoured (the model stops by itself
    without it), no [DONE], no chunk for a token without text: three adaptations, each with
    the flag that spells it."""
    c = probe(server, "tfserve", all_means=True)
    assert c.forced == (ForcedLength.MIN_NEW_TOKENS,)
    assert statuses(c) == {
        "ignore_eos": "rejected",
        "min_tokens": "rejected",
        "min_new_tokens": "proven",
        "logit_bias": "proven",
    }
    assert "Unexpected fields in the request" in c.means_of(ForcedLength.IGNORE_EOS).detail  # type: ignore[union-attr]
    assert flags(c) == ["--no-done-marker", "--forced-length min_new_tokens", "--coalesced-chunks"]
    assert c.eos_ids == (EOS,) and str(server.model_dir) in c.eos_source
    assert c.truth is not None
    assert c.truth.cut == "the stop reason at the body's end"
    assert c.truth.silent_stop == "a forced length (min_new_tokens)"
    assert c.truth.missing == ["lost_chunk"]


def test_a_model_that_never_stops_proves_the_means_by_a_bias_on_its_end_of_sequence(
    server: ContractServer,
) -> None:
    """A tiny random model never ends by itself: a +100 bias on the end-of-sequence id (from
    the model folder /v1/models names) ends it at once, and a means that runs to the length
    against that bias is proven."""
    c = probe(server, "tiny_tfserve")
    assert not c.natural_stop
    assert statuses(c)["min_new_tokens"] == "proven"
    assert "+100 alone ends the answer at once" in c.means_of(ForcedLength.MIN_NEW_TOKENS).detail  # type: ignore[union-attr]


def test_without_the_end_of_sequence_id_the_effect_is_unproven_and_said(
    server: ContractServer,
) -> None:
    c = probe(server, "tiny_vllm")
    assert c.forced == (ForcedLength.IGNORE_EOS,)
    assert statuses(c)["ignore_eos"] == "unproven"
    assert "--eos-token-id" in c.means_of(ForcedLength.IGNORE_EOS).detail  # type: ignore[union-attr]
    given = probe(server, "tiny_vllm", eos_ids=(EOS,))
    assert statuses(given)["ignore_eos"] == "proven"
    assert given.eos_source == "--eos-token-id"


def test_an_ignored_ignore_eos_is_seen_and_the_next_means_used(server: ContractServer) -> None:
    """llama-cpp-python takes ignore_eos and ignores it: the answer stops on its own three
    times out of three; min_tokens is honoured. No usage: the forced length counts the chunks."""
    c = probe(server, "llamacpp_python")
    assert c.forced == (ForcedLength.MIN_TOKENS,)
    assert statuses(c)["ignore_eos"] == "ignored"
    assert "3 of 3 times" in c.means_of(ForcedLength.IGNORE_EOS).detail  # type: ignore[union-attr]
    assert flags(c) == ["--forced-length min_tokens"]
    assert c.usage is False and "the server sends no usage" in c.notes
    assert c.truth is not None
    assert c.truth.lost_chunk == "one token per chunk, against the forced length"


def test_what_is_known_of_an_engine_spares_the_probes(server: ContractServer) -> None:
    """llama-cpp-python says owned_by "me": that it ignores ignore_eos is known, not probed."""
    c = probe(server, "known_llamacpp_python")
    assert statuses(c)["ignore_eos"] == "known_ignored"
    assert c.forced == (ForcedLength.MIN_TOKENS,)


def test_no_means_and_repeatable_replies_mean_reference_replies(server: ContractServer) -> None:
    c = probe(server, "stubborn")
    assert c.forced == () and c.deterministic is True and c.reference
    assert flags(c) == ["--forced-length none", "--reference on"]
    assert c.truth is not None and c.truth.silent_stop is not None
    assert c.truth.silent_stop.startswith("reference replies")


def test_no_means_and_replies_that_differ_leave_silent_stops_unseen(
    server: ContractServer,
) -> None:
    c = probe(server, "chaotic")
    assert c.forced == () and c.deterministic is False and not c.reference
    assert flags(c) == ["--forced-length none"]
    assert c.truth is not None and "silent_stop" in c.truth.missing
    assert "greedy replies differ" in c.truth.why_not["silent_stop"]


def test_a_means_the_user_set_is_the_only_one_tried(server: ContractServer) -> None:
    c = probe(server, "vllm", wanted=(ForcedLength.MIN_TOKENS,))
    assert c.forced == (ForcedLength.MIN_TOKENS,)
    assert list(statuses(c)) == ["min_tokens"]
    assert flags(c) == []  # the user's choice is no adaptation
    none = probe(server, "vllm", wanted=(), reference="off")
    assert none.forced == () and none.means == ()
    assert none.truth is not None and "silent_stop" in none.truth.missing


def test_no_ignore_eos_leaves_it_out(server: ContractServer) -> None:
    c = probe(server, "vllm", ignore_eos_allowed=False)
    assert statuses(c)["ignore_eos"] == "not_tried"
    assert c.forced == (ForcedLength.MIN_TOKENS,)
    assert flags(c) == ["--forced-length min_tokens"]


def test_a_wrong_target_is_a_failure_with_its_record(server: ContractServer) -> None:
    target = Target.from_url(server.url("vllm"))
    c = learn(target, RequestOptions(model="m", path_override="/v1/nowhere"))
    assert not c.learned and "HTTP 404" in c.failure
    assert c.extra["record"].status == 404
