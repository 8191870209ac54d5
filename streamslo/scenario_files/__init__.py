"""Scenario files shipped with the package: ``--scenario nightly`` is
``streamslo/scenario_files/nightly.toml`` (``docs/scenarios.md``). The repository keeps them
under ``locustfiles/scenarios/`` too (links to these)."""

from __future__ import annotations

from pathlib import Path

from streamslo.errors import BadInputError

__all__ = ["FOLDER", "packaged", "resolve_scenario"]

FOLDER = Path(__file__).resolve().parent


def packaged() -> dict[str, Path]:
    """Name -> file of every packaged scenario."""
    return {p.stem: p for p in sorted(FOLDER.glob("*.toml"))}


def resolve_scenario(value: str) -> str:
    """The file ``--scenario VALUE`` means: a path that exists, else a packaged scenario's name
    (``nightly``, ``nightly.toml``).

    Raises:
        BadInputError: neither (the message lists the packaged names).
    """
    if Path(value).exists():
        return value
    name = Path(value).name.removesuffix(".toml")
    found = packaged().get(name)
    if found is not None:  # also `locustfiles/scenarios/nightly.toml` outside the repository
        return str(found)
    import difflib

    close = difflib.get_close_matches(name, list(packaged()), n=1)
    hint = f"; did you mean {close[0]}?" if close else ""
    raise BadInputError(
        f"--scenario {value}: no such file, and no packaged scenario of that name "
        f"(packaged: {', '.join(packaged())}){hint}"
    )
