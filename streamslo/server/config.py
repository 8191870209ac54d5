"""Typed server settings, shared by the launcher, the app factory and Gunicorn workers.

A :class:`ServerConfig` is frozen; it travels into Gunicorn workers as JSON in the
``STREAMSLO_SERVER_CONFIG`` environment variable (:meth:`ServerConfig.to_json`,
:meth:`ServerConfig.from_env`).

Faults (each one of the incidents' causes; ``naive`` mode turns on all of them, ``--fault``
adds single ones on top of either mode):

- ``loop-blocking-generate``: generation runs inside the request coroutine on the event loop,
  batch size 1, so each stream pays a whole decode step per token (incident A).
- ``per-token-sync``: a device synchronisation after every token; on CPU a blocking wait of
  ``sync_ms`` (on the loop when generation is on the loop, else in the decode thread).
- ``per-request-setup``: tokenizer loaded from a JSON file, TLS contexts, pure-Python scoring and
  cyclic garbage, per request, on the loop (incident B).
- ``unbounded-write``: no per-stream buffer bound and no write timeout for slow readers.
- ``training-contention``: a co-located training subprocess competing for the same cores
  (incident C). Without the fault in fixed mode nothing trains; with it in fixed mode the
  trainer is isolated (one thread, lowest priority).
- ``silent-cancel``: generation cancelled after ``cancel_after_s`` of wall time, ending with
  ``finish_reason: "stop"`` as if complete (incident C's silent truncation).
- ``leak-cancelled``: a stream whose client hung up keeps generating for nobody, and its slot
  (the in-flight gauge ``streamslo_requests_running``, admission) is never given back. Not one of
  the incidents: ``naive`` mode leaves it off; ``--fault leak-cancelled`` turns it on.

The prefix cache (always on): prompts are cut into blocks of ``prefix_block_tokens`` token ids,
each block keyed by a hash chained over the blocks before it (vLLM's automatic prefix caching);
a request's leading blocks found in the cache are ``cached_tokens`` (reported in
``usage.prompt_tokens_details``), and its prefill costs ``prefill_us_per_token`` for each prompt
token that is not cached, before its first token.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "CONFIG_ENV",
    "FAULTS",
    "INCIDENT_FAULTS",
    "MAX_BODY_BYTES",
    "MAX_CONNECTIONS",
    "MAX_PROMPT_CHARS",
    "MAX_TOKENS_LIMIT",
    "MODEL_ID",
    "ServerConfig",
]

#: Environment variable that carries a :class:`ServerConfig` as JSON into Gunicorn workers.
CONFIG_ENV = "STREAMSLO_SERVER_CONFIG"
#: The one model name served (any name is accepted and served by this model; see protocol).
MODEL_ID = "streamslo-tiny"
#: The incidents' faults, in the order the incidents introduce them (``naive`` turns on all).
INCIDENT_FAULTS: tuple[str, ...] = (
    "loop-blocking-generate",
    "per-token-sync",
    "per-request-setup",
    "unbounded-write",
    "training-contention",
    "silent-cancel",
)
#: Every fault name: the incidents', then those only ``--fault`` turns on.
FAULTS: tuple[str, ...] = (*INCIDENT_FAULTS, "leak-cancelled")
#: Default largest accepted ``max_tokens`` (``--max-tokens-limit``).
MAX_TOKENS_LIMIT = 4096
#: Default largest request body (HTTP) or WebSocket message, in bytes (``--max-body-bytes``).
MAX_BODY_BYTES = 1 << 20
#: Default cap on open client connections per server process (``--max-connections``).
MAX_CONNECTIONS = 2048
#: Largest accepted prompt (all message contents together), in characters.
MAX_PROMPT_CHARS = 65536


@dataclass(frozen=True)
class ServerConfig:
    """Everything a server process needs to know. Build with :meth:`build` to validate."""

    mode: str = "fixed"
    """``fixed`` or ``naive``."""
    faults: tuple[str, ...] = ()
    """Active faults, sorted; in naive mode all of :data:`FAULTS`."""
    token_interval_ms: float = 20.0
    """Simulated device time of one decode step of a bigger model. Decode is memory-bound, so
    a step costs about the same for 1 or 250 streams: the batched engine pays it once per step,
    loop-blocking generation pays it once per token of every stream."""
    max_streams: int = 512
    """Admission limit: streams beyond it get 429 (WebSocket: close 1013)."""
    seed: int = 1234
    """Seed of the weights, the tokenizer's vocabulary and unseeded requests."""
    device: str = "cpu"
    """``cpu``, ``cuda`` or ``auto``."""
    checkpoint: str | None = None
    """Optional ``torch.save`` state dict to load instead of seeded weights."""
    torch_threads: int = 1
    """Intra-op threads for inference (few: a tiny model gains nothing from more)."""
    stream_buffer_tokens: int = 32
    """Fixed mode: tokens one stream may have generated but not yet written (slow readers)."""
    write_timeout_s: float = 10.0
    """Fixed mode: a single blocked write longer than this aborts the stream."""
    sndbuf_bytes: int | None = None
    """Optional SO_SNDBUF of the listening socket (accepted sockets inherit it)."""
    sync_ms: float = 4.0
    """CPU stand-in for one ``torch.cuda.synchronize()`` under contention."""
    cancel_after_s: float = 2.0
    """``silent-cancel``: generation budget before the contention cancel hits."""
    default_max_tokens: int = 64
    """``max_tokens`` when a request leaves it out."""
    max_tokens_limit: int = MAX_TOKENS_LIMIT
    """Largest accepted ``max_tokens`` (400 past it)."""
    graceful_timeout_s: float = 30.0
    """SIGTERM: how long in-flight streams may take to finish while new ones get 503."""
    state_file: str | None = None
    """Gunicorn: JSON file where the master's hooks count worker exits and aborts."""
    server: str = "uvicorn"
    """``uvicorn`` or ``gunicorn`` (reported by /healthz)."""
    max_body_bytes: int = MAX_BODY_BYTES
    """Largest request body (413 past it) or WebSocket message (close 1009 past it)."""
    header_timeout_s: float = 10.0
    """A request head (request line and headers) must arrive within this many seconds of its
    first byte, or of the connection opening; a client that dribbles it is cut (408)."""
    body_timeout_s: float = 30.0
    """A request body must arrive within this many seconds of its head (408 past it)."""
    max_connections: int = MAX_CONNECTIONS
    """Open client connections (HTTP and WebSocket) one process serves; past it a request
    gets 503 and a WebSocket an error frame and close 1013."""
    prefix_block_tokens: int = 16
    """Prefix cache: token ids per cached block."""
    prefix_cache_blocks: int = 65536
    """Prefix cache: blocks kept (least recently used go first)."""
    prefill_us_per_token: float = 20.0
    """Simulated prefill cost per prompt token not served from the prefix cache (microseconds),
    paid before a stream's first token; 0 turns the cost off (the cache still counts hits)."""
    api_key_env: str | None = None
    """Name of the environment variable holding the API key; None serves without auth. The
    key itself never travels in the config (nor on a command line)."""
    reasoning_tokens: int = 0
    """Play a reasoning model: the first this many tokens of every answer are reasoning deltas
    (chat ``reasoning_content``, Responses ``response.reasoning_text.delta``, Messages
    ``thinking_delta``), counted in ``max_tokens`` and in usage as the dialects count them."""
    tool_call_tokens: int = 0
    """Play a tool-calling model: the last this many tokens of every answer (of ``max_tokens``)
    are tool-call argument deltas (chat ``tool_calls``, Responses
    ``response.function_call_arguments.delta``, Messages ``input_json_delta``)."""
    extra: dict[str, Any] = field(default_factory=dict, compare=False)
    """Free-form notes shown by /healthz (never read by the server)."""

    @classmethod
    def build(
        cls, mode: str = "fixed", faults: tuple[str, ...] | list[str] = (), **kw: Any
    ) -> ServerConfig:
        """Validate and normalise settings: naive mode switches on every fault.

        Raises:
            ValueError: an unknown mode, fault or device, or a value out of range.
        """
        if mode not in ("fixed", "naive"):
            raise ValueError(f"--mode: expected naive or fixed, got {mode!r}")
        unknown = [f for f in faults if f not in FAULTS]
        if unknown:
            raise ValueError(f"--fault: unknown {unknown}; known: {', '.join(FAULTS)}")
        active = (set(INCIDENT_FAULTS) | set(faults)) if mode == "naive" else set(faults)
        cfg = cls(mode=mode, faults=tuple(f for f in FAULTS if f in active), **kw)
        if cfg.device not in ("cpu", "cuda", "auto"):
            raise ValueError(f"--device: expected cpu, cuda or auto, got {cfg.device!r}")
        if cfg.token_interval_ms < 0:
            raise ValueError("--token-interval-ms must be >= 0")
        if cfg.max_streams < 1:
            raise ValueError("--max-streams must be >= 1")
        if cfg.stream_buffer_tokens < 1:
            raise ValueError("--stream-buffer-tokens must be >= 1")
        if not 1 <= cfg.default_max_tokens <= cfg.max_tokens_limit:
            raise ValueError("--default-max-tokens must be between 1 and --max-tokens-limit")
        if cfg.max_body_bytes < 1024:
            raise ValueError("--max-body-bytes must be >= 1024")
        if cfg.header_timeout_s <= 0 or cfg.body_timeout_s <= 0:
            raise ValueError("--header-timeout and --body-timeout must be > 0")
        if cfg.max_connections < 1:
            raise ValueError("--max-connections must be >= 1")
        if cfg.reasoning_tokens < 0 or cfg.tool_call_tokens < 0:
            raise ValueError("--reasoning-tokens and --tool-call-tokens must be >= 0")
        if (
            cfg.prefix_block_tokens < 1
            or cfg.prefix_cache_blocks < 0
            or cfg.prefill_us_per_token < 0
        ):
            raise ValueError(
                "--prefix-block-tokens must be >= 1, --prefix-cache-blocks and "
                "--prefill-us-per-token >= 0"
            )
        return cfg

    def has(self, fault: str) -> bool:
        """Whether ``fault`` is active."""
        return fault in self.faults

    def api_key(self) -> str | None:
        """The API key, read from the variable :attr:`api_key_env` names; None without one.

        Raises:
            ValueError: the variable is unset or empty.
        """
        if not self.api_key_env:
            return None
        key = os.environ.get(self.api_key_env, "")
        if not key:
            raise ValueError(
                f"--api-key-env: environment variable {self.api_key_env} is unset or empty"
            )
        return key

    @property
    def batched(self) -> bool:
        """Whether generation runs in the batched decode thread (not on the loop)."""
        return not self.has("loop-blocking-generate")

    def to_json(self) -> str:
        """Serialise for :data:`CONFIG_ENV`."""
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> ServerConfig:
        """Inverse of :meth:`to_json`.

        Raises:
            ValueError: not a JSON object of known fields.
        """
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError(f"{CONFIG_ENV}: expected a JSON object")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise ValueError(f"{CONFIG_ENV}: unknown fields {sorted(unknown)}")
        data["faults"] = tuple(data.get("faults", ()))
        return cls(**data)

    @classmethod
    def from_env(cls) -> ServerConfig:
        """The config in :data:`CONFIG_ENV`, or the defaults when it is unset."""
        text = os.environ.get(CONFIG_ENV)
        return cls.from_json(text) if text else cls.build()
