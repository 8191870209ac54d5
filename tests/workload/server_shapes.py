"""Recorded stream bodies in the documented shapes of vLLM, TGI, llama.cpp and Ollama.

Each :class:`Shape` is the body of one ``POST /v1/chat/completions`` (``stream: true``,
``max_tokens: 4``) as that server writes it: our own bytes, modelled field by field on the
servers' documented chunks (the OpenAI chunk object, vLLM's reasoning and tool-call deltas and
its usage chunk with empty ``choices``, TGI's ``data:`` without a space and a role on every
delta, llama.cpp's final chunk carrying ``usage`` and ``timings``, Ollama's ``fp_ollama``
chunks, which ignore ``ignore_eos``). ``options`` are the run options the shape needs
(``docs/servers.md``); ``outcome`` is what the tracker must decide under them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from streamslo.stream.truth import ForcedLength

__all__ = ["SHAPES", "Shape"]

MAX_TOKENS = 4


@dataclass(frozen=True)
class Shape:
    name: str
    body: bytes
    """The response body (the SSE events, as the server writes them)."""
    outcome: str
    options: dict[str, bool] = field(default_factory=dict)
    """RequestOptions switches: forced, done_marker, coalesced_chunks (default: ours)."""
    tokens: int | None = None
    """Content chunks the tracker must count."""
    usage: tuple[int, int] | None = None
    """(prompt_tokens, completion_tokens) the tracker must record."""


def _sse(events: list[Any], sep: str = "data: ", done: bool = True) -> bytes:
    out = "".join(
        f"{sep}{e if isinstance(e, str) else json.dumps(e, separators=(',', ':'))}\n\n"
        for e in events
    )
    if done:
        out += f"{sep}[DONE]\n\n"
    return out.encode()


def _oai(
    choices: list[dict[str, Any]], model: str, cid: str = "chatcmpl-7f3e", **extra: Any
) -> dict[str, Any]:
    return {
        "id": cid,
        "object": "chat.completion.chunk",
        "created": 1718000000,
        "model": model,
        "choices": choices,
        **extra,
    }


def _delta(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish, **extra}


USAGE_4 = {"prompt_tokens": 12, "total_tokens": 16, "completion_tokens": 4}
VLLM = "meta-llama/Llama-3.1-8B-Instruct"


def _vllm(
    deltas: list[dict[str, Any]], finish: str = "length", usage: dict[str, int] = USAGE_4
) -> bytes:
    events = [_oai([_delta({"role": "assistant", "content": ""})], VLLM)]
    events += [_oai([_delta(d)], VLLM) for d in deltas]
    events.append(_oai([_delta({"content": ""}, finish, stop_reason=None)], VLLM))
    events.append(_oai([], VLLM, usage=usage))  # stream_options.include_usage: empty choices
    return _sse(events)


_WORDS4 = [{"content": t} for t in ("Hello", ",", " world", "!")]


def _vllm_032(contents: list[str]) -> bytes:
    """vLLM 0.32 as measured: the role chunk, one chunk per token (``"content": ""`` for a token
    whose text the detokenizer holds back), the finish on the last token's chunk, usage apart."""
    events = [_oai([_delta({"role": "assistant", "content": ""})], VLLM)]
    events += [
        _oai([_delta({"content": c}, "length" if i == len(contents) - 1 else None)], VLLM)
        for i, c in enumerate(contents)
    ]
    events.append(
        _oai(
            [],
            VLLM,
            usage={
                "prompt_tokens": 12,
                "total_tokens": 12 + len(contents),
                "completion_tokens": len(contents),
            },
        )
    )
    return _sse(events)


# TGI's Messages API: no space after "data:", the role on every delta, the last token carries
# the finish_reason, "usage": null on token chunks, then a usage chunk.
_TGI = "tgi"


