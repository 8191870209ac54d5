"""Batched, per-request deterministic sampling.

A stateful ``torch.Generator`` per stream would force one ``multinomial`` call per row, and
hashing ``(seed, step, token)`` for every vocabulary entry costs ~10 ms for 250 rows. Instead
Gumbel noise comes from a fixed table of ``_ROWS`` rows (made once from a fixed seed) and a
request's token ``step`` uses row ``hash(seed, step) % _ROWS``: a whole batch samples with one
gather, and a request's output depends only on its seed, prompt and the model — never on which
streams share its batch (so the naive and the fixed mode agree for a fixed seed).
Sampling is Gumbel-max: ``argmax(logits / T + noise)``; ``T == 0`` is greedy.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["sample"]

_ROWS = 4096
_M32 = 0xFFFFFFFF
_tables: dict[tuple[int, str], Tensor] = {}


def _noise(vocab: int, device: torch.device) -> Tensor:
    """The (``_ROWS``, vocab) Gumbel table, built once per vocab size and device."""
    key = (vocab, str(device))
    table = _tables.get(key)
    if table is None:
        gen = torch.Generator().manual_seed(0x5EED)
        u = torch.rand(_ROWS, vocab, generator=gen).clamp_(1e-9, 1 - 1e-9)
        table = (-torch.log(-torch.log(u))).to(device)
        _tables[key] = table
    return table


def _rows(seeds: Tensor, steps: Tensor) -> Tensor:
    """(B,) seeds and steps -> (B,) table rows, a murmur3-style mix (int64 wraps; masked)."""
    h = (seeds * 0x9E3779B1 + steps * 0x85EBCA77) & _M32
    h = h ^ (h >> 16)
    h = (h * 0x85EBCA6B) & _M32
    h = h ^ (h >> 13)
    h = (h * 0xC2B2AE35) & _M32
    h = h ^ (h >> 16)
    return h % _ROWS


def sample(logits: Tensor, temps: Tensor, seeds: Tensor, steps: Tensor, ban: Tensor) -> Tensor:
    """Pick one token per row.

    Args:
        logits: (B, V) next-token logits.
        temps: (B,) temperatures; ``0`` means greedy.
        seeds: (B,) int64 request seeds.
        steps: (B,) int64 index of the token being sampled (0 for the first).
        ban: (B,) bool; True bans id 0 (``<eos>``) for that row (``ignore_eos``).

    Returns:
        (B,) int64 token ids.
    """
    logits = logits.float().clone()
    logits[:, 0] = torch.where(ban, torch.full_like(logits[:, 0], -torch.inf), logits[:, 0])
    greedy = temps <= 0
    safe_t = torch.where(greedy, torch.ones_like(temps), temps).float()
    noise = _noise(logits.shape[1], logits.device)[_rows(seeds, steps)]  # (B, V)
    noisy = logits / safe_t[:, None] + torch.where(greedy[:, None], 0.0, noise)
    return noisy.argmax(dim=1)
