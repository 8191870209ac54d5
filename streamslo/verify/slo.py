"""The plugin's settings and per-test SLO overrides, as typed objects (no pytest import).

Every setting comes from, in this order (the first that is set wins):

1. the command line (``--streamslo-run-dir``, ``--streamslo-slo``, ``--streamslo-allow-invalid``,
   ``--streamslo-allow-incomplete``, ``--streamslo-probe-url``; every flag is prefixed, as
   pytest-benchmark's are, so the plugin never takes a name that another plugin or the
   project's own conftest uses);
2. the environment (``STREAMSLO_RUN_DIR``, ``STREAMSLO_SLO``, ``STREAMSLO_ALLOW_INVALID``,
   ``STREAMSLO_ALLOW_INCOMPLETE``, ``STREAMSLO_PROBE_URL``);
3. the ini file (``streamslo_run_dir``, ``streamslo_slo``, ``streamslo_allow_invalid``,
   ``streamslo_allow_incomplete``, ``streamslo_probe_url``; paths relative to the ini file);
4. the default (no run directory, the incidents' SLO, invalid and unfinalized runs fail, no
   probe target).

A test overrides the SLO with
``@pytest.mark.streamslo(file=..., thresholds=..., allow_invalid=..., allow_incomplete=...)``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from streamslo.slo.thresholds import SLO

__all__ = [
    "MARKER_KWARGS",
    "OPTIONS",
    "MarkerOverride",
    "Option",
    "Settings",
    "parse_bool",
    "parse_marker",
    "resolve_settings",
]


@dataclass(frozen=True, slots=True)
class Option:
    """One setting and the three places it can be given."""

    name: str
    """The attribute of :class:`Settings`; the flag, variable and ini key derive from it."""
    help: str
    is_path: bool = False
    is_bool: bool = False

    @property
    def flag(self) -> str:
        """The command-line flag: ``--streamslo-run-dir``."""
        return "--streamslo-" + self.name.replace("_", "-")

    @property
    def env(self) -> str:
        """The environment variable: ``STREAMSLO_RUN_DIR``."""
        return "STREAMSLO_" + self.name.upper()

    @property
    def ini(self) -> str:
        """The ini key: ``streamslo_run_dir``."""
        return "streamslo_" + self.name


OPTIONS: tuple[Option, ...] = (
    Option(
        "run_dir",
        "results directory of a streamslo run to check (streamslo run --out DIR)",
        is_path=True,
    ),
    Option(
        "slo",
        "SLO file (TOML, k6 threshold syntax); default: the incidents' SLO",
        is_path=True,
    ),
    Option(
        "allow_invalid",
        "accept a run whose load generator was saturated (run.json valid: false)",
        is_bool=True,
    ),
    Option(
        "allow_incomplete",
        "accept a run that was not finalized (run.json complete: false; see streamslo finalize)",
        is_bool=True,
    ),
    Option(
        "probe_url",
        "base URL of a live endpoint for the single-stream probes (streamslo.verify.checks.test_probes)",
    ),
)


@dataclass(frozen=True, slots=True)
class Settings:
    """The plugin's resolved settings."""

    run_dir: Path | None = None
    slo: Path | None = None
    """The SLO file; None means the incidents' SLO."""
    allow_invalid: bool = False
    allow_incomplete: bool = False
    probe_url: str | None = None
    sources: tuple[tuple[str, str], ...] = ()
    """``(setting, where it came from)`` for every setting that was given."""

    @property
    def active(self) -> bool:
        """Whether any streamslo setting was given (the plugin is inert otherwise)."""
        return bool(self.sources)

    def source_of(self, name: str) -> str:
        """Where a setting came from: ``--slo``, ``STREAMSLO_SLO``, ``ini streamslo_slo``, ``default``."""
        return dict(self.sources).get(name, "default")


_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off", ""})


def parse_bool(text: str, source: str) -> bool:
    """Parse a boolean setting.

    Args:
        text: ``1/true/yes/on`` or ``0/false/no/off`` (any case; empty is false).
        source: where the text came from, for the error.

    Returns:
        The boolean.

    Raises:
        ValueError: anything else; the message names ``source``.
    """
    low = text.strip().lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise ValueError(f"{source}: expected true or false (1/0, yes/no, on/off), got {text!r}")


