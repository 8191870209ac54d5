"""What a run could check: the truth its streams' outcomes rest on (docs/outcomes.md, "What a run
can see").

Every stream's outcome is decided by the rules of :mod:`streamslo.stream.counts`, but which of
those rules can fire depends on what the server gives and what the run asks of it:

* **a cut** (a stream that ended before its end) is always seen: by the terminal marker
  (``[DONE]``, ``message_stop``...), or, for a server that sends none, by the stop reason the
  last chunk must carry;
* **a silent stop** (a stream cut short that still ends with an ordinary stop reason, the
  third incident) is seen only where the run knows how long the answer had to be: a forced
  length (:class:`ForcedLength`: the server must send exactly ``max_tokens`` tokens) or a
  reference reply (the idle server's greedy answer to the same prompt);
* **a lost chunk** (tokens the server sent that never arrived) is seen only where there is
  something to count the arrivals against: the server's own per-chunk count (vLLM's token ids,
  llama.cpp's timings), or one token per chunk against its usage or the forced length.

:class:`Truth` states the three for a run, with the means of each or the reason it is missing;
it goes to ``run.json``, ``summary.json``, the terminal summary, the report's banner and
``verify`` (an SLO file may require a check: docs/thresholds.md). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

__all__ = ["CHECKS", "ForcedLength", "Forcing", "Truth", "forcing_text", "parse_forcing"]


class ForcedLength(StrEnum):
    """How a request forces its answer to run to ``max_tokens`` (docs/servers.md)."""

    IGNORE_EOS = "ignore_eos"
    """``"ignore_eos": true`` (vLLM, llama.cpp, SGLang)."""
    MIN_TOKENS = "min_tokens"
    """``"min_tokens": max_tokens`` (vLLM, llama-cpp-python)."""
    MIN_NEW_TOKENS = "min_new_tokens"
    """``"generation_config": {"min_new_tokens": max_tokens}`` (Hugging Face ``transformers
    serve``)."""
    LOGIT_BIAS = "logit_bias"
    """``"logit_bias": {"<id>": -100}`` against every end-of-sequence token of the model (the
    OpenAI parameter); needs the ids (``--eos-token-id``, ``--tokenizer``, or the server's own
    tokenizer endpoint)."""
    NONE = "none"
    """The length is not forced: a stream may stop on its own."""

    def __str__(self) -> str:
        return self.value


Forcing = tuple[ForcedLength, ...]
"""The means a request forces its length with (empty: not forced). Usually one; several where
the server accepts several and no probe could show which it honours (each is sent: one that
works is enough)."""


def forcing_text(forcing: Forcing) -> str:
    """``ignore_eos``, ``ignore_eos+min_tokens``, or ``none``."""
    return "+".join(str(m) for m in forcing) or str(ForcedLength.NONE)


def parse_forcing(text: str) -> Forcing:
    """The means ``--forced-length`` names: one, several joined by ``+`` or ``,``, or ``none``.

    Raises:
        ValueError: a name that is no means (the message lists them).
    """
    names = [n.strip() for n in text.replace(",", "+").split("+") if n.strip()]
    out: list[ForcedLength] = []
    for name in names:
        try:
            means = ForcedLength(name)
        except ValueError:
            known = ", ".join(m.value for m in ForcedLength)
            raise ValueError(f"{name!r} is no forced length (one of {known})") from None
        if means != ForcedLength.NONE and means not in out:
            out.append(means)
    if ForcedLength.NONE.value in names and out:
        raise ValueError("none cannot be joined with a means")
    return tuple(out)


#: The three checks, in the order they are shown.
CHECKS: tuple[str, ...] = ("cut", "silent_stop", "lost_chunk")

_WORDS = {
    "cut": "a cut stream",
    "silent_stop": "a silent stop",
    "lost_chunk": "a lost chunk",
}


@dataclass(frozen=True)
class Truth:
    """What a run can check, each with how (a short phrase) or, when it cannot, why not."""

    cut: str
    """How a cut is seen (always: a terminal marker, or the stop reason at the body's end)."""
    silent_stop: str | None
    """How a silent stop is seen (a forced length, reference replies), or None."""
    lost_chunk: str | None
    """How a lost chunk is seen (a per-chunk count, one token per chunk), or None."""
    why_not: Mapping[str, str]
    """For each check the run cannot make: why not."""
    learned: bool = True
    """What the preflight's probes learned of the server; False: what the flags ask, not
    checked (``--no-adapt``, ``--no-preflight``, a plain Locust run)."""

    @classmethod
    def of(
        cls,
        *,
        forced: Forcing,
        reference: str | None = None,
        counted: str | None = None,
        coalesced: bool = False,
        usage: bool = True,
        done_marker: bool = True,
        terminal: str = "[DONE]",
        no_forcing: str = "",
        learned: bool = True,
    ) -> Truth:
        """The truth of a run's requests.

        Args:
            forced: the means the requests force their length with (empty: none).
            reference: how reference replies are kept (e.g. ``"16 greedy replies"``), or None.
            counted: the server's per-chunk count the run reads (``"token ids"``), or None.
            coalesced: several tokens may share a chunk (tokens counted by usage).
            usage: the server reports its token count at the end of a stream.
            done_marker: streams end with the terminal marker.
            terminal: the terminal marker's name.
            no_forcing: why no forced length is used (for the why-not of a silent stop).
            learned: the probes learned it (False: the flags ask for it, unchecked).
        """
        why: dict[str, str] = {}
        cut = (
            f"the terminal marker {terminal}"
            if done_marker
            else "the stop reason at the body's end"
        )
        silent: str | None = None
        if forced:
            silent = f"a forced length ({forcing_text(forced)})"
        elif reference:
            silent = f"reference replies ({reference})"
        else:
            why["silent_stop"] = no_forcing or "no forced length and no reference replies"
        lost: str | None = None
        if counted:
            lost = f"the server's per-chunk count ({counted})"
        elif coalesced:
            why["lost_chunk"] = (
                "several tokens may share a chunk and the server gives no per-chunk count"
            )
        elif usage:
            lost = "one token per chunk, against the server's usage"
        elif forced:
            lost = "one token per chunk, against the forced length"
        else:
            why["lost_chunk"] = "no usage, no per-chunk count and no forced length to count against"
        return cls(cut, silent, lost, why, learned)

    def sees(self, check: str) -> bool:
        """Whether the run can check ``check`` (one of :data:`CHECKS`)."""
        return getattr(self, check) is not None

    @property
    def missing(self) -> list[str]:
        """The checks this run cannot make, in :data:`CHECKS` order."""
        return [c for c in CHECKS if not self.sees(c)]

    def lines(self) -> list[str]:
        """One line per check: ``sees a silent stop: a forced length (ignore_eos)`` or
        ``cannot see a lost chunk: several tokens may share a chunk ...``."""
        out = []
        for c in CHECKS:
            how = getattr(self, c)
            if how is not None:
                out.append(f"sees {_WORDS[c]}: by {how}")
            else:
                out.append(f"cannot see {_WORDS[c]}: {self.why_not.get(c, 'no means')}")
        return out

    def as_dict(self) -> dict[str, object]:
        """``run.json`` / ``summary.json``'s ``truth``: each check's means (null: cannot), and
        why not."""
        return {
            "cut": self.cut,
            "silent_stop": self.silent_stop,
            "lost_chunk": self.lost_chunk,
            "missing": self.missing,
            "why_not": dict(self.why_not),
            "learned": self.learned,
        }

    @classmethod
    def from_dict(cls, data: object) -> Truth | None:
        """Read back :meth:`as_dict` (None: not a truth, e.g. an older results directory)."""
        if not isinstance(data, dict) or not isinstance(data.get("cut"), str):
            return None

        def text(key: str) -> str | None:
            value = data.get(key)
            return value if isinstance(value, str) else None

        why = data.get("why_not")
        return cls(
            str(data["cut"]),
            text("silent_stop"),
            text("lost_chunk"),
            {str(k): str(v) for k, v in why.items()} if isinstance(why, dict) else {},
            data.get("learned") is not False,
        )
