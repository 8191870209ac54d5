"""The process's open-files limit: every stream holds a socket, so a process that serves, proxies
or generates hundreds of streams needs more than the common default soft limit of 1024."""

from __future__ import annotations

import resource

__all__ = ["raise_open_files"]


def raise_open_files(want: int) -> int:
    """Raise the soft ``RLIMIT_NOFILE`` to ``want``, or to the hard limit when that is lower;
    never lowers it. Returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < want:
        target = want if hard == resource.RLIM_INFINITY else min(want, hard)
        if target > soft:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
    return want if soft == resource.RLIM_INFINITY else soft
