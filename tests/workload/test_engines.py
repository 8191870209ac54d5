"""A run adapts its requests to the engine ``/v1/models`` names (streamslo/workload/engines.py)."""

from __future__ import annotations

import pytest

from streamslo.stream.truth import ForcedLength
from streamslo.workload.engines import adapt_request
from streamslo.workload.requests import RequestOptions


@pytest.mark.parametrize(
    ("owner", "api", "fields"),
    [
        ("vllm", "openai-chat", {"return_token_ids": True}),
        ("vllm", "openai-completions", {"return_token_ids": True}),
        ("llamacpp", "openai-chat", {"timings_per_token": True}),
        ("llamacpp", "openai-completions", {"timings_per_token": True}),
        ("llamacpp", "openai-responses", {}),
        ("openai", "openai-chat", {}),
        (None, "openai-chat", {}),
    ],
)
def test_auto_asks_each_engine_for_its_own_count(owner, api, fields):
    adapted = adapt_request(RequestOptions(api=api), owner)
    assert adapted.request.extra == fields
    assert adapted.request.ignore_eos and not adapted.request.coalesced_chunks


def test_the_users_own_fields_win():
    req = RequestOptions(api="openai-chat", extra={"timings_per_token": False})
    assert adapt_request(req, "llamacpp").request.extra == {"timings_per_token": False}


def test_off_asks_nothing_and_on_asks_token_ids_of_any_server():
    assert adapt_request(RequestOptions(token_ids="off"), "vllm").request.extra == {}
    on = adapt_request(RequestOptions(token_ids="on"), None).request
    assert on.extra == {"return_token_ids": True}


def test_vllm_messages_is_judged_as_it_can_be_and_says_so():
    """vLLM 0.32's /v1/messages ignores ignore_eos and merges tokens without a count."""
    adapted = adapt_request(RequestOptions(api="anthropic-messages"), "vllm")
    assert not adapted.request.ignore_eos
    assert adapted.request.coalesced_chunks
    assert len(adapted.notes) == 2
    assert all("vLLM's /v1/messages" in n for n in adapted.notes)
    # what the user set already is left alone, and not announced
    mine = RequestOptions(api="anthropic-messages", forced=ForcedLength.NONE, coalesced_chunks=True)
    assert adapt_request(mine, "vllm").notes == ()


def test_llamacpp_messages_has_no_forced_length_and_counts_by_usage():
    """llama.cpp's /v1/messages ends at the model's end of sequence whatever ignore_eos says,
    and sends no delta for a token with no text, nor a count with its deltas."""
    adapted = adapt_request(RequestOptions(api="anthropic-messages"), "llamacpp")
    assert not adapted.request.ignore_eos and adapted.request.coalesced_chunks
    assert adapted.request.expectations().stop_token_counted
    forced, counted = adapted.notes
    assert forced.startswith("llama.cpp's /v1/messages ignores ignore_eos")
    assert "sends no token count" in counted
