"""Batched, per-request deterministic sampling.

A stateful ``torch.Generator`` per stream would force one ``multinomial`` call per row. Instead
the noise is a counter-based hash of ``(seed, step, token id)``: a whole batch samples in a few
tensor ops, and a request's output depends only on its seed, its prompt and the model, never on
which other streams share its batch (so naive and fixed mode agree for a fixed seed).
Sampling is Gumbel-max: ``argmax(logits / T + Gumbel noise)``; ``T == 0`` is greedy.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["sample"]

_M32 = 0xFFFFFFFF


def _uniform(seeds: Tensor, steps: Tensor, vocab: int) -> Tensor:
    """(B,) seeds, (B,) steps -> (B, V) uniforms in (0, 1), a pure function of its inputs."""
    idx = torch.arange(vocab, device=seeds.device, dtype=torch.long)[None, :]  # (1, V)
    h = (seeds[:, None] * 0x9E3779B1 + steps[:, None] * 0x85EBCA77 + idx * 0xC2B2AE3D) & _M32
    # murmur3 finaliser; int64 products wrap, and the mask keeps the low 32 bits exact
    h = h ^ (h >> 16)
    h = (h * 0x85EBCA6B) & _M32
    h = h ^ (h >> 13)
    h = (h * 0xC2B2AE35) & _M32
    h = h ^ (h >> 16)
    return (h.to(torch.float64) + 0.5) / 4294967296.0


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
    logits = logits.to(torch.float64)
    logits[:, 0] = torch.where(ban, torch.full_like(logits[:, 0], -torch.inf), logits[:, 0])
    greedy = temps <= 0
    safe_t = torch.where(greedy, torch.ones_like(temps), temps).to(torch.float64)
    gumbel = -torch.log(-torch.log(_uniform(seeds, steps, logits.shape[1])))  # (B, V)
    noisy = logits / safe_t[:, None] + torch.where(greedy[:, None], 0.0, gumbel)
    return noisy.argmax(dim=1)
