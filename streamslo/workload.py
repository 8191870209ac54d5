"""What the load sends: request options, prompts, and request bodies (SPEC §2, §7).

Pure and deterministic for a seed, so the Locust users, the pytest probes and the tests build
the very same requests.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from streamslo.errors import BadInputError
from streamslo.run_options import DEFAULTS
from streamslo.stream.timing import StreamExpectations

__all__ = [
    "ENDPOINT_PATHS",
    "WS_PATH",
    "PromptSource",
    "RequestOptions",
    "build_body",
    "first_model_id",
    "user_weights",
]

#: ``--endpoint`` -> HTTP path.
ENDPOINT_PATHS = {
    "chat": "/v1/chat/completions",
    "completions": "/v1/completions",
    "stream": "/v1/stream",
}
WS_PATH = "/v1/ws"

_WORDS = ["explain", "quantum", "entanglement", "stream", "token", "latency", "server", "client", "batch", "queue", "socket", "buffer", "kernel", "worker", "timeout", "event", "loop", "model", "layer", "cache", "attention", "prompt", "answer", "question", "history", "science", "river", "mountain", "engine", "signal", "vector", "matrix", "gradient"]


@dataclass(frozen=True)
class RequestOptions:
    """How each request is built and judged (defaults: the run options', ``docs/cli.md``)."""

    endpoint: str = DEFAULTS.endpoint
    """``chat`` (/v1/chat/completions), ``completions`` or ``stream`` (/v1/stream)."""
    model: str | None = DEFAULTS.model
    """The model name; None leaves the field out."""
    max_tokens: int = DEFAULTS.max_tokens
    temperature: float = DEFAULTS.temperature
    seed: int | None = DEFAULTS.seed
    ignore_eos: bool = DEFAULTS.ignore_eos
    """Ask for exactly max_tokens tokens so that a silent truncation can be seen."""
    include_usage: bool = DEFAULTS.usage
    """Ask for ``stream_options.include_usage``."""
    done_marker: bool = DEFAULTS.done_marker
    """Expect ``[DONE]``; False for servers that end with the body."""
    coalesced_chunks: bool = DEFAULTS.coalesced_chunks
    """The server may pack several tokens in one chunk."""
    extra: dict[str, object] = field(default_factory=dict)
    """Further body fields."""

    def __post_init__(self) -> None:
        if self.endpoint not in ENDPOINT_PATHS:
            raise BadInputError(
                f"--endpoint must be one of {', '.join(ENDPOINT_PATHS)}, not {self.endpoint!r}"
            )
        if self.max_tokens < 1:
            raise BadInputError(f"--max-tokens must be at least 1, not {self.max_tokens}")

    @property
    def path(self) -> str:
        return ENDPOINT_PATHS[self.endpoint]

    def expectations(self) -> StreamExpectations:
        return StreamExpectations(
            max_tokens=self.max_tokens,
            ignore_eos=self.ignore_eos,
            coalesced_chunks=self.coalesced_chunks,
            done_marker=self.done_marker,
        )


def build_body(opts: RequestOptions, prompt: str) -> bytes:
    """The JSON body of one request (the WebSocket request frame is the same JSON)."""
    body: dict[str, object] = {}
    if opts.model is not None:
        body["model"] = opts.model
    if opts.endpoint == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    body["stream"] = True
    body["max_tokens"] = opts.max_tokens
    body["temperature"] = opts.temperature
    if opts.seed is not None:
        body["seed"] = opts.seed
    if opts.ignore_eos:
        body["ignore_eos"] = True
    if opts.include_usage:
        body["stream_options"] = {"include_usage": True}
    body.update(opts.extra)
    return json.dumps(body, separators=(",", ":")).encode()


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
    def synthetic(cls, words: int = DEFAULTS.prompt_tokens, seed: int = 0, count: int = 64) -> PromptSource:
        """``count`` seeded prompts of about ``words`` words each."""
        rng = random.Random(seed)
        return cls(
            [" ".join(rng.choice(_WORDS) for _ in range(max(1, words))) for _ in range(count)], seed
        )

    def next(self) -> str:
        prompt = self._prompts[self._i % len(self._prompts)]
        self._i += 1
        return prompt


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


def first_model_id(listing: object) -> str | None:
    """The first model id of a ``GET /v1/models`` answer (OpenAI list), None if it has none
    (or one that is not a short, printable string: it goes into every request)."""
    models = listing.get("data") if isinstance(listing, dict) else None
    if isinstance(models, list) and models and isinstance(models[0], dict):
        mid = models[0].get("id")
        if isinstance(mid, str) and 0 < len(mid) <= 256 and mid.isprintable():
            return mid
    return None
