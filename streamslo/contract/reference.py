"""Recording reference replies before the load: each prompt once, one at a time, greedy and
seeded, with the run's largest ``max_tokens`` (docs/outcomes.md, "Reference replies").

A reply that did not end whole (a cut, an error, no stop reason) is left out: its prompt's
streams are then counted as unchecked, never as checked.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from streamslo.contract.probe import one_stream
from streamslo.stream.outcome import Outcome
from streamslo.stream.timing import Wire
from streamslo.transport.common import ClientLimits, Target
from streamslo.workload.references import References, prompt_key
from streamslo.workload.requests import RequestOptions

__all__ = ["Recorded", "record_references"]


@dataclass(frozen=True)
class Recorded:
    """The replies, and the prompts left without one."""

    references: References
    missing: tuple[str, ...] = ()
    """Why each prompt left out has no reference (its record's outcome and error)."""
    seconds: float = 0.0


def record_references(
    target: Target,
    request: RequestOptions,
    prompts: Sequence[str],
    max_tokens: int,
    limits: ClientLimits,
    progress: Callable[[int, int], None] | None = None,
) -> Recorded:
    """Each prompt's reply from the idle server, one request at a time.

    Args:
        target: the server.
        request: the run's request options (adapted to the server; its forced length is
            dropped: a reference is the answer the model gives on its own).
        prompts: the prompts the run sends.
        max_tokens: the run's largest ``max_tokens``.
        limits: the run's time limits.
        progress: called with (done, total) after each reply.
    """
    import time

    t0 = time.perf_counter()
    req = replace(
        request,
        forced=(),
        temperature=0.0,
        seed=request.seed if request.seed is not None else 0,
        max_tokens=max_tokens,
    )
    replies: dict[str, str] = {}
    missing: list[str] = []
    for i, prompt in enumerate(prompts, 1):
        rec, tracker = one_stream(
            target,
            Wire.SSE,
            req,
            prompt=prompt,
            limits=limits,
            collect_text=True,
            label="reference",
        )
        if rec.outcome == Outcome.OK and rec.finish_reason is not None:
            replies[prompt_key(prompt)] = "".join(tracker.text or ())
        else:
            missing.append(f"{rec.outcome}: {rec.error[:120]}")
        if progress is not None:
            progress(i, len(prompts))
    return Recorded(References(replies, max_tokens), tuple(missing), time.perf_counter() - t0)
