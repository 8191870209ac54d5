"""The model's special token ids: the end-of-sequence ids a ``logit_bias`` needs to keep an answer
from ending (docs/servers.md, "Forcing the length"), and the beginning-of-sequence id, a token
with no text (the probe that shows whether such a token sends a chunk pushes it).

Looked for in this order, nothing downloaded: ``--eos-token-id``; the ``--tokenizer`` folder
(``generation_config.json``, ``config.json``, ``tokenizer_config.json``); the folder the
model id names when it is a path on this machine (``transformers serve`` lists its model by
path), or that id's snapshot in the local Hugging Face cache; then the server's own
tokenizer: llama.cpp's ``/props`` names its end-of-sequence token and ``/tokenize`` turns it
into an id (llama-cpp-python: ``/extras/tokenize``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from streamslo.errors import BadInputError, ProtocolError
from streamslo.transport.common import ClientLimits, Target
from streamslo.transport.fetch import fetch
from streamslo.workload.requests import eos_ids_from_tokenizer

__all__ = ["SpecialIds", "find_eos_ids", "hub_cache_folder"]


@dataclass(frozen=True)
class SpecialIds:
    """A model's special token ids, and where they came from."""

    eos: tuple[int, ...] = ()
    bos: int | None = None
    source: str = ""


