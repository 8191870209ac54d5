"""What streamslo knows of the engines it recognises, and how a run adapts its requests to them
(docs/servers.md, "Engines streamslo recognises").

An engine is recognised by the ``owned_by`` of the first model ``GET /v1/models`` lists (vLLM
says ``vllm``, llama.cpp's ``llama-server`` says ``llamacpp``). For a recognised engine a run
asks for the per-chunk token count the engine offers, so merged chunks count exactly, and drops
what the engine's dialect would ignore anyway (a forced length it does not honour), saying so:
a run never reads a healthy engine's ordinary behaviour as a failure, and never hides what it
can no longer see.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from streamslo.stream.dialects import Dialect
from streamslo.stream.truth import ForcedLength
from streamslo.workload.requests import RequestOptions

__all__ = ["ENGINES", "Adapted", "Engine", "adapt_request", "engine_of"]


@dataclass(frozen=True, slots=True)
class Engine:
    """One engine's facts, per dialect (``--api`` names)."""

    name: str
    """As people call it (for messages)."""
    count_fields: Mapping[str, Mapping[str, object]]
    """Dialect -> the request fields that make each chunk carry the engine's token count."""
    no_forced_length: frozenset[str] = frozenset()
    """Dialects whose endpoint ignores ``ignore_eos``: a natural stop there is no truncation."""
    uncounted_merges: frozenset[str] = frozenset()
    """Dialects where the engine merges tokens into one delta (any text, not only multi-byte
    characters) and offers no per-delta count: only its usage can count the tokens."""
    stop_token_counted: bool = False
    """Its usage counts the end-of-sequence token that ended an answer (no text, no chunk)."""
    honours: Mapping[str, frozenset[ForcedLength]] = field(default_factory=dict)
    """Dialect -> the forced lengths its endpoint is known to honour (measured on the real
    engine): what the contract probes fall back on where a tiny or stubborn model never stops
    on its own, so that no probe can show a means' effect."""
    count_name: str = ""
    """What its per-chunk count is called (messages, ``run.json``)."""
    ignores: Mapping[str, frozenset[ForcedLength]] = field(default_factory=dict)
    """Dialect -> the forced lengths its endpoint takes and silently ignores (measured on the
    real engine): the probes do not try them."""


#: ``owned_by`` -> the engine (facts measured on the real servers: docs/servers.md; the bundled
#: target server says ``streamslo``).
ENGINES: Mapping[str, Engine] = {
    "vllm": Engine(
        name="vLLM",
        count_fields={
            Dialect.CHAT: {"return_token_ids": True},
            Dialect.COMPLETIONS: {"return_token_ids": True},
        },
        # vLLM 0.32's /v1/messages builds its request without ignore_eos, and merges tokens into
        # one delta when its API server falls behind (it reads continuous usage internally,
        # but sends no count with a delta).
        no_forced_length=frozenset({Dialect.MESSAGES}),
        uncounted_merges=frozenset({Dialect.MESSAGES}),
        honours={
            Dialect.CHAT: frozenset({ForcedLength.IGNORE_EOS, ForcedLength.MIN_TOKENS}),
            Dialect.COMPLETIONS: frozenset({ForcedLength.IGNORE_EOS, ForcedLength.MIN_TOKENS}),
            Dialect.RESPONSES: frozenset({ForcedLength.IGNORE_EOS}),
        },
        count_name="token ids",
    ),
    "llamacpp": Engine(
        name="llama.cpp",
        count_fields={
            Dialect.CHAT: {"timings_per_token": True},
            Dialect.COMPLETIONS: {"timings_per_token": True},
        },
        # Its /v1/messages (llama.cpp 0c1e570) ends at the model's end of sequence with
        # end_turn whatever ignore_eos says; its chunks and Responses events honour it. It sends
        # no delta for a token with no text and no count with a delta (a healthy stream read 34
        # deltas of 64 counted): only its usage counts the tokens there.
        no_forced_length=frozenset({Dialect.MESSAGES}),
        uncounted_merges=frozenset({Dialect.MESSAGES}),
        # usage counts the end-of-generation token: "stop" after 2 text chunks, usage 3.
        stop_token_counted=True,
        honours={
            Dialect.CHAT: frozenset({ForcedLength.IGNORE_EOS}),
            Dialect.COMPLETIONS: frozenset({ForcedLength.IGNORE_EOS}),
            Dialect.RESPONSES: frozenset({ForcedLength.IGNORE_EOS}),
        },
        count_name="timings.predicted_n",
    ),
    "me": Engine(
        # llama-cpp-python's own server (0.3.36) names itself so. It takes ignore_eos and ignores
        # it; min_tokens and logit_bias work alone (sent together, neither applies there).
        name="llama-cpp-python",
        count_fields={},
        # It sends a "content": "" chunk while a character's bytes are incomplete, then the
        # text: more chunks than tokens (66 for 64), and no usage or count to say so.
        uncounted_merges=frozenset({Dialect.CHAT, Dialect.COMPLETIONS}),
        honours={
            Dialect.CHAT: frozenset({ForcedLength.MIN_TOKENS}),
            Dialect.COMPLETIONS: frozenset({ForcedLength.MIN_TOKENS}),
        },
        ignores={
            Dialect.CHAT: frozenset({ForcedLength.IGNORE_EOS}),
            Dialect.COMPLETIONS: frozenset({ForcedLength.IGNORE_EOS}),
        },
    ),
    "streamslo": Engine(
        name="the bundled server",
        count_fields={},
        # Its engine bans the end-of-sequence token under ignore_eos, on every path.
        honours={d.value: frozenset({ForcedLength.IGNORE_EOS}) for d in Dialect},
    ),
}


