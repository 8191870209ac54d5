"""Waiting for a child process to say it is ready, without trusting it to ever say so.

A child we start (the proxy, a test server) prints one line when it listens. Reading that line
with a plain ``readline`` would hang forever on a child that stalls before printing, or
prints without a newline; this reads with a deadline instead, and notices a child that died.
"""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import time

__all__ = ["read_first_line"]


def read_first_line(
    process: subprocess.Popen[bytes] | subprocess.Popen[str], timeout: float, what: str
) -> tuple[str, str]:
    """The child's first stdout line, and whatever it printed after it in the same reads.

    Args:
        process: started with ``stdout=subprocess.PIPE``.
        timeout: seconds to wait for the whole line.
        what: the child's name, for the error message.

    Raises:
        RuntimeError: the child exited, or printed no complete line in time.
    """
    assert process.stdout is not None
    fd = process.stdout.fileno()
    deadline = time.monotonic() + timeout
    raw = b""
    while b"\n" not in raw:
        left = deadline - time.monotonic()
        if left <= 0 or process.poll() is not None:
            raise RuntimeError(f"{what} did not start (rc={process.poll()}, said {raw!r})")
        if select.select([fd], [], [], left)[0]:
            chunk = os.read(fd, 4096)
            if not chunk:  # its stdout closed: it is exiting; poll() says so next turn
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(timeout=max(0.0, deadline - time.monotonic()))
                continue
            raw += chunk
    first, _, rest = raw.decode(errors="replace").partition("\n")
    return first, rest