def resolve_settings(
    cli: Mapping[str, object],
    env: Mapping[str, str],
    ini: Mapping[str, object],
    *,
    ini_dir: Path | None = None,
) -> Settings:
    """Resolve every setting: command line > environment > ini > default.

    Args:
        cli: setting name -> value from the command line (None when not given).
        env: the environment (``os.environ``).
        ini: ini key -> value as pytest returns it (``""`` or None when not set).
        ini_dir: the ini file's folder: relative ini paths are resolved against it.

    Returns:
        The :class:`Settings`.

    Raises:
        ValueError: a boolean setting that is not a boolean (the message names its source).
    """
    values: dict[str, Any] = {}
    sources: list[tuple[str, str]] = []
    for opt in OPTIONS:
        raw: Any = cli.get(opt.name)
        where = opt.flag
        from_ini = False
        if raw is None or raw == "":
            raw, where = env.get(opt.env), opt.env
        if raw is None or raw == "":
            raw, where, from_ini = ini.get(opt.ini), f"ini {opt.ini}", True
        if raw is None or raw == "" or raw == []:
            continue
        if opt.is_bool:
            value: Any = raw if isinstance(raw, bool) else parse_bool(str(raw), where)
        elif opt.is_path:
            path = Path(os.path.expanduser(str(raw)))
            if from_ini and ini_dir is not None and not path.is_absolute():
                path = ini_dir / path
            value = path
        else:
            value = str(raw)
        values[opt.name] = value
        sources.append((opt.name, where))
    return Settings(**values, sources=tuple(sources))


#: Keyword arguments ``@pytest.mark.streamslo`` accepts.
MARKER_KWARGS: tuple[str, ...] = ("file", "thresholds", "allow_invalid", "allow_incomplete")


@dataclass(frozen=True, slots=True)
class MarkerOverride:
    """What one ``@pytest.mark.streamslo`` changes for its test."""

    slo: SLO | None = None
    """The :class:`streamslo.slo.thresholds.SLO` to check instead of the session's, or None."""
    allow_invalid: bool | None = None
    """Overrides the session's ``allow_invalid`` when not None."""
    allow_incomplete: bool | None = None
    """Overrides the session's ``allow_incomplete`` when not None."""


def parse_marker(
    args: tuple[object, ...], kwargs: Mapping[str, object], where: str, base_dir: Path
) -> MarkerOverride:
    """Validate and parse the arguments of ``@pytest.mark.streamslo``.

    Args:
        args: positional arguments (none are accepted).
        kwargs: ``file`` (an SLO file, relative to ``base_dir``), ``thresholds`` (a dict shaped
            like the ``[thresholds]`` table), ``allow_invalid`` and/or ``allow_incomplete``
            (bools).
        where: the test's node id, for messages.
        base_dir: the folder of the test module.

    Returns:
        The :class:`MarkerOverride`.

    Raises:
        ValueError: positional arguments, unknown keywords, ``file`` with ``thresholds``, or a
            value of the wrong type.
        streamslo.errors.SLOFileError: the SLO file or table does not parse.
    """
    from streamslo.slo.thresholds import load_slo, parse_thresholds_table

    label = f"{where}: @pytest.mark.streamslo"
    if args:
        raise ValueError(f"{label} takes keyword arguments only ({', '.join(MARKER_KWARGS)})")
    unknown = sorted(set(kwargs) - set(MARKER_KWARGS))
    if unknown:
        raise ValueError(
            f"{label} got unknown keyword(s) {', '.join(unknown)}; expected {', '.join(MARKER_KWARGS)}"
        )
    if "file" in kwargs and "thresholds" in kwargs:
        raise ValueError(f"{label}: give file or thresholds, not both")
    slo = None
    if "file" in kwargs:
        file = kwargs["file"]
        if not isinstance(file, (str, os.PathLike)):
            raise ValueError(f"{label}: file must be a path, got {file!r}")
        path = Path(file)
        slo = load_slo(path if path.is_absolute() else base_dir / path)
    elif "thresholds" in kwargs:
        table = kwargs["thresholds"]
        if not isinstance(table, Mapping):
            raise ValueError(
                f"{label}: thresholds must be a dict like {{'itl_ms': ['p(99)<200']}}, got {table!r}"
            )
        slo = parse_thresholds_table(table, source=label)
    flags: dict[str, bool | None] = {}
    for name in ("allow_invalid", "allow_incomplete"):
        value = kwargs.get(name)
        if value is not None and not isinstance(value, bool):
            raise ValueError(f"{label}: {name} must be True or False, got {value!r}")
        flags[name] = value
    return MarkerOverride(
        slo=slo,
        allow_invalid=flags["allow_invalid"],
        allow_incomplete=flags["allow_incomplete"],
    )