def engine_of(owner: str | None) -> Engine | None:
    """The engine a ``/v1/models`` ``owned_by`` names, or None."""
    return ENGINES.get(owner or "")


@dataclass(frozen=True, slots=True)
class Adapted:
    """A run's request options adapted to its engine, and what changed, for the log and
    ``run.json``."""

    request: RequestOptions
    notes: tuple[str, ...] = ()


def adapt_request(req: RequestOptions, owner: str | None) -> Adapted:
    """Adapt ``req`` to the engine ``owner`` names (``--token-ids``: ``auto`` adapts to a
    recognised engine, ``on`` asks vLLM's ``return_token_ids`` of any server, ``off`` asks
    nothing and changes nothing)."""
    dialect = req.dialect
    if req.token_ids == "off":
        return Adapted(req)
    engine = engine_of(owner)
    if engine is None:
        if req.token_ids == "on" and dialect in ENGINES["vllm"].count_fields:
            return Adapted(_with_fields(req, ENGINES["vllm"].count_fields[dialect]))
        return Adapted(req)
    notes: list[str] = []
    if engine.stop_token_counted:
        req = replace(req, stop_token_counted=True)
    fields = engine.count_fields.get(dialect)
    if fields:
        req = _with_fields(req, fields)
    if dialect in engine.no_forced_length and req.forced:
        req = replace(req, forced=())
        notes.append(
            f"{engine.name}'s {req.path} ignores ignore_eos: streams are judged without a forced "
            "length (a stream cut short with an ordinary stop reason and an honest usage "
            "cannot be seen)"
        )
    if dialect in engine.uncounted_merges and not req.coalesced_chunks:
        req = replace(req, coalesced_chunks=True)
        notes.append(
            f"{engine.name}'s {req.path} sends no token count with its deltas (several tokens "
            "may share one delta, or have none): tokens are counted by its usage "
            "(--coalesced-chunks; a lost delta cannot be seen)"
        )
    return Adapted(req, tuple(notes))


def _with_fields(req: RequestOptions, fields: Mapping[str, object]) -> RequestOptions:
    """``req`` asking for ``fields`` too (the user's own ``extra`` fields win)."""
    missing = {k: v for k, v in fields.items() if k not in req.extra}
    return replace(req, extra={**req.extra, **missing}) if missing else req
