#!/usr/bin/env python3
"""The streamslo image's entrypoint (``/usr/local/bin/streamslo-pod``): one image for the master,
the workers, the bundled server and any streamslo command (docs/kubernetes.md).

Locust's Kubernetes operator starts every pod of a ``LocustTest`` from the image's entrypoint,
with one ``args`` string for all of them:

- the master Job: ``ENTRYPOINT --master ARGS``;
- each worker: ``ENTRYPOINT --worker --master-host <name>-master ARGS``.

ARGS are ``streamslo run``'s options (the load, the target, ``--expect-workers``, ``--out``)
plus ``-f FILE``, the locustfile the operator mounts. This entrypoint turns them into:

- master: ``streamslo run --master --master-bind-host * ARGS`` (without ``-f``), which waits
  for its workers (refusing any of another version or clock), runs the load, writes and
  finalizes the one results directory, and exits with the verdict (0 every threshold held, 99
  one failed, 2 bad input). The results stay in the pod until they are taken: the entrypoint
  then waits, at most ``STREAMSLO_RESULTS_HOLD`` seconds (600 by default, 0: not at all), for
  a file ``<out>.taken`` (``kubectl cp`` the directory, then ``kubectl exec ... touch
  <out>.taken``), and exits with the run's code: the Job's phase is the verdict;
- worker: ``locust -f FILE --worker --master-host HOST --master-port PORT`` and the worker's own
  credentials (``--api-key-env``, ``--header-file``): every load option reaches a worker from
  its master when the test starts;
- anything else (``streamslo serve ...``, ``locust ...``, ``sh``): run as given, so Docker
  Compose's and the Helm chart's commands work unchanged.

Standard library only: it runs before anything else in the container.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

#: Options of ARGS that a worker keeps (its own credentials); every other one is the master's.
WORKER_OPTIONS = ("--api-key-env", "--header-file")
#: The master's port, the operator's Service port for it.
MASTER_PORT = "5557"
#: Where the results go when ARGS name no ``--out``.
DEFAULT_OUT = "/results/run"
#: The locustfile when ARGS name none (the image's own copy).
DEFAULT_LOCUSTFILE = "/app/locustfiles/streaming_locustfile.py"


def _split(args: Sequence[str]) -> list[tuple[str, str | None]]:
    """ARGS as (option, value) pairs; ``--opt=value`` split; a bare word is (word, None)."""
    out: list[tuple[str, str | None]] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a.startswith("-") and "=" in a:
            k, v = a.split("=", 1)
            out.append((k, v))
            i += 1
        elif a.startswith("-") and i + 1 < len(args) and not args[i + 1].startswith("--"):
            out.append((a, args[i + 1]))
            i += 2
        else:
            out.append((a, None))
            i += 1
    return out


def _flat(pairs: Sequence[tuple[str, str | None]]) -> list[str]:
    return [x for k, v in pairs for x in ((k,) if v is None else (k, v))]


def master_command(args: Sequence[str]) -> tuple[list[str], str]:
    """``streamslo run --master ...`` for the operator's master ARGS, and its results directory."""
    pairs = [(k, v) for k, v in _split(args) if k not in ("-f", "--locustfile")]
    keys = {k for k, _ in pairs}
    if "--out" not in keys:
        pairs.append(("--out", DEFAULT_OUT))
    if "--master-bind-host" not in keys:
        pairs.append(("--master-bind-host", "*"))  # the Service reaches the pod's own address
    out = next(v for k, v in pairs if k == "--out")
    assert out is not None
    return ["streamslo", "run", "--master", *_flat(pairs)], out


def worker_command(args: Sequence[str]) -> list[str]:
    """``locust --worker ...`` for the operator's worker ARGS (``--master-host`` first)."""
    pairs = _split(args)
    values = {k: v for k, v in pairs}
    locustfile = values.get("-f") or values.get("--locustfile") or DEFAULT_LOCUSTFILE
    host = values.get("--master-host")
    if not host:
        raise SystemExit("streamslo-pod --worker: no --master-host (the operator gives it)")
    port = values.get("--master-port") or values.get("--master-bind-port") or MASTER_PORT
    own = [(k, v) for k, v in pairs if k in WORKER_OPTIONS]
    return [
        "locust",
        "-f",
        locustfile,
        "--worker",
        "--master-host",
        host,
        "--master-port",
        port,
        *_flat(own),
    ]


def _hold(out: str) -> None:
    """Keep the pod (and its results) until ``<out>.taken`` appears, or the hold is over."""
    hold = float(os.environ.get("STREAMSLO_RESULTS_HOLD", "600") or 0)
    marker = Path(f"{out}.taken")
    if hold <= 0 or not Path(out).exists():
        return
    print(
        f"streamslo-pod: the results are in {out}; take them (kubectl cp POD:{out} ./run), then "
        f"touch {marker} (kubectl exec POD -- touch {marker}); waiting at most {hold:g} s",
        flush=True,
    )
    deadline = time.monotonic() + hold
    while time.monotonic() < deadline and not marker.exists():
        time.sleep(0.5)


def _run(argv: list[str]) -> int:
    exe = shutil.which(argv[0]) or argv[0]
    return subprocess.call([exe, *argv[1:]])


def main(argv: Sequence[str]) -> int:
    """Dispatch on the first word (see the module)."""
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    if argv[0] == "--master":
        cmd, out = master_command(argv[1:])
        print("streamslo-pod: " + " ".join(cmd), flush=True)
        code = _run(cmd)
        print(f"streamslo run exited with {code}", flush=True)
        _hold(out)
        return code
    if argv[0] == "--worker":
        cmd = worker_command(argv[1:])
        print("streamslo-pod: " + " ".join(cmd), flush=True)
        os.execvp(cmd[0], cmd)
    os.execvp(argv[0], list(argv))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
