"""pytest plugin of streamslo (placeholder while the real plugin is written; inert)."""

from __future__ import annotations

__all__: list[str] = []
