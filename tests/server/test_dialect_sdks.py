"""The bundled server's /v1/responses and /v1/messages read by the dialects' own official
clients: the OpenAI and Anthropic Python SDKs (independent of streamslo) stream, accumulate and
type every event; and every raw event validates against the SDKs' event models (their required
fields, their discriminated unions). The app in this process (tests/server/inprocess.py), each
SDK given its client as its ``http_client``. Skipped where the SDKs are not installed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from tests.server.inprocess import app_client


# The SDKs are imported by the tests that use them, not at collection (about a second of
# imports in every worker of the suite).
@pytest.fixture(scope="module")
def openai() -> Any:
    return pytest.importorskip("openai")


@pytest.fixture(scope="module")
def anthropic() -> Any:
    return pytest.importorskip("anthropic")


@pytest.fixture(scope="module")
def pydantic() -> Any:
    return pytest.importorskip("pydantic")


N = 12
REASONING = 3
TOOL = 3


@pytest.fixture(scope="module")
def server() -> Iterator[TestClient]:
    with app_client(token_interval_ms=2, reasoning_tokens=REASONING, tool_call_tokens=TOOL) as tc:
        yield tc


def raw_events(
    tc: TestClient, path: str, body: dict[str, Any], headers: dict[str, str] | None = None
) -> list[Any]:
    out = []
    with tc.stream("POST", path, json=body, headers=headers) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data:"):
                out.append(json.loads(line[5:]))
    return out


def test_openai_sdk_streams_a_response(server: TestClient, openai: Any) -> None:
    client = openai.OpenAI(
        base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0, http_client=server
    )
    # The SDK's stream helper accumulates every event into its snapshot of the response (by
    # output_index and content_index: it raises on an event it cannot place). Its
    # get_final_response() takes response.completed only, so the forced length's
    # response.incomplete is read from the last event.
    with client.responses.stream(
        model="m", input="tell me a story", max_output_tokens=N, extra_body={"ignore_eos": True}
    ) as stream:
        events = list(stream)
    kinds = [event.type for event in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.incomplete"
    final = events[-1].response
    assert final.status == "incomplete" and final.incomplete_details is not None
    assert final.incomplete_details.reason == "max_output_tokens"
    assert final.usage is not None and final.usage.output_tokens == N
    assert final.usage.output_tokens_details.reasoning_tokens == REASONING
    assert [item.type for item in final.output] == ["reasoning", "message", "function_call"]
    call = final.output[-1]
    assert isinstance(json.loads(call.arguments), dict)
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert final.output_text == text  # the SDK's own reading of the output items


def test_every_responses_event_validates_against_the_sdk_models(
    server: TestClient, openai: Any, pydantic: Any
) -> None:
    from openai.types.responses import ResponseStreamEvent

    adapter = pydantic.TypeAdapter(ResponseStreamEvent)
    body = {
        "model": "m",
        "input": [{"role": "user", "content": "hi"}],
        "stream": True,
        "max_output_tokens": N,
        "ignore_eos": True,
    }
    events = raw_events(server, "/v1/responses", body)
    for event in events:
        adapter.validate_python(event)  # raises on a missing required field or a wrong type
    assert [e["sequence_number"] for e in events] == list(range(len(events)))


def test_anthropic_sdk_streams_a_message(server: TestClient, anthropic: Any) -> None:
    client = anthropic.Anthropic(
        base_url=str(server.base_url), api_key="unused", max_retries=0, http_client=server
    )
    with client.messages.stream(
        model="m",
        max_tokens=N,
        messages=[{"role": "user", "content": "tell me a story"}],
        extra_body={"ignore_eos": True},
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and "message_stop" in kinds
    assert final.stop_reason == "max_tokens" and final.usage.output_tokens == N
    assert [block.type for block in final.content] == ["thinking", "text", "tool_use"]
    thinking, text, tool = final.content
    assert thinking.signature  # the signature_delta, applied by the SDK
    assert text.text
    assert isinstance(tool.input, dict) and tool.input  # the partial_json pieces, parsed


def test_every_messages_event_validates_against_the_sdk_models(
    server: TestClient, anthropic: Any, pydantic: Any
) -> None:
    from anthropic.types import RawMessageStreamEvent

    adapter = pydantic.TypeAdapter(RawMessageStreamEvent)
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "max_tokens": N,
        "ignore_eos": True,
    }
    events = raw_events(server, "/v1/messages", body, headers={"anthropic-version": "2023-06-01"})
    kinds = [e["type"] for e in events]
    for event in events:
        if event["type"] != "ping":  # ping is not in the union (the SDK skips it)
            adapter.validate_python(event)
    assert kinds.count("message_stop") == 1


def test_the_anthropic_sdk_reads_an_error(server: TestClient, anthropic: Any) -> None:
    """A refused request: the SDK raises its typed error from Anthropic's error body."""
    client = anthropic.Anthropic(
        base_url=str(server.base_url), api_key="unused", max_retries=0, http_client=server
    )
    with pytest.raises(anthropic.BadRequestError) as info:
        client.messages.create(model="m", max_tokens=0, messages=[{"role": "user", "content": "x"}])
    assert info.value.status_code == 400
    assert info.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    assert info.value.request_id and info.value.request_id.startswith("req_")
