"""Whether the ``server`` extra is installed, asked without importing any of it.

The bundled server needs torch, Starlette, Uvicorn, Gunicorn and prometheus-client, which
``pip install streamslo`` leaves out (testing one's own server needs none of them). Callers ask
before the first heavy import, so a missing piece is one clear sentence, not a traceback.
"""

from __future__ import annotations

import importlib.util

from streamslo.errors import ServerExtraMissing

__all__ = ["SERVER_MODULES", "missing_server_modules", "require_server_extra"]

#: Import names of the ``server`` extra's packages (``pyproject.toml``).
SERVER_MODULES = (
    "torch",
    "starlette",
    "uvicorn",
    "gunicorn",
    "uvicorn_worker",
    "prometheus_client",
)


def missing_server_modules() -> list[str]:
    """The modules of the ``server`` extra that cannot be imported here."""
    missing = []
    for name in SERVER_MODULES:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a broken install, or a module set to None
            found = False
        if not found:
            missing.append(name)
    return missing


def require_server_extra(what: str = "the bundled server") -> None:
    """Raise unless the ``server`` extra is installed.

    Raises:
        ServerExtraMissing: names the missing modules and the install command.
    """
    missing = missing_server_modules()
    if missing:
        raise ServerExtraMissing(
            f"{what} needs the 'server' extra ({', '.join(missing)} not installed): "
            "pip install 'streamslo[server]'"
        )
