"""A peer row for the stream-user benchmark: vLLM's own benchmark client (``vllm bench serve``)
against the same token emitter, its per-request timings turned into the bench's client dump.

``bench/bench_stream_users.py --clients ...,"vLLM bench serve" --peer-venv VENV`` runs this
with the bench's Python; it starts ``VENV/bin/vllm bench serve`` (a child: the CPU sampler sums
it in) with ``--backend openai-chat``, ``--max-concurrency USERS`` and ``--request-rate inf``
(USERS streams at once, each followed by the next: the bench's closed loop), enough prompts for
``--seconds`` of load (each stream lasts ``--max-tokens`` x 20 ms), ``--save-detailed``, then
writes ``--out`` in ``bench/_clients.py``'s format: per request ``t0`` and ``recv`` (epochs) and
``done``. vLLM keeps no chunk ids, so ``emit`` (the emitter's write epochs) is joined by the
bench from the emitter's log (:func:`join_emitter`).

vLLM stamps with ``time.perf_counter()`` (CLOCK_MONOTONIC, one clock for every process on the
machine): an epoch is ``perf_counter + (time.time() - time.perf_counter())`` taken here.

The VENV is the one ``tests/realserver/vllm_setup.py install VENV`` makes (``--install-peer``
makes it); the random dataset needs a tokenizer (``vllm_setup.py build-model VENV DIR``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PERIOD = 0.020


def vllm_cmd(
    venv: Path, url: str, users: int, prompts: int, max_tokens: int, tok: Path, result_dir: Path
) -> list[str]:
    """The ``vllm bench serve`` command line for one cell."""
    return [
        str(venv / "bin" / "vllm"),
        "bench",
        "serve",
        "--backend",
        "openai-chat",
        "--base-url",
        url,
        "--endpoint",
        "/v1/chat/completions",
        "--model",
        "bench",
        "--tokenizer",
        str(tok),
        "--dataset-name",
        "random",
        "--random-input-len",
        "8",
        "--random-output-len",
        str(max_tokens),
        "--ignore-eos",
        "--num-prompts",
        str(prompts),
        "--max-concurrency",
        str(users),
        "--request-rate",
        "inf",
        "--disable-tqdm",
        "--save-result",
        "--save-detailed",
        "--result-dir",
        str(result_dir),
        "--result-filename",
        "result.json",
    ]


def to_dump(result: dict[str, Any], offset: float) -> list[dict[str, Any]]:
    """vLLM's detailed result -> [{t0, done, recv[]}] (epochs), one per request."""
    rows = []
    starts = result.get("start_times") or []
    for st, ttft, itl, err in zip(
        starts,
        result["ttfts"],
        result["itls"],
        result.get("errors") or [""] * len(starts),
        strict=False,
    ):
        if not ttft:
            rows.append({"t0": st + offset, "done": False, "recv": []})
            continue
        t = st + offset + ttft
        recv = [t]
        for g in itl:
            t += g
            recv.append(t)
        rows.append({"t0": st + offset, "done": not err, "recv": recv})
    return rows


def join_emitter(rows: list[dict[str, Any]], emitted: list[dict[str, Any]]) -> int:
    """Give each request the write epochs of its emitter stream (``emit``), in place.

    The emitter's streams and vLLM's requests are paired in start order (requests reach the
    emitter in the order they are sent, to within a reorder of streams sent together, whose
    schedules then differ by well under a millisecond). Returns the requests left unpaired.
    """
    es = sorted((s for s in emitted if s.get("w")), key=lambda s: s["t_req"])
    rs = sorted((r for r in rows if r["recv"]), key=lambda r: r["t0"])
    unpaired = 0
    j = 0
    for r in rs:
        # the first emitter stream that began after this request was sent
        while j < len(es) and es[j]["t_req"] < r["t0"] - 0.001:
            j += 1
        if j == len(es):
            unpaired += 1
            r["done"] = False
            continue
        w = es[j]["w"]
        j += 1
        n = min(len(w), len(r["recv"]))
        if n < len(r["recv"]):
            r["done"] = False
        r["recv"], r["emit"] = r["recv"][:n], w[:n]
    for r in rows:
        r.setdefault("emit", [])
    return unpaired


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--venv", type=Path, required=True)
    p.add_argument("--tokenizer", type=Path, required=True)
    p.add_argument("--url", required=True)
    p.add_argument("--users", type=int, required=True)
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--max-tokens", type=int, default=100)
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    per_stream = a.max_tokens * PERIOD
    prompts = a.users * max(1, round(a.seconds / per_stream))
    offset = time.time() - time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="vllm-peer-") as d:
        cmd = vllm_cmd(a.venv, a.url, a.users, prompts, a.max_tokens, a.tokenizer, Path(d))
        rc = subprocess.run(cmd, check=False).returncode
        path = Path(d) / "result.json"
        if rc != 0 or not path.exists():
            print(f"vllm bench serve exited {rc}", file=sys.stderr)
            return rc or 1
        rows = to_dump(json.loads(path.read_text()), offset)
    a.out.write_text(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
