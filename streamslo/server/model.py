"""A nanoGPT-sized causal transformer with a slot-based KV cache for continuous batching.

nanoGPT's ``generate`` recomputes the whole prefix every token, which makes per-token latency
grow with length; here each stream owns a *slot* of a preallocated KV cache and a decode step
costs one token per stream. The cache is a ring of ``block_size`` positions per slot (a sliding
attention window), so ``max_tokens`` may exceed the window; position ``p`` uses embedding and
ring index ``p % block_size``.

The batched engine keeps active streams packed in slots ``0..B-1`` (:meth:`KVCache.move`), so a
decode step attends over a view of the cache, never a gathered copy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["GPT", "GPTConfig", "KVCache"]


@dataclass(frozen=True)
class GPTConfig:
    """Shape of the model."""

    vocab_size: int = 1024
    """Ids, as made by :class:`streamslo.server.tokenizer.Tokenizer`."""
    block_size: int = 64
    """Attention window (and KV ring) length (short: attention dominates a 250-stream step)."""
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 128


class KVCache:
    """Keys and values for ``slots`` streams: ``k[l]``, ``v[l]`` are (slots, H, W, hd)."""

    def __init__(self, cfg: GPTConfig, slots: int, device: torch.device) -> None:
        hd = cfg.n_embd // cfg.n_head
        shape = (cfg.n_layer, slots, cfg.n_head, cfg.block_size, hd)
        self.k = torch.zeros(shape, device=device)
        self.v = torch.zeros(shape, device=device)
        #: tokens written so far per slot (the next position)
        self.pos = torch.zeros(slots, dtype=torch.long, device=device)

    def move(self, src: int, dst: int) -> None:
        """Copy slot ``src`` into ``dst`` (to keep active slots packed)."""
        self.k[:, dst] = self.k[:, src]
        self.v[:, dst] = self.v[:, src]
        self.pos[dst] = self.pos[src]


class _Block(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.n_head = cfg.n_head
        self.ln1 = nn.LayerNorm(cfg.n_embd)
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd)
        self.ln2 = nn.LayerNorm(cfg.n_embd)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.n_embd, 4 * cfg.n_embd), nn.GELU(), nn.Linear(4 * cfg.n_embd, cfg.n_embd)
        )

    def _split(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)  # each (B, T, C)
        # -> (B, H, T, hd)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        return q, k, v

    def prefill(self, x: Tensor, ck: Tensor, cv: Tensor, slot: int) -> Tensor:
        """x: (1, T, C) the prompt; writes its keys/values at ring positions 0..T-1."""
        b, t, c = x.shape
        q, k, v = self._split(x)  # (1, H, T, hd)
        ck[slot, :, :t] = k[0]
        cv[slot, :, :t] = v[0]
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (1, H, T, hd)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        out: Tensor = x + self.mlp(self.ln2(x))
        return out

    def decode(self, x: Tensor, ck: Tensor, cv: Tensor, ring: Tensor, mask: Tensor) -> Tensor:
        """x: (B, 1, C) one new token per slot 0..B-1; ring: (B,) write index; mask: (B,1,1,W)."""
        b, _, c = x.shape
        q, k, v = self._split(x)  # (B, H, 1, hd)
        rows = torch.arange(b, device=x.device)
        ck[rows, :, ring] = k[:, :, 0]  # (B, H, hd) into (S, H, W, hd)
        cv[rows, :, ring] = v[:, :, 0]
        y = F.scaled_dot_product_attention(q, ck[:b], cv[:b], attn_mask=mask)  # (B, H, 1, hd)
        x = x + self.proj(y.transpose(1, 2).reshape(b, 1, c))
        out: Tensor = x + self.mlp(self.ln2(x))
        return out


class GPT(nn.Module):
    """The transformer. Weights come from a seed (or a checkpoint) — never a download."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.blocks = nn.ModuleList(_Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # tied, as in GPT-2

    @classmethod
    def from_seed(cls, cfg: GPTConfig, seed: int) -> GPT:
        """Deterministic weights: N(0, 0.02) from a seeded generator, biases zero."""
        model = cls(cfg)
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith("bias"):
                    p.zero_()
                elif "ln" in name:
                    p.fill_(1.0)
                else:
                    p.copy_(torch.randn(p.shape, generator=gen) * 0.02)
        return model.eval()

    def _layers(self) -> list[_Block]:
        return [cast(_Block, b) for b in self.blocks]

    @torch.no_grad()
    def prefill(self, cache: KVCache, slot: int, ids: list[int]) -> Tensor:
        """Run a prompt into ``slot``; returns the next-token logits (vocab,).

        The prompt is cut to its last ``block_size`` ids (the window) and must be non-empty.
        """
        w = self.cfg.block_size
        ids = ids[-w:]
        dev = cache.k.device
        t = len(ids)
        idx = torch.tensor([ids], device=dev)  # (1, T)
        x = self.wte(idx) + self.wpe(torch.arange(t, device=dev))  # (1, T, C)
        for layer, block in enumerate(self._layers()):
            x = block.prefill(x, cache.k[layer], cache.v[layer], slot)
        cache.pos[slot] = t
        logits: Tensor = self.lm_head(self.ln_f(x[0, -1]))  # (vocab,)
        return logits

    @torch.no_grad()
    def decode(self, cache: KVCache, ids: Tensor) -> Tensor:
        """One decode step for slots ``0..B-1``; ids: (B,) last token per slot -> (B, vocab)."""
        w = self.cfg.block_size
        b = ids.shape[0]
        pos = cache.pos[:b]  # (B,)
        ring = pos % w
        x = (self.wte(ids) + self.wpe(ring)).unsqueeze(1)  # (B, 1, C)
        # A slot attends over the ring entries written so far, this token's included.
        filled = torch.clamp(pos + 1, max=w)  # (B,)
        mask = (torch.arange(w, device=ids.device)[None, :] < filled[:, None]).view(b, 1, 1, w)
        for layer, block in enumerate(self._layers()):
            x = block.decode(x, cache.k[layer], cache.v[layer], ring, mask)
        cache.pos[:b] += 1
        logits: Tensor = self.lm_head(self.ln_f(x[:, 0]))  # (B, vocab)
        return logits
