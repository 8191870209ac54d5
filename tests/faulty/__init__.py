"""A deliberately faulty streaming server that produces every stream outcome on purpose.

* :mod:`tests.faulty.server` — the server and its catalogue (``SCENARIOS``, ``EXPECTED``);
  run it with ``python -m tests.faulty.server --port N``.
* :mod:`tests.faulty.process` — ``start_faulty_server()``, running it as a subprocess.
* :mod:`tests.faulty.fixtures` — the session-scoped ``faulty_server`` pytest fixture.

The names below are imported lazily, so that ``python -m tests.faulty.server`` does not
import the server module twice.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "EXPECTED",
    "OUTCOMES",
    "REQUEST_TIMEOUT_S",
    "SCENARIOS",
    "STALL_TIMEOUT_S",
    "UNSETTLED",
    "WS_HANDSHAKE_SCENARIOS",
    "FaultyServer",
    "Scenario",
    "start_faulty_server",
    "unused_port",
]

_PROCESS = {"FaultyServer", "start_faulty_server", "unused_port"}


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = "tests.faulty.process" if name in _PROCESS else "tests.faulty.server"
    return getattr(importlib.import_module(module), name)
