"""Servers with the stream contracts of real engines, for the contract probes' tests: each
personality keeps the rules the real server keeps (measured on it: docs/servers.md), with a
model whose answers are known, so a test knows what every probe must find.

The model: the answer to a prompt is ``max_tokens`` tokens (``" w<i>"``, deterministic by the
prompt), but it ends by itself (the end-of-sequence token, id :data:`EOS`) after
:func:`natural_length` tokens unless the length is forced. Token ids: :data:`EOS` (2) is the
end of sequence, :data:`BOS` (1) the beginning of sequence (no text); a ``logit_bias`` of
+100 on either makes it the only token the model emits; -100 on :data:`EOS` keeps the answer
from ending. Every fourth token of an answer (index 3, 7, ...) has no text where the
personality says ``textless``.

Personalities (path prefix ``/p/<name>``):

- ``vllm``: takes ``ignore_eos`` and ``min_tokens``, ``logit_bias``; ``[DONE]``; usage; a
  token with no text sends ``"content": ""``. ``tiny_vllm``: the same with a model that never
  ends by itself (a tiny random model): only a bias on the end-of-sequence id shows a forced
  length's effect.
- ``tfserve`` (Hugging Face ``transformers serve``): answers 422 "Unexpected fields" to
  ``ignore_eos`` and ``min_tokens``; ``generation_config`` (a JSON string) with
  ``min_new_tokens``; ``logit_bias`` only with float values (an integer bias is an in-stream
  error); no ``[DONE]``; no chunk for a token without text (usage counts it); lists its model
  by a folder path (:attr:`ContractServer.model_dir`) that holds its generation config.
  ``tiny_tfserve``: the same with a model that never ends by itself.
- ``llamacpp_python`` (llama-cpp-python's server): accepts ``ignore_eos`` and ignores it,
  honours ``min_tokens`` and ``logit_bias``, no usage, ``"content": ""`` for a token without
  text.
- ``stubborn``: accepts every field and honours none (the answer always ends by itself);
  greedy replies repeat: reference replies stand in.
- ``chaotic``: as ``stubborn``, but a reply's text differs from one request to the next.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

__all__ = ["BOS", "EOS", "PERSONALITIES", "ContractServer", "contract_server", "natural_length"]

BOS = 1
EOS = 2
PERSONALITIES = (
    "vllm",
    "tiny_vllm",
    "tfserve",
    "tiny_tfserve",
    "llamacpp_python",
    "known_llamacpp_python",
    "stubborn",
    "chaotic",
)
#: Seconds between tokens (fast: the probes' tests are not about timing).
TOKEN_S = 0.001


def natural_length(prompt: str) -> int:
    """Tokens before the model ends by itself: 3 for a prompt that asks for one word (as the
    probes' does), else 40."""
    return 3 if "one word" in prompt else 40


@dataclass(frozen=True)
class _Rules:
    ignore_eos: str = "honour"  # honour | ignore | reject
    min_tokens: str = "honour"
    min_new_tokens: str = "ignore"
    logit_bias: str = "honour"  # honour | ignore | float_only
    done: bool = True
    usage: bool = True
    textless: str = "empty"  # empty: "content": "" | none: no chunk
    varies: bool = False
    owner: str = "x-vllm"
    natural: bool = True
    """The model ends by itself (False: a tiny random model that never does)."""


_RULES = {
    "vllm": _Rules(),
    "tiny_vllm": _Rules(natural=False),
    "tfserve": _Rules(
        ignore_eos="reject",
        min_tokens="reject",
        min_new_tokens="honour",
        logit_bias="float_only",
        done=False,
        textless="none",
        owner="local",
    ),
    "tiny_tfserve": _Rules(
        ignore_eos="reject",
        min_tokens="reject",
        min_new_tokens="honour",
        logit_bias="float_only",
        done=False,
        textless="none",
        owner="local",
        natural=False,
    ),
    "llamacpp_python": _Rules(ignore_eos="ignore", usage=False, owner="x-me"),
    # (owned_by "me", as llama-cpp-python says: what streamslo knows of it is used)
    "known_llamacpp_python": _Rules(ignore_eos="ignore", usage=False, owner="me"),
    "stubborn": _Rules(ignore_eos="ignore", min_tokens="ignore", logit_bias="ignore", owner="x"),
    "chaotic": _Rules(
        ignore_eos="ignore", min_tokens="ignore", logit_bias="ignore", varies=True, owner="x"
    ),
}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _json(self, status: int, obj: object) -> None:
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _route(self) -> tuple[str, str]:
        parts = self.path.split("/", 3)  # "", "p", name, rest
        if len(parts) < 4 or parts[1] != "p" or parts[2] not in _RULES:
            return "", self.path
        return parts[2], "/" + parts[3]

    def do_GET(self) -> None:
        name, path = self._route()
        if path == "/v1/models" and name:
            model = str(self.server.model_dir) if "tfserve" in name else f"{name}-model"
            self._json(
                200,
                {
                    "object": "list",
                    "data": [{"id": model, "object": "model", "owned_by": _RULES[name].owner}],
                },
            )
        else:
            self._json(404, {"error": {"message": "Not Found", "type": "not_found", "code": 404}})

    def do_POST(self) -> None:
        name, path = self._route()
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        if not name or path not in ("/v1/chat/completions", "/v1/completions"):
            self._json(404, {"error": {"message": "Not Found", "type": "not_found", "code": 404}})
            return
        try:
            body = json.loads(raw)
        except ValueError:
            self._json(400, {"error": {"message": "body is not JSON", "code": 400}})
            return
        rules = _RULES[name]
        rejected = [
            key
            for key, rule in (("ignore_eos", rules.ignore_eos), ("min_tokens", rules.min_tokens))
            if rule == "reject" and key in body
        ]
        if rules.min_new_tokens == "reject" and "generation_config" in body:
            rejected.append("generation_config")
        if rejected:
            self._json(422, {"detail": f"Unexpected fields in the request: {set(rejected)}"})
            return
        self._stream(rules, body, chat=path.endswith("chat/completions"))

    def _stream(self, rules: _Rules, body: dict[str, Any], chat: bool) -> None:
        n = int(body.get("max_tokens") or 16)
        prompt = json.dumps(body.get("messages") if chat else body.get("prompt"))
        bias = body.get("logit_bias") or {}
        error = None
        if rules.logit_bias == "float_only" and any(isinstance(v, int) for v in bias.values()):
            error = f"`sequence_bias` has to be a dict with floats as values, but is {bias}"
        honoured = rules.logit_bias != "ignore"
        push = {int(k) for k, v in bias.items() if honoured and float(v) >= 100}
        banned = {int(k) for k, v in bias.items() if honoured and float(v) <= -100}
        floor = 0  # tokens before the end-of-sequence may come
        if rules.ignore_eos == "honour" and body.get("ignore_eos") is True:
            floor = n
        if rules.min_tokens == "honour":
            floor = max(floor, int(body.get("min_tokens") or 0))
        config = body.get("generation_config")
        if rules.min_new_tokens == "honour" and isinstance(config, str):
            floor = max(floor, int(json.loads(config).get("min_new_tokens") or 0))
        if rules.varies:
            prompt += f"-{next(self.server.counter)}"
        seed = hashlib.sha256(prompt.encode()).hexdigest()[:6]
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        head = {"id": f"c-{seed}", "object": "chat.completion.chunk", "created": 1, "model": "m"}

        def event(obj: object) -> None:
            data = f"data: {json.dumps(obj) if not isinstance(obj, str) else obj}\n\n".encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        def choice(text: str | None, finish: str | None) -> dict[str, object]:
            c: dict[str, object] = {"index": 0, "finish_reason": finish}
            if chat:
                c["delta"] = {} if text is None else {"content": text}
            else:
                c["text"] = text or ""
            return c

        if error is not None:
            event({"error": {"message": error, "type": "internal", "code": 500}})
            self.wfile.write(b"0\r\n\r\n")
            return
        generated = 0
        reason = "length"
        for i in range(n):
            ends = rules.natural and i >= natural_length(prompt)
            eos_now = i >= floor and EOS not in banned and (EOS in push or ends)
            if eos_now:
                reason = "stop"
                break
            generated += 1
            textless = (BOS in push) or i % 4 == 3
            text = "" if textless else f" w{seed[:3]}{i}"
            if textless and rules.textless == "none":
                continue
            time.sleep(TOKEN_S)
            event({**head, "choices": [choice(text, None)]})
        event({**head, "choices": [choice(None, reason)]})
        options = body.get("stream_options") or {}
        if rules.usage and options.get("include_usage"):
            usage = {
                "prompt_tokens": 5,
                "completion_tokens": generated,
                "total_tokens": 5 + generated,
            }
            event({**head, "choices": [], "usage": usage})
        if rules.done:
            event("[DONE]")
        self.wfile.write(b"0\r\n\r\n")


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, model_dir: Path) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.model_dir = model_dir
        self.counter = itertools.count()


@dataclass
class ContractServer:
    """A running server: :meth:`url` gives each personality's base URL."""

    port: int
    model_dir: Path

    def url(self, personality: str) -> str:
        return f"http://127.0.0.1:{self.port}/p/{personality}"


@contextmanager
def contract_server(model_dir: Path) -> Iterator[ContractServer]:
    """Serve every personality on one free port, in a thread; ``model_dir`` gets the folder
    the ``tfserve`` personality lists as its model (its generation config names the ids)."""
    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / "generation_config.json").write_text(
        json.dumps({"bos_token_id": BOS, "eos_token_id": EOS})
    )
    server = _Server(model_dir)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield ContractServer(server.server_address[1], model_dir)
    finally:
        server.shutdown()
        server.server_close()
