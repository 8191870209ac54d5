"""What the contract probes learned of a server, and how a run adapts to it (docs/servers.md,
"What a run learns before the load").

:class:`Contract` is the whole finding: the server's shape (terminal marker, usage, per-chunk
count, merged tokens), every forced-length means tried and what became of it
(:class:`MeansTried`), the end-of-sequence ids and where they came from, whether greedy replies
repeat, and the :class:`Adaptation` list: each a run option, its value, the flag that spells it
and why. A run applies the adaptations to the options the user did not set
(:meth:`Contract.apply`), prints one line each before the load and keeps
:meth:`Contract.as_dict` in ``run.json``; ``check`` prints them with the command line that
spells them out (:meth:`Contract.command_line`). Pure: no I/O.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from streamslo.stream.truth import ForcedLength, Forcing, Truth, forcing_text

__all__ = ["Adaptation", "Contract", "MeansStatus", "MeansTried"]


class MeansStatus(StrEnum):
    """What became of one forced-length means."""

    PROVEN = "proven"
    """It ran to ``max_tokens`` where the same request without it stopped on its own."""
    KNOWN = "known"
    """It ran to ``max_tokens``; no probe stopped on its own, but the engine is known to honour
    it (docs/servers.md)."""
    UNPROVEN = "unproven"
    """It ran to ``max_tokens``, but no probe stopped on its own, so its effect was not shown."""
    IGNORED = "ignored"
    """Accepted, but the stream still stopped on its own before ``max_tokens``."""
    KNOWN_IGNORED = "known_ignored"
    """The engine is known to ignore it on this path (docs/servers.md)."""
    REJECTED = "rejected"
    """The server refused the request that carried it (a 4xx)."""
    UNAVAILABLE = "unavailable"
    """Not tried: it needs what the run does not have (end-of-sequence ids)."""
    FAILED = "failed"
    """The probes that carried it failed in another way (a cut, an error)."""
    NOT_TRIED = "not_tried"
    """Not tried: an earlier means was proven, or the flags set the means."""

    def __str__(self) -> str:
        return self.value


#: The statuses a run may force its length with, best first.
USABLE = (MeansStatus.PROVEN, MeansStatus.KNOWN, MeansStatus.UNPROVEN)


@dataclass(frozen=True)
class MeansTried:
    """One forced-length means and what became of it."""

    means: ForcedLength
    status: MeansStatus
    detail: str = ""
    """What the probes saw, in words (``ran to 16 tokens where the request without it stopped
    after 1``, the server's refusal)."""

    def as_dict(self) -> dict[str, str]:
        return {"means": str(self.means), "status": str(self.status), "detail": self.detail}


@dataclass(frozen=True)
class Adaptation:
    """One run option the probes set, and why."""

    option: str
    """The run option's name (a field of :class:`~streamslo.options.run_options.RunOptions`)."""
    value: object
    flag: str
    """The command-line words that set it (``--no-done-marker``, ``--forced-length
    min_new_tokens``)."""
    why: str

    def line(self) -> str:
        """``--no-done-marker: streams end with the body, not with [DONE]``."""
        return f"{self.flag}: {self.why}"

    def as_dict(self) -> dict[str, object]:
        value = list(self.value) if isinstance(self.value, tuple) else self.value
        return {"option": self.option, "value": value, "flag": self.flag, "why": self.why}


@dataclass(frozen=True)
class Contract:
    """What the probes learned of one server's stream contract."""

    dialect: str
    """The dialect probed (``--api`` name)."""
    path: str
    model: str | None
    engine: str | None
    """``/v1/models``'s ``owned_by``."""
    forced: Forcing
    """The means a run forces its length with there (empty: none)."""
    means: tuple[MeansTried, ...] = ()
    done_marker: bool = True
    """Streams end with the terminal marker."""
    usage: bool | None = None
    """The server reports its token count (None: no stream to tell)."""
    usage_refused: bool = False
    """The server refuses ``stream_options.include_usage``."""
    counted: str | None = None
    """The server's per-chunk count a run reads (``token ids``...), or None."""
    merged: bool = False
    """A whole stream's usage is above its chunks with no per-chunk count: several tokens may
    share a chunk (or a token sends none)."""
    eos_ids: tuple[int, ...] = ()
    eos_source: str = ""
    natural_stop: bool = False
    """A probe stopped on its own before its length (the model does; its effect was shown)."""
    deterministic: bool | None = None
    """Two greedy, seeded requests for the same prompt gave the same text (None: not asked)."""
    reference: bool = False
    """The run records reference replies (no forced length works)."""
    adaptations: tuple[Adaptation, ...] = ()
    notes: tuple[str, ...] = ()
    """What else the probes saw, for people."""
    probes: int = 0
    """Requests sent."""
    seconds: float = 0.0
    truth: Truth | None = None
    """What a run with these adaptations can check."""
    failure: str = ""
    """Why the probes could not learn the contract (no stream answered), or empty."""
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def learned(self) -> bool:
        """A stream answered, so the findings mean something."""
        return not self.failure

    def means_of(self, means: ForcedLength) -> MeansTried | None:
        return next((m for m in self.means if m.means == means), None)

    def apply(self, values: Mapping[str, object], given: Iterable[str] = ()) -> dict[str, object]:
        """``values`` (run options by name) with every adaptation of an option not in
        ``given`` (the options the user set: flags override what was learned)."""
        out = dict(values)
        fixed = set(given)
        for a in self.adaptations:
            if a.option not in fixed:
                out[a.option] = a.value
        return out

    def flags(self, given: Iterable[str] = ()) -> list[str]:
        """The command-line words of the adaptations (those the user did not set)."""
        fixed = set(given)
        return [w for a in self.adaptations if a.option not in fixed for w in shlex.split(a.flag)]

    def command_line(self, url: str) -> str:
        """``streamslo run --host URL`` with the adaptations spelled out."""
        return " ".join(
            [
                "streamslo",
                "run",
                "--host",
                shlex.quote(url),
                *(shlex.quote(w) for w in self.flags()),
            ]
        )

    def as_dict(self) -> dict[str, object]:
        """``run.json``'s ``contract`` (and ``check``'s JSON)."""
        return {
            "dialect": self.dialect,
            "path": self.path,
            "model": self.model,
            "engine": self.engine,
            "forced_length": forcing_text(self.forced),
            "means": [m.as_dict() for m in self.means],
            "done_marker": self.done_marker,
            "usage": self.usage,
            "usage_refused": self.usage_refused,
            "per_chunk_count": self.counted,
            "merged_chunks": self.merged,
            "eos_token_ids": list(self.eos_ids),
            "eos_source": self.eos_source or None,
            "natural_stop": self.natural_stop,
            "deterministic": self.deterministic,
            "reference": self.reference,
            "adaptations": [a.as_dict() for a in self.adaptations],
            "notes": list(self.notes),
            "probes": self.probes,
            "seconds": round(self.seconds, 3),
            "truth": None if self.truth is None else self.truth.as_dict(),
            "failure": self.failure or None,
        }
