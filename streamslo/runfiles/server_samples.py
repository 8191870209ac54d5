"""What the parent records of the target server, read back by the Locust side (the live
windows' ``server_rss_mb``) and the reports: ``server/resources.jsonl`` (written by
:class:`streamslo.run.evidence.ServerEvidence`)."""

from __future__ import annotations

import json

from streamslo.results.layout import Layout

__all__ = ["latest_server_rss"]


def latest_server_rss(layout: Layout) -> float | None:
    """The server's RSS in bytes at its last sample (``server/resources.jsonl``), or None."""
    path = layout.server_resources
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - 4096))
            tail = f.read().splitlines()
    except OSError:
        return None
    for line in reversed(tail):
        try:
            value = json.loads(line).get("rss_bytes")
        except (ValueError, AttributeError):
            continue
        return float(value) if isinstance(value, (int, float)) else None
    return None