def _tgi(texts: list[str], finish: str) -> bytes:
    events = [
        _oai(
            [_delta({"role": "assistant", "content": t}, finish if i == len(texts) - 1 else None)],
            _TGI,
            cid="",
            system_fingerprint="3.0.1-sha-bb9095a",
            usage=None,
        )
        for i, t in enumerate(texts)
    ]
    events.append(
        _oai(
            [],
            _TGI,
            cid="",
            system_fingerprint="3.0.1-sha-bb9095a",
            usage={
                "prompt_tokens": 12,
                "completion_tokens": len(texts),
                "total_tokens": 12 + len(texts),
            },
        )
    )
    return _sse(events, sep="data:")


# llama.cpp's server: a first chunk with content null, chunks without logprobs, the finish on
# an empty delta that also carries usage and timings.
_LCPP_TIMINGS = {
    "prompt_n": 12,
    "prompt_ms": 14.2,
    "prompt_per_token_ms": 1.18,
    "prompt_per_second": 845.1,
    "predicted_n": 4,
    "predicted_ms": 61.7,
    "predicted_per_token_ms": 15.4,
    "predicted_per_second": 64.8,
}


def _llamacpp(deltas: list[dict[str, Any]], done: bool = True) -> bytes:
    def chunk(choice: dict[str, Any], **extra: Any) -> dict[str, Any]:
        return {
            "choices": [choice],
            "created": 1718000000,
            "id": "chatcmpl-Yq2",
            "model": "gpt-3.5-turbo",
            "system_fingerprint": "b5600-ab3d0cf",
            "object": "chat.completion.chunk",
            **extra,
        }

    events = [
        chunk({"finish_reason": None, "index": 0, "delta": {"role": "assistant", "content": None}})
    ]
    events += [chunk({"finish_reason": None, "index": 0, "delta": d}) for d in deltas]
    events.append(
        chunk(
            {"finish_reason": "length", "index": 0, "delta": {}},
            usage=USAGE_4,
            timings=_LCPP_TIMINGS,
        )
    )
    return _sse(events, done=done)


# Ollama's OpenAI compatibility layer: "fp_ollama", the role on every delta, no logprobs; it
# ignores ignore_eos (the answer ends at the model's end-of-sequence with "stop").
def _ollama(deltas: list[dict[str, Any]], finish: str, usage: bool = True) -> bytes:
    def chunk(delta: dict[str, Any], fr: str | None) -> dict[str, Any]:
        return {
            "id": "chatcmpl-86",
            "object": "chat.completion.chunk",
            "created": 1743277352,
            "model": "llama3.2",
            "system_fingerprint": "fp_ollama",
            "choices": [{"index": 0, "delta": {"role": "assistant", **delta}, "finish_reason": fr}],
        }

    events = [chunk(d, None) for d in deltas] + [chunk({"content": ""}, finish)]
    if usage:
        events.append(
            {
                "id": "chatcmpl-86",
                "object": "chat.completion.chunk",
                "created": 1743277352,
                "model": "llama3.2",
                "system_fingerprint": "fp_ollama",
                "choices": [],
                "usage": {
                    "prompt_tokens": 26,
                    "completion_tokens": len(deltas),
                    "total_tokens": 26 + len(deltas),
                },
            }
        )
    return _sse(events)


