"""What the load sends: request options, prompts, conversations and request bodies.

Pure and deterministic for a seed, so the Locust users, the pytest probes and the tests build
the very same requests. Where the prompts come from (``docs/workloads.md``): a dataset
(:mod:`streamslo.workload.datasets`), a prompt file, or synthetic text whose length is drawn from a
distribution (:mod:`streamslo.options.lengths`), in words or in tokens of a local tokenizer
(:mod:`streamslo.workload.prompts`). A :class:`Workload` hands out :class:`ConversationPlan` objects: one
turn each, or ``--turns N``, every turn with its own ``max_tokens``.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streamslo.errors import BadInputError
from streamslo.options.run_options import DEFAULTS, RunOptions
from streamslo.stream.dialects import API_PATHS, ENDPOINT_APIS, Dialect
from streamslo.stream.timing import StreamExpectations
from streamslo.stream.truth import ForcedLength, Forcing, Truth, parse_forcing
from streamslo.workload.datasets import Conversation, Dataset, load_dataset
from streamslo.workload.prefix import PrefixGroups
from streamslo.workload.prompts import TextMeasure

__all__ = [
    "ENDPOINT_PATHS",
    "WS_PATH",
    "ConversationPlan",
    "PromptSource",
    "RequestOptions",
    "Turn",
    "Workload",
    "build_body",
    "eos_ids_from_tokenizer",
    "first_model_id",
    "first_model_owner",
    "resolve_forced",
    "resolve_system_prompt",
    "user_weights",
]

#: ``--endpoint`` -> HTTP path.
ENDPOINT_PATHS = {
    "chat": "/v1/chat/completions",
    "completions": "/v1/completions",
    "stream": "/v1/stream",
}
WS_PATH = "/v1/ws"


@dataclass(frozen=True)
class RequestOptions:
    """How each request is built and judged (defaults: the run options', ``docs/cli.md``)."""

    endpoint: str = DEFAULTS.endpoint
    """``chat`` (/v1/chat/completions), ``completions`` or ``stream`` (/v1/stream)."""
    model: str | None = DEFAULTS.model
    """The model name; None leaves the field out."""
    max_tokens: int = DEFAULTS.max_tokens
    """``max_tokens`` of a request whose turn sets none."""
    temperature: float = DEFAULTS.temperature
    seed: int | None = DEFAULTS.seed
    forced: Forcing = (ForcedLength.IGNORE_EOS,)
    """How each request forces its answer to run to ``max_tokens``, so that a silent
    truncation can be seen (the :class:`~streamslo.stream.truth.ForcedLength` means, each sent;
    empty: not forced). Resolved from ``--forced-length``, ``--no-ignore-eos`` and what the
    preflight learned (:mod:`streamslo.contract`)."""
    eos_token_ids: tuple[int, ...] = ()
    """The model's end-of-sequence token ids (``logit_bias`` forcing)."""
    include_usage: bool = DEFAULTS.usage
    """Ask for ``stream_options.include_usage``."""
    done_marker: bool = DEFAULTS.done_marker
    """Expect ``[DONE]``; False for servers that end with the body."""
    coalesced_chunks: bool = DEFAULTS.coalesced_chunks
    """The server may pack several tokens in one chunk."""
    token_ids: str = DEFAULTS.token_ids
    """``auto``, ``on`` or ``off``: ask for each chunk's token ids (``return_token_ids``)."""
    stop_token_counted: bool = False
    """The engine's usage counts the end-of-sequence token (set for llama.cpp by
    :func:`streamslo.workload.engines.adapt_request`)."""
    system_prompt: str | None = None
    """A system message first in every chat request (the text, already read from a file)."""
    extra: dict[str, object] = field(default_factory=dict)
    """Further body fields."""
    api: str = DEFAULTS.api
    """The streaming dialect (``--api``); empty: the one :attr:`endpoint` names."""
    path_override: str | None = DEFAULTS.path
    """``--path``: the request path instead of the dialect's."""

    def __post_init__(self) -> None:
        forced: object = self.forced
        if isinstance(forced, str):  # one means, or "none", given bare
            object.__setattr__(self, "forced", parse_forcing(forced))
        if self.endpoint not in ENDPOINT_PATHS:
            raise BadInputError(
                f"--endpoint must be one of {', '.join(ENDPOINT_PATHS)}, not {self.endpoint!r}"
            )
        if self.api and self.api not in API_PATHS:
            raise BadInputError(f"--api must be one of {', '.join(API_PATHS)}, not {self.api!r}")
        if self.path_override is not None and not self.path_override.startswith("/"):
            raise BadInputError(f"--path must start with '/', not {self.path_override!r}")
        if self.max_tokens < 1:
            raise BadInputError(f"--max-tokens must be at least 1, not {self.max_tokens}")
        if ForcedLength.LOGIT_BIAS in self.forced and not self.eos_token_ids:
            raise BadInputError(
                "--forced-length logit_bias needs the model's end-of-sequence token ids: "
                "--eos-token-id ID or --tokenizer DIR"
            )

    @property
    def ignore_eos(self) -> bool:
        """The request sends ``ignore_eos: true``."""
        return ForcedLength.IGNORE_EOS in self.forced

    def truth_asked(self) -> Truth:
        """What a run of these requests asks to check, as the flags say (nothing learned: the
        server may not honour it)."""
        from streamslo.stream.dialects import reader_for

        return Truth.of(
            forced=self.forced,
            coalesced=self.coalesced_chunks,
            usage=self.include_usage,
            done_marker=self.done_marker,
            terminal=reader_for(self.dialect).terminal,
            no_forcing="the run does not force its length (--forced-length none or --no-ignore-eos)",
            learned=False,
        )

    @classmethod
    def of(cls, opts: RunOptions) -> RequestOptions:
        """The requests a run's options ask for (the Locust users' and the preflight's alike).

        Raises:
            BadInputError: options that contradict each other, or a forced length by
                ``logit_bias`` without the end-of-sequence ids.
        """
        forced = resolve_forced(opts.forced_length, opts.ignore_eos)
        eos = opts.eos_token_id
        if not eos and ForcedLength.LOGIT_BIAS in forced and opts.tokenizer:
            eos = eos_ids_from_tokenizer(opts.tokenizer)
        return cls(
            endpoint=opts.endpoint,
            model=opts.model,
            max_tokens=opts.max_tokens,
            temperature=opts.temperature,
            seed=opts.seed,
            forced=forced,
            eos_token_ids=eos,
            include_usage=opts.usage,
            done_marker=opts.done_marker,
            coalesced_chunks=opts.coalesced_chunks,
            token_ids=opts.token_ids,
            system_prompt=resolve_system_prompt(opts.system_prompt),
            api=opts.api,
            path_override=opts.path,
        )

    @property
    def dialect(self) -> str:
        """The ``--api`` name in effect: ``--api``, else the dialect of ``--endpoint``."""
        return self.api or ENDPOINT_APIS[self.endpoint]

    @property
    def path(self) -> str:
        if self.path_override:
            return self.path_override
        return API_PATHS[self.api] if self.api else ENDPOINT_PATHS[self.endpoint]

    def expectations(self, max_tokens: int | None = None) -> StreamExpectations:
        """What a complete answer looks like; ``max_tokens``: the request's own, if it set one."""
        return StreamExpectations(
            max_tokens=max_tokens or self.max_tokens,
            forced_length=bool(self.forced),
            coalesced_chunks=self.coalesced_chunks,
            done_marker=self.done_marker,
            stop_token_counted=self.stop_token_counted,
        )


def build_body(
    opts: RequestOptions,
    prompt: str,
    *,
    history: Sequence[tuple[str, str]] = (),
    max_tokens: int | None = None,
    tools: str = "",
) -> bytes:
    """The JSON body of one request (the WebSocket request frame is the same JSON).

    Args:
        opts: the run's request options.
        prompt: this request's user message.
        history: earlier (user, assistant) exchanges of the conversation, oldest first.
        max_tokens: this request's ``max_tokens`` (default: ``opts.max_tokens``).
        tools: ``auto`` or ``none``: offer one tool (``lookup``) in the dialect's shape, with
            that ``tool_choice`` for ``none`` (not on completions); empty: none.
    """
    body: dict[str, object] = {}
    if opts.model is not None:
        body["model"] = opts.model
    dialect = opts.dialect
    n = max_tokens or opts.max_tokens
    if tools and dialect != Dialect.COMPLETIONS:
        body["tools"] = [_tool_shape(dialect)]
        if tools == "none":
            body["tool_choice"] = {"type": "none"} if dialect == Dialect.MESSAGES else "none"
    if dialect in (Dialect.RESPONSES, Dialect.MESSAGES):
        return _event_dialect_body(opts, dialect, body, prompt, history, n)
    if dialect == Dialect.CHAT:
        messages: list[dict[str, str]] = []
        if opts.system_prompt:
            messages.append({"role": "system", "content": opts.system_prompt})
        for user, assistant in history:
            messages += [
                {"role": "user", "content": user},
                {"role": "assistant", "content": assistant},
            ]
        messages.append({"role": "user", "content": prompt})
        body["messages"] = messages
    else:
        # No roles on a completions endpoint: the conversation so far as one text.
        parts = [opts.system_prompt] if opts.system_prompt else []
        parts += [text for pair in history for text in pair]
        body["prompt"] = "\n\n".join([*parts, prompt]) if parts else prompt
    body["stream"] = True
    body["max_tokens"] = n
    body["temperature"] = opts.temperature
    if opts.seed is not None:
        body["seed"] = opts.seed
    _force_length(opts, body, n)
    if opts.include_usage:
        body["stream_options"] = {"include_usage": True}
    body.update(opts.extra)
    return json.dumps(body, separators=(",", ":")).encode()


#: The tool an agentic step offers: one function taking a query.
TOOL_NAME = "lookup"
_TOOL_PARAMETERS = {
    "type": "object",
    "properties": {"query": {"type": "string", "description": "what to look up"}},
    "required": ["query"],
}


def _tool_shape(dialect: str) -> dict[str, object]:
    """The tool in ``dialect``'s shape (OpenAI chat, Responses, Anthropic Messages)."""
    about = "Look something up and return what was found."
    if dialect == Dialect.RESPONSES:
        return {
            "type": "function",
            "name": TOOL_NAME,
            "description": about,
            "parameters": _TOOL_PARAMETERS,
        }
    if dialect == Dialect.MESSAGES:
        return {"name": TOOL_NAME, "description": about, "input_schema": _TOOL_PARAMETERS}
    return {
        "type": "function",
        "function": {"name": TOOL_NAME, "description": about, "parameters": _TOOL_PARAMETERS},
    }


def _event_dialect_body(
    opts: RequestOptions,
    dialect: str,
    body: dict[str, object],
    prompt: str,
    history: Sequence[tuple[str, str]],
    max_tokens: int,
) -> bytes:
    """An OpenAI Responses or Anthropic Messages request (docs/outcomes.md, "Dialects").

    Both dialects always report usage (no ``stream_options``) and have no ``seed``; neither
    has a forced length either, which is asked with the same extension fields the OpenAI
    dialects send (self-hosted servers honour ``ignore_eos``; the preflight learns what a
    server takes, docs/servers.md).
    """
    messages: list[dict[str, str]] = []
    for user, assistant in history:
        messages += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
    messages.append({"role": "user", "content": prompt})
    if dialect == Dialect.RESPONSES:
        if opts.system_prompt:
            body["instructions"] = opts.system_prompt
        body["input"] = messages
        body["max_output_tokens"] = max_tokens
    else:
        if opts.system_prompt:
            body["system"] = opts.system_prompt
        body["messages"] = messages
        body["max_tokens"] = max_tokens
    body["stream"] = True
    body["temperature"] = opts.temperature
    _force_length(opts, body, max_tokens)
    body.update(opts.extra)
    return json.dumps(body, separators=(",", ":")).encode()


def _force_length(opts: RequestOptions, body: dict[str, object], n: int) -> None:
    """The fields that force an answer of ``n`` tokens, by each of the request's means
    (docs/servers.md, "Forcing the length")."""
    for means in opts.forced:
        if means == ForcedLength.IGNORE_EOS:
            body["ignore_eos"] = True
        elif means == ForcedLength.MIN_TOKENS:
            body["min_tokens"] = n
        elif means == ForcedLength.MIN_NEW_TOKENS:
            # transformers serve reads a GenerationConfig's fields from this JSON string (an
            # object is a 500 there).
            body["generation_config"] = json.dumps({"min_new_tokens": n}, separators=(",", ":"))
        elif means == ForcedLength.LOGIT_BIAS:
            # (floats: transformers serve refuses integer biases; every server takes a number)
            body["logit_bias"] = {str(i): -100.0 for i in opts.eos_token_ids}


def resolve_forced(forced_length: str, ignore_eos: bool) -> Forcing:
    """The forced length of ``--forced-length`` and ``--no-ignore-eos``: ``auto`` (what the
    preflight did not replace with what it learned) is ``ignore_eos`` unless turned off.

    Raises:
        BadInputError: a name that is no means, or ``--forced-length ignore_eos`` with
            ``--no-ignore-eos``.
    """
    if forced_length in ("auto", ""):
        return (ForcedLength.IGNORE_EOS,) if ignore_eos else ()
    try:
        forced = parse_forcing(forced_length)
    except ValueError as exc:
        raise BadInputError(f"--forced-length: {exc}") from None
    if ForcedLength.IGNORE_EOS in forced and not ignore_eos:
        raise BadInputError("--forced-length ignore_eos contradicts --no-ignore-eos: give one")
    return forced


def eos_ids_from_tokenizer(path: str | Path) -> tuple[int, ...]:
    """The end-of-sequence token ids of a local Hugging Face model or tokenizer folder (or the
    folder of a ``tokenizer.json``): ``generation_config.json``'s ``eos_token_id`` (one id or a
    list: a chat model often has several), else ``config.json``'s, else the id of
    ``tokenizer_config.json``'s ``eos_token`` in ``tokenizer.json``. Nothing is downloaded.

    Raises:
        BadInputError: the folder names none of them.
    """
    p = Path(path)
    folder = p if p.is_dir() else p.parent
    ids: list[int] = []
    for name in ("generation_config.json", "config.json"):
        data = _json_file(folder / name)
        value = data.get("eos_token_id") if isinstance(data, dict) else None
        items = value if isinstance(value, list) else [value]
        ids = [int(i) for i in items if isinstance(i, int) and not isinstance(i, bool) and i >= 0]
        if ids:
            return tuple(dict.fromkeys(ids))
    config = _json_file(folder / "tokenizer_config.json")
    token = config.get("eos_token") if isinstance(config, dict) else None
    if isinstance(token, dict):
        token = token.get("content")
    tokenizer = _json_file(folder / "tokenizer.json")
    if isinstance(token, str) and isinstance(tokenizer, dict):
        for added in tokenizer.get("added_tokens") or ():
            if isinstance(added, dict) and added.get("content") == token:
                return (int(added["id"]),)
        vocab = (tokenizer.get("model") or {}).get("vocab")
        if isinstance(vocab, dict) and isinstance(vocab.get(token), int):
            return (int(vocab[token]),)
    raise BadInputError(
        f"{folder}: no end-of-sequence token id (generation_config.json, config.json or "
        "tokenizer_config.json's eos_token): give --eos-token-id ID"
    )


def _json_file(path: Path) -> object:
    """A JSON file's content, or None when it is missing or not JSON."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None


def resolve_system_prompt(value: str | None) -> str | None:
    """``--system-prompt``: the text itself, or ``@FILE`` for a file's content.

    Raises:
        BadInputError: the file cannot be read.
    """
    if not value:
        return None
    if not value.startswith("@"):
        return value
    path = Path(value[1:])
    try:
        return path.read_text(encoding="utf-8").strip() or None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInputError(f"--system-prompt: cannot read {path} ({exc})") from None


class PromptSource:
    """Prompts to send, cycled in a seeded order.

    Args:
        prompts: the prompts (at least one).
        seed: the order's seed.
    """

    def __init__(self, prompts: Sequence[str], seed: int = 0) -> None:
        if not prompts:
            raise BadInputError("no prompts to send")
        self._prompts = list(prompts)
        self._rng = random.Random(seed)
        self._rng.shuffle(self._prompts)
        self._i = 0

    @property
    def prompts(self) -> list[str]:
        """The prompts in the order they are sent."""
        return list(self._prompts)

    @classmethod
    def from_file(cls, path: str | Path, seed: int = 0) -> PromptSource:
        """One prompt per line, or JSON Lines with a ``prompt`` (or ``text``) field.

        Raises:
            BadInputError: the file is missing, empty, or a JSON line lacks a prompt
                (the message names the file and line).
        """
        p = Path(path)
        try:
            lines = p.read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise BadInputError(f"{p}: cannot read the prompt file ({exc.strerror})") from None
        prompts: list[str] = []
        for no, line in enumerate(lines, 1):
            line = line.strip()
            if not line:
                continue
            if line.startswith("{"):
                try:
                    obj = json.loads(line)
                except ValueError:
                    raise BadInputError(f"{p}:{no}: not valid JSON") from None
                text = obj.get("prompt", obj.get("text")) if isinstance(obj, dict) else None
                if not isinstance(text, str):
                    raise BadInputError(f"{p}:{no}: a JSON line needs a string 'prompt' field")
                prompts.append(text)
            else:
                prompts.append(line)
        if not prompts:
            raise BadInputError(f"{p}: the prompt file holds no prompt")
        return cls(prompts, seed)

    @classmethod
    def synthetic(cls, words: int = 16, seed: int = 0, count: int = 64) -> PromptSource:
        """``count`` seeded prompts of about ``words`` words each."""
        rng = random.Random(seed)
        measure = TextMeasure()
        return cls([measure.make(words, rng) for _ in range(count)], seed)

    def next(self) -> str:
        prompt = self._prompts[self._i % len(self._prompts)]
        self._i += 1
        return prompt


# ---------------------------------------------------------------------------- conversations
@dataclass(frozen=True)
class Turn:
    """One request of a conversation."""

    prompt: str
    """The user message."""
    max_tokens: int
    """This request's ``max_tokens``."""
    tools: str = ""
    """An agentic session's tool step: offer the model a tool, ``auto`` (it may call it) or
    ``none`` (``tool_choice: "none"``); empty: no tool."""


@dataclass(frozen=True)
class ConversationPlan:
    """The user turns of one conversation (one turn unless ``--turns``); the answers are what
    streams back, so the plan holds only the user side."""

    turns: tuple[Turn, ...]


#: Synthetic conversations made up front and cycled (enough variety; made in milliseconds).
SYNTHETIC_POOL = 256


class Workload:
    """Where each conversation's prompts and lengths come from, for one load process.

    Precedence: a dataset, else a prompt file, else synthetic prompts of ``prompt_tokens``
    length. Each turn's ``max_tokens``: drawn from ``output_tokens`` when given, else the
    dataset's reply length, else ``max_tokens``.

    Args:
        opts: the run options (``dataset``, ``dataset_format``, ``prompt_file``,
            ``prompt_tokens``, ``output_tokens``, ``tokenizer``, ``turns``, ``max_tokens``, ``seed``).

    Raises:
        BadInputError: an unreadable dataset, prompt file or tokenizer; both a dataset and a
            prompt file.
    """

    def __init__(self, opts: RunOptions) -> None:
        if opts.dataset and opts.prompt_file:
            raise BadInputError("give --dataset or --prompt-file, not both")
        self.opts = opts
        self.measure = TextMeasure(opts.tokenizer)
        self.dataset: Dataset | None = None
        self._rng = random.Random(opts.seed)
        self._i = 0
        if opts.dataset:
            self.dataset = load_dataset(opts.dataset, opts.dataset_format, self.measure.count)
            entries = list(self.dataset.conversations)
            self.source = "dataset"
        elif opts.prompt_file:
            prompts = PromptSource.from_file(opts.prompt_file).prompts
            entries = [Conversation((p,), (None,)) for p in prompts]
            self.source = "prompt_file"
        else:
            rng = random.Random(opts.seed)
            entries = [
                Conversation(
                    tuple(
                        self.measure.make(opts.prompt_tokens.sample(rng), rng)
                        for _ in range(opts.turns)
                    ),
                    (None,) * opts.turns,
                )
                for _ in range(SYNTHETIC_POOL)
            ]
            self.source = "synthetic"
        random.Random(opts.seed).shuffle(entries)
        if opts.reference_replies:
            # A run with reference replies sends only the prompts that have one (the first
            # --reference-prompts, in this same seeded order: reference_prompts()).
            entries = entries[: opts.reference_prompts]
        self._entries = entries
        self.prefixes: PrefixGroups | None = None
        """``--prefix-groups``: the shared prefixes, one put before each conversation's first turn."""
        if opts.prefix_groups > 0:
            self.prefixes = PrefixGroups(
                opts.prefix_groups, opts.prefix_tokens, self.measure, opts.seed
            )

    def reference_prompts(self) -> list[str]:
        """The opening prompts a run with reference replies sends (the first
        ``--reference-prompts`` conversations), each once."""
        seen: dict[str, None] = {}
        for entry in self._entries[: self.opts.reference_prompts]:
            seen.setdefault(entry.turns[0], None)
        return list(seen)

    def largest_max_tokens(self) -> int:
        """The largest ``max_tokens`` any request of the run may ask for."""
        out = self.opts.output_tokens
        if out is not None:
            return out.upper
        hints = [h for e in self._entries for h in e.output_hints if h is not None]
        return max([self.opts.max_tokens, *hints])

    def _max_tokens(self, hint: int | None) -> int:
        out = self.opts.output_tokens
        if out is not None:
            return out.sample(self._rng)
        return hint if hint is not None else self.opts.max_tokens

    def next(self) -> ConversationPlan:
        """The next conversation: ``turns`` user turns, from one entry and, when it has fewer,
        the first turns of the entries after it."""
        entries, want = self._entries, self.opts.turns
        turns: list[Turn] = []
        j = self._i
        while len(turns) < want:
            entry = entries[j % len(entries)]
            pairs = list(zip(entry.turns, entry.output_hints, strict=True))
            if j != self._i:
                pairs = pairs[:1]  # a continuation takes only the opening turn
            for prompt, hint in pairs[: want - len(turns)]:
                turns.append(Turn(prompt, self._max_tokens(hint)))
            j += 1
        self._i += 1
        if self.prefixes is not None:
            _, prefix = self.prefixes.pick()
            turns[0] = Turn(f"{prefix}\n\n{turns[0].prompt}", turns[0].max_tokens)
        return ConversationPlan(tuple(turns))

    def describe(self) -> dict[str, object]:
        """What ``run.json`` keeps (``workload``): the source, lengths, unit and turns."""
        o = self.opts
        out: dict[str, Any] = {
            "source": self.source,
            "unit": self.measure.unit,
            "tokenizer": o.tokenizer,
            "turns": o.turns,
            "output_tokens": None if o.output_tokens is None else o.output_tokens.as_dict(),
            "system_prompt": bool(o.system_prompt),
        }
        if self.source == "synthetic":
            out["prompt_tokens"] = o.prompt_tokens.as_dict()
        if self.dataset is not None:
            out["dataset"] = self.dataset.info.as_dict()
        if self.source == "prompt_file":
            out["prompt_file"] = o.prompt_file
        if self.prefixes is not None:
            out["prefix_groups"] = {
                "groups": o.prefix_groups,
                "prefix_tokens": o.prefix_tokens.as_dict(),
            }
        if o.trace:
            from streamslo.workload.trace import describe_trace

            out["source"] = "trace"
            out["trace"] = {
                **describe_trace(o.trace, o.trace_format).as_dict(),
                "speed": o.trace_speed,
                "late": o.trace_late,
                "max_lag_s": o.trace_max_lag,
                "block_tokens": o.trace_block_tokens,
            }
        if o.cancel_rate > 0:
            out["cancel"] = {"rate": o.cancel_rate, "after": o.cancel_after}
        return out


def user_weights(protocol: str, slow_fraction: float) -> dict[str, int]:
    """Locust user class name -> weight for ``--protocol`` and ``--slow-readers``.

    ``sse``/``ws`` use that transport's users; ``mixed`` splits evenly; the slow-reader share
    goes to the ``Slow*`` variants. Zero weights are left out.
    """
    f = slow_fraction
    if protocol == "sse":
        shares = {"SSEStreamUser": 1 - f, "SlowSSEStreamUser": f}
    elif protocol == "ws":
        shares = {"WebSocketStreamUser": 1 - f, "SlowWebSocketStreamUser": f}
    else:
        shares = {
            "SSEStreamUser": (1 - f) / 2,
            "WebSocketStreamUser": (1 - f) / 2,
            "SlowSSEStreamUser": f / 2,
            "SlowWebSocketStreamUser": f / 2,
        }
    return {k: round(v * 1000) for k, v in shares.items() if round(v * 1000) > 0}


def first_model_owner(listing: object) -> str | None:
    """``owned_by`` of the first model of a ``GET /v1/models`` answer (vLLM says ``vllm``),
    None when it does not say."""
    models = listing.get("data") if isinstance(listing, dict) else None
    if isinstance(models, list) and models and isinstance(models[0], dict):
        owner = models[0].get("owned_by")
        if isinstance(owner, str):
            return owner
    return None


def first_model_id(listing: object) -> str | None:
    """The first model id of a ``GET /v1/models`` answer (OpenAI list), None if it has none
    (or one that is not a short, printable string: it goes into every request)."""
    models = listing.get("data") if isinstance(listing, dict) else None
    if isinstance(models, list) and models and isinstance(models[0], dict):
        mid = models[0].get("id")
        if isinstance(mid, str) and 0 < len(mid) <= 256 and mid.isprintable():
            return mid
    return None
