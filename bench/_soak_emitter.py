"""The benchmark emitter (``bench/_emitter.py``) for long runs: it keeps no write times and
forgets finished streams, so that its own memory stays flat for hours. Same options."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _emitter


class _Discard(list):  # type: ignore[type-arg]
    def append(self, _: Any) -> None:
        pass


_init = _emitter.Stream.__init__
_add = _emitter.Emitter.add


def _stream_init(self: Any, *args: Any, **kwargs: Any) -> None:
    _init(self, *args, **kwargs)
    self.writes = _Discard()


def _emitter_add(self: Any, *args: Any, **kwargs: Any) -> None:
    _add(self, *args, **kwargs)
    if len(self.streams) > 4096:  # only the dump (not used here) reads them
        del self.streams[:2048]


_emitter.Stream.__init__ = _stream_init  # type: ignore[method-assign]
_emitter.Emitter.add = _emitter_add  # type: ignore[method-assign]

if __name__ == "__main__":
    _emitter.main()