def hub_cache_folder(model_id: str) -> Path | None:
    """The newest snapshot folder of ``model_id`` (``org/name``) in the local Hugging Face
    cache (``HF_HUB_CACHE``, ``HF_HOME/hub`` or ``~/.cache/huggingface/hub``), or None."""
    if model_id.count("/") != 1 or model_id.startswith(("/", ".")):
        return None
    root = os.environ.get("HF_HUB_CACHE") or (
        str(Path(os.environ["HF_HOME"]) / "hub")
        if os.environ.get("HF_HOME")
        else str(Path.home() / ".cache" / "huggingface" / "hub")
    )
    snapshots = Path(root) / ("models--" + model_id.replace("/", "--")) / "snapshots"
    try:
        found = sorted(snapshots.iterdir(), key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        return None
    return found[0] if found else None


def _bos_of(folder: Path) -> int | None:
    """The beginning-of-sequence id a model folder names (None: none)."""
    for name in ("generation_config.json", "config.json"):
        try:
            data = json.loads((folder / name).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            continue
        value = data.get("bos_token_id") if isinstance(data, dict) else None
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return None


def _from_folder(folder: str | Path, source: str) -> SpecialIds | None:
    try:
        eos = eos_ids_from_tokenizer(folder)
    except BadInputError:
        return None
    p = Path(folder)
    return SpecialIds(eos, _bos_of(p if p.is_dir() else p.parent), source)


def _json(target: Target, method: str, path: str, body: object, limits: ClientLimits) -> object:
    """A small JSON request to the server; None when it fails or does not answer JSON."""
    data = None if body is None else json.dumps(body).encode()
    try:
        status, raw = fetch(
            target, path, timeout=limits.request_timeout, limits=limits, method=method, body=data
        )
    except (OSError, ProtocolError, ValueError):
        return None
    if status != 200:
        return None
    try:
        return json.loads(raw.decode("utf-8", "replace"))
    except ValueError:
        return None


def _ints(value: object) -> tuple[int, ...]:
    if not isinstance(value, list):
        return ()
    out = []
    for v in value:
        if isinstance(v, dict):  # llama.cpp's tokens with pieces: {"id": 2, "piece": "</s>"}
            v = v.get("id")
        if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
            out.append(v)
    return tuple(out)


def _token_id(target: Target, token: str, limits: ClientLimits) -> tuple[int | None, str]:
    """One special token's id by the server's tokenizer endpoint (its special tokens parsed)."""
    for path, body in (
        ("/tokenize", {"content": token, "add_special": False, "parse_special": True}),
        ("/extras/tokenize", {"input": token, "special": True}),
    ):
        answer = _json(target, "POST", path, body, limits)
        ids = _ints(answer.get("tokens")) if isinstance(answer, dict) else ()
        if len(ids) == 1:
            return ids[0], path
    return None, ""


#: End-of-sequence texts of common tokenizers (SentencePiece Llama/Mistral, GPT-2 and its heirs,
#: ChatML, Llama 3, Gemma, Phi): a text the server's tokenizer turns into one special id is a
#: candidate, and the probe that pushes it shows whether it ends an answer.
EOS_TEXTS = (
    "</s>",
    "<|endoftext|>",
    "<|im_end|>",
    "<|eot_id|>",
    "<|end_of_text|>",
    "<end_of_turn>",
    "<|end|>",
    "<eos>",
)


def _llama_cpp_python(text: str) -> dict[str, object]:
    return {"input": text}


def _vllm(text: str) -> dict[str, object]:
    return {"prompt": text, "add_special_tokens": False}


#: The tokenizer endpoints servers have, each with how to ask it (a text -> a JSON body).
_TOKENIZERS = (("/extras/tokenize", _llama_cpp_python), ("/tokenize", _vllm))


def _from_props(target: Target, limits: ClientLimits) -> SpecialIds | None:
    """llama.cpp's ``/props`` names its ``eos_token`` and ``bos_token``; ``/tokenize`` gives
    each one's id."""
    props = _json(target, "GET", "/props", None, limits)
    if not isinstance(props, dict):
        return None
    token = props.get("eos_token")
    if not isinstance(token, str) or not token:
        return None
    eos, path = _token_id(target, token, limits)
    if eos is None:
        return None
    bos_text = props.get("bos_token")
    bos = _token_id(target, bos_text, limits)[0] if isinstance(bos_text, str) and bos_text else None
    return SpecialIds((eos,), bos, f"the server's /props eos_token {token!r} by {path}")


def _from_tokenizer(target: Target, limits: ClientLimits) -> SpecialIds | None:
    """A tokenizer endpoint with no ``/props`` (llama-cpp-python, vLLM): the ids it gives the
    usual end-of-sequence texts (:data:`EOS_TEXTS`), one special id each once the ids it puts
    before any text (a beginning-of-sequence id) are taken off."""
    for path, body in _TOKENIZERS:
        empty = _json(target, "POST", path, body(""), limits)
        if not isinstance(empty, dict) or not isinstance(empty.get("tokens"), list):
            continue
        prefix = _ints(empty.get("tokens"))
        found: dict[int, str] = {}
        for text in EOS_TEXTS:
            answer = _json(target, "POST", path, body(text), limits)
            ids = _ints(answer.get("tokens")) if isinstance(answer, dict) else ()
            rest = ids[len(prefix) :] if ids[: len(prefix)] == prefix else ids
            if len(rest) == 1 and rest[0] not in prefix:
                found.setdefault(rest[0], text)
        if found:
            words = ", ".join(repr(t) for t in found.values())
            bos = prefix[0] if len(prefix) == 1 else None
            return SpecialIds(tuple(found), bos, f"the server's {path} ({words})")
    return None


def _from_server(target: Target, limits: ClientLimits) -> SpecialIds | None:
    """The special ids as the server's own tokenizer has them (``/props`` and ``/tokenize``,
    else a tokenizer endpoint and the usual end-of-sequence texts)."""
    return _from_props(target, limits) or _from_tokenizer(target, limits)


def find_eos_ids(
    target: Target,
    model: str | None,
    limits: ClientLimits,
    *,
    given: Sequence[int] = (),
    tokenizer: str | None = None,
    ask_server: bool = True,
) -> SpecialIds:
    """The model's special ids and where they came from (empty: not found).

    Args:
        target: the server (asked last).
        model: the model id the requests name.
        limits: time limits of the server's answers.
        given: ``--eos-token-id``.
        tokenizer: ``--tokenizer`` (a folder, or a ``tokenizer.json`` in one).
        ask_server: also ask the server's tokenizer endpoints.
    """
    found: SpecialIds | None = None
    if tokenizer:
        found = _from_folder(tokenizer, f"--tokenizer {tokenizer}")
    if found is None and model:
        if Path(model).is_dir():
            found = _from_folder(model, f"the model folder {model}")
        cached = hub_cache_folder(model) if found is None else None
        if cached is not None:
            found = _from_folder(cached, f"the local Hugging Face cache of {model}")
    if found is None and ask_server:
        found = _from_server(target, limits)
    if given:
        return SpecialIds(tuple(given), found.bos if found else None, "--eos-token-id")
    return found or SpecialIds()