_TOOL = [
    {
        "tool_calls": [
            {
                "index": 0,
                "id": "chatcmpl-tool-9a1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": ""},
            }
        ]
    },
    {"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]},
    {"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"'}}]},
    {"tool_calls": [{"index": 0, "function": {"arguments": "}"}}]},
]
_NO_EOS = {"forced": ForcedLength.NONE}

SHAPES: tuple[Shape, ...] = (
    Shape("vllm", _vllm(_WORDS4), "ok", tokens=4, usage=(12, 4)),
    # Held-back tokens (byte pieces of "é", a special token): empty content, still tokens.
    Shape("vllm_held_back", _vllm_032(["Caf", "", "", "!"]), "ok", tokens=4, usage=(12, 4)),
    Shape(
        "vllm_held_back_last", _vllm_032(["Hello", " wor", "ld", ""]), "ok", tokens=4, usage=(12, 4)
    ),
    Shape(
        "vllm_reasoning",
        _vllm(
            [
                {"reasoning_content": "Think"},
                {"reasoning_content": "ing."},
                {"content": "Hi"},
                {"content": "!"},
            ]
        ),
        "ok",
        tokens=4,
        usage=(12, 4),
    ),
    Shape(
        "vllm_tool_calls", _vllm(_TOOL, finish="tool_calls"), "ok", _NO_EOS, tokens=4, usage=(12, 4)
    ),
    # Several tokens in one chunk (speculative decoding, --stream-interval): without the
    # switch the client sees fewer chunks than the server counted.
    Shape(
        "vllm_coalesced",
        _vllm([{"content": "Hello,"}, {"content": " world!"}]),
        "silent_truncation",
    ),
    Shape(
        "vllm_coalesced_declared",
        _vllm([{"content": "Hello,"}, {"content": " world!"}]),
        "ok",
        {"coalesced_chunks": True},
        tokens=4,
        usage=(12, 4),
    ),
    # vLLM's continuous_usage_stats: usage on every chunk, counting up.
    Shape(
        "vllm_continuous_usage",
        _sse(
            [
                _oai(
                    [_delta({"content": t})],
                    VLLM,
                    usage={"prompt_tokens": 12, "completion_tokens": i + 1, "total_tokens": 13 + i},
                )
                for i, t in enumerate(["a", "b", "c"])
            ]
            + [_oai([_delta({"content": "d"}, "length")], VLLM, usage=USAGE_4)]
        ),
        "ok",
        tokens=4,
        usage=(12, 4),
    ),
    Shape("tgi", _tgi(["Hello", ",", " world", "!"], "length"), "ok", tokens=4, usage=(12, 4)),
    # TGI does not know ignore_eos: the model's end-of-sequence stops it early.
    Shape("tgi_eos_under_ignore_eos", _tgi(["Hello", "!"], "stop"), "silent_truncation"),
    Shape("tgi_eos", _tgi(["Hello", "!"], "stop"), "ok", _NO_EOS, tokens=2, usage=(12, 2)),
    Shape("llamacpp", _llamacpp(_WORDS4), "ok", tokens=4, usage=(12, 4)),
    Shape(
        "llamacpp_reasoning",
        _llamacpp(
            [{"reasoning_content": "Hm"}, {"content": "A"}, {"content": "B"}, {"content": "C"}]
        ),
        "ok",
        tokens=4,
        usage=(12, 4),
    ),
    # A llama.cpp fork that ends the body without [DONE] (ik_llama.cpp before --send-done).
    Shape("llamacpp_no_done", _llamacpp(_WORDS4, done=False), "truncated"),
    Shape(
        "llamacpp_no_done_declared",
        _llamacpp(_WORDS4, done=False),
        "ok",
        {"done_marker": False},
        tokens=4,
        usage=(12, 4),
    ),
    Shape("ollama", _ollama(_WORDS4[:3], "stop"), "ok", _NO_EOS, tokens=3, usage=(26, 3)),
    Shape("ollama_under_ignore_eos", _ollama(_WORDS4[:3], "stop"), "silent_truncation"),
    Shape("ollama_length", _ollama(_WORDS4, "length", usage=False), "ok", tokens=4),
    Shape(
        "ollama_reasoning",
        _ollama([{"reasoning": "Let me see"}, {"content": "Yes"}], "stop"),
        "ok",
        _NO_EOS,
        tokens=2,
        usage=(26, 2),
    ),
    # Ollama sends a whole tool call in one chunk.
    Shape(
        "ollama_tool_call",
        _ollama(
            [
                {
                    "content": "",
                    "tool_calls": [
                        {
                            "id": "call_x1",
                            "index": 0,
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                        }
                    ],
                }
            ],
            "tool_calls",
        ),
        "ok",
        _NO_EOS,
        tokens=1,
        usage=(26, 1),
    ),
)
