"""The OpenAPI 3.1 description of the HTTP routes (``GET /openapi.json``), from the server's limits.

It is the contract the fuzz tests generate requests from (schemathesis), so it says what the
server accepts, not more: the request fields and their ranges as :func:`parse_request` checks
them, and every status a route may answer with the error body. The WebSocket route ``/v1/ws``
speaks the same JSON per frame (OpenAPI has no words for it).
"""

from __future__ import annotations

from typing import Any

from streamslo import __version__
from streamslo.server.config import MAX_PROMPT_CHARS, ServerConfig

__all__ = ["build_schema"]

_ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type", "param", "code"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": ["string", "null"]},
                "code": {"type": "integer"},
            },
        }
    },
}


def _errors(*codes: int) -> dict[str, Any]:
    return {
        str(c): {
            "description": "refused; the error body says why",
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
        }
        for c in codes
    }


def _common(cfg: ServerConfig) -> dict[str, Any]:
    """Fields both request kinds share."""
    return {
        "model": {"type": ["string", "null"], "minLength": 1},
        "max_tokens": {"type": ["integer", "null"], "minimum": 1, "maximum": cfg.max_tokens_limit},
        "temperature": {"type": ["number", "null"], "minimum": 0, "maximum": 2},
        "seed": {"type": ["integer", "null"]},
        "ignore_eos": {"type": ["boolean", "null"]},
        "stream": {"type": ["boolean", "null"]},
        "n": {"type": ["integer", "null"], "enum": [1, None]},
        "stream_options": {
            "type": ["object", "null"],
            "properties": {"include_usage": {"type": "boolean"}},
        },
    }


def _generate_op(summary: str, body_ref: str, default_stream: bool) -> dict[str, Any]:
    streaming = "streams" if default_stream else "answers one JSON object"
    return {
        "post": {
            "summary": summary,
            "description": f"Without 'stream' it {streaming}.",
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": {"$ref": body_ref}}},
            },
            "responses": {
                "200": {
                    "description": "an event stream (stream: true) or the whole completion",
                    "content": {
                        "text/event-stream": {"schema": {"type": "string"}},
                        "application/json": {"schema": {"type": "object"}},
                    },
                },
                **_errors(400, 401, 408, 413, 415, 429, 503),
            },
        }
    }


def _get_op(summary: str, *codes: int) -> dict[str, Any]:
    return {
        "get": {
            "summary": summary,
            "responses": {
                "200": {
                    "description": "OK",
                    "content": {"application/json": {"schema": {"type": "object"}}},
                },
                **_errors(*codes),
            },
        }
    }


def build_schema(cfg: ServerConfig) -> dict[str, object]:
    """The OpenAPI document for a server running ``cfg``."""
    prompt = {"type": "string", "maxLength": MAX_PROMPT_CHARS}
    content_part = {
        "type": "object",
        "properties": {"type": {"type": "string"}, "text": {"type": "string"}},
    }
    message = {
        "type": "object",
        "required": ["role"],
        "properties": {
            "role": {"type": "string"},
            "content": {
                "anyOf": [prompt, {"type": "array", "items": content_part}, {"type": "null"}]
            },
        },
    }
    chat = {
        "type": "object",
        "required": ["messages"],
        "properties": {
            "messages": {"type": "array", "minItems": 1, "maxItems": 64, "items": message},
            "max_completion_tokens": {
                "type": ["integer", "null"],
                "minimum": 1,
                "maximum": cfg.max_tokens_limit,
            },
            **_common(cfg),
        },
    }
    completion = {
        "type": "object",
        "required": ["prompt"],
        "properties": {
            "prompt": {
                "anyOf": [prompt, {"type": "array", "items": prompt, "minItems": 1, "maxItems": 1}]
            },
            **_common(cfg),
        },
    }
    text = {"200": {"description": "OK", "content": {"text/plain": {"schema": {"type": "string"}}}}}
    return {
        "openapi": "3.1.0",
        "info": {"title": "streamslo bundled target server", "version": __version__},
        "paths": {
            "/v1/chat/completions": _generate_op(
                "chat completion", "#/components/schemas/Chat", False
            ),
            "/v1/completions": _generate_op(
                "text completion", "#/components/schemas/Completion", False
            ),
            "/v1/stream": _generate_op(
                "the first incident's endpoint (completion chunks)",
                "#/components/schemas/Completion",
                True,
            ),
            "/v1/models": _get_op("the one model", 401),
            "/healthz": _get_op("liveness, mode, faults, pid"),
            "/readyz": _get_op("200 when accepting streams", 503),
            "/metrics": {"get": {"summary": "Prometheus text", "responses": text}},
            "/debug/stalls": _get_op("event-loop stalls (loopback or key)", 401, 403),
            "/debug/workers": _get_op("worker restarts (loopback or key)", 401, 403),
            "/openapi.json": _get_op("this document"),
        },
        "components": {
            "schemas": {"Error": _ERROR, "Chat": chat, "Completion": completion},
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
