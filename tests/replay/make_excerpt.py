"""Writes ``data/mooncake_excerpt.jsonl``: two minutes of traffic in Mooncake's published trace
shape (``timestamp`` in ms, ``input_length``, ``output_length``, ``hash_ids`` of 512-token
blocks), with bursts. Synthetic, seeded, scaled down so the bundled server serves it on a
laptop: Poisson arrivals at 2/s, plus six bursts of 12 requests within 150 ms; prompts of 1-3
blocks, where requests of one of 8 "documents" share their first blocks (prefix reuse), and
answers of 4-24 tokens. Run ``python tests/replay/make_excerpt.py`` to write it again.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

OUT = Path(__file__).resolve().parent / "data" / "mooncake_excerpt.jsonl"
SPAN_MS = 120_000
BLOCK = 512


def main() -> None:
    rng = random.Random(20)
    times: list[float] = []
    t = 0.0
    while t < SPAN_MS:
        times.append(t)
        t += rng.expovariate(2.0) * 1000.0
    for start in (10_000, 31_000, 52_000, 70_500, 88_000, 107_000):
        times += [start + rng.uniform(0, 150) for _ in range(12)]
    times.sort()
    next_id = 1000
    docs = {d: [d * 10 + i for i in range(3)] for d in range(8)}  # shared leading blocks
    lines = []
    for ms in times:
        blocks = rng.randint(1, 3)
        input_length = (blocks - 1) * BLOCK + rng.randint(64, BLOCK)
        # Most requests open with a shared document's blocks.
        shared = docs[rng.randrange(8)][: max(1, blocks - 1)] if rng.random() < 0.7 else []
        own = []
        while len(shared) + len(own) < blocks:
            own.append(next_id)
            next_id += 1
        lines.append(
            {
                "timestamp": round(ms),
                "input_length": input_length,
                "output_length": rng.randint(4, 24),
                "hash_ids": shared + own,
            }
        )
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("".join(json.dumps(x) + "\n" for x in lines))


if __name__ == "__main__":
    main()
