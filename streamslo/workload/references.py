"""Reference replies: each prompt's answer from the idle server, the stand-in for a forced
length where none works (docs/outcomes.md, "Reference replies").

Before the load ``streamslo run`` asks the server for each of the run's prompts once, one at a
time, greedy (temperature 0) and seeded, and keeps the replies keyed by the prompt's digest
(:func:`prompt_key`); the run's own requests are the same, so under load a stream that ends with
an ordinary stop while its text is a strict prefix of its prompt's reference was cut short
(:func:`streamslo.stream.counts.judge_end`). The replies travel to every Locust process as one
option (``--reference-replies``, JSON), so workers on other machines have them too.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from streamslo.errors import BadInputError

__all__ = ["References", "prompt_key"]


def prompt_key(prompt: str) -> str:
    """A prompt's key: 16 hex digits of its SHA-256 (the prompt itself stays out of the option)."""
    return hashlib.sha256(prompt.encode("utf-8", "surrogatepass")).hexdigest()[:16]


@dataclass(frozen=True)
class References:
    """The reference reply of each prompt, by :func:`prompt_key`."""

    replies: Mapping[str, str] = field(default_factory=dict)
    max_tokens: int = 0
    """The ``max_tokens`` they were recorded with (the run's largest)."""

    def __len__(self) -> int:
        return len(self.replies)

    def get(self, prompt: str) -> str | None:
        """The reference of ``prompt``, or None (a prompt recorded without one)."""
        return self.replies.get(prompt_key(prompt))

    def to_json(self) -> str:
        return json.dumps(
            {"max_tokens": self.max_tokens, "replies": dict(self.replies)},
            separators=(",", ":"),
            ensure_ascii=False,
        )

    @classmethod
    def from_json(cls, text: str) -> References:
        """Read :meth:`to_json` back (empty text: none).

        Raises:
            BadInputError: not what :meth:`to_json` writes.
        """
        if not text:
            return cls()
        try:
            data = json.loads(text)
            replies = data["replies"]
            if not isinstance(replies, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in replies.items()
            ):
                raise ValueError("replies must map keys to texts")
            return cls(dict(replies), int(data.get("max_tokens") or 0))
        except (ValueError, KeyError, TypeError) as exc:
            raise BadInputError(f"--reference-replies: not reference replies ({exc})") from None
