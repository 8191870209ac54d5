"""The co-located training job of the ``training-contention`` fault (incident C).

Run as ``python -m streamslo.server.trainer --parent-pid P --threads N --nice K``: torch
training steps of a small MLP on random data, forever, until process ``P`` is no longer its
parent (it polls ``getppid``, so a Gunicorn worker killed by SIGKILL does not leave it behind).
The parent's pid comes from the spawner: read here after the slow torch import, it would be
the reaper's pid already when the worker died during that import, and the trainer an orphan.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Train until the parent exits."""
    p = argparse.ArgumentParser(prog="python -m streamslo.server.trainer")
    p.add_argument(
        "--parent-pid",
        type=int,
        default=None,
        help="exit when this process is no longer the parent (default: the parent now)",
    )
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--nice", type=int, default=0)
    p.add_argument("--device", default="cpu")
    p.add_argument(
        "--duty",
        type=float,
        default=0.6,
        help="fraction of wall time spent in training steps (the rest: data loading)",
    )
    args = p.parse_args(argv)
    parent = os.getppid() if args.parent_pid is None else args.parent_pid
    if os.getppid() != parent:
        return 0
    if args.nice:
        os.nice(args.nice)
    import torch  # heavy: only in the child

    torch.set_num_threads(args.threads)
    dev = torch.device(args.device)
    model = torch.nn.Sequential(
        torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 512)
    ).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(256, 512, device=dev)
    last_check = 0.0
    while True:
        t0 = time.perf_counter()
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        busy = time.perf_counter() - t0
        if args.duty < 1:
            time.sleep(busy * (1 - args.duty) / max(args.duty, 0.01))
        if time.monotonic() - last_check > 0.5:
            last_check = time.monotonic()
            if os.getppid() != parent:
                return 0


if __name__ == "__main__":
    sys.exit(main())
