"""The building blocks of the run-options table (:mod:`streamslo.options.run_options`): how a value
is read and written (:class:`ValueType` and its kinds), and one row (:class:`RunOption`).

A value type reads text (a command line, Locust's web UI form) and the native values of a TOML
scenario alike, and raises :class:`ValueError` with a message that says what was expected; the
caller adds where the value came from (a flag, a file and key).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from streamslo.errors import BadInputError
from streamslo.options.units import (
    format_duration,
    parse_duration,
    parse_float,
    parse_fraction,
    parse_int,
)

__all__ = [
    "OPTION_KEY",
    "Choice",
    "Duration",
    "ForcingValue",
    "Fraction",
    "IntList",
    "Integer",
    "Number",
    "Parsed",
    "PathValue",
    "RunOption",
    "Stages",
    "Switch",
    "Text",
    "TextList",
    "ValueType",
    "flag_option",
    "option",
]


# ------------------------------------------------------------------------------ value types
def _real(value: object) -> float | str:
    """A number's value as given (float() converts it); TypeError for anything else."""
    if isinstance(value, (int, float, str)):
        return value
    raise TypeError(f"not a number: {value!r}")


def _items(value: object) -> tuple[str, ...]:
    """A text list's items (None or empty: none)."""
    if not value:
        return ()
    if not isinstance(value, Iterable):
        raise TypeError(f"not a list of text: {value!r}")
    return tuple(str(v) for v in value)


@dataclass(frozen=True)
class ValueType:
    """How an option's value is read (from text or a TOML value) and written for Locust."""

    _metavar: ClassVar[str] = "TEXT"
    locust_type: ClassVar[type] = str
    """The type Locust's parser (and its web UI form) keeps the value as."""

    @property
    def metavar(self) -> str:
        """The placeholder in ``--help``."""
        return self._metavar

    def parse(self, raw: object) -> object:
        """The typed value. Raises ValueError (the message says what was expected)."""
        return self.text(raw)

    @staticmethod
    def text(raw: object) -> str:
        """``raw`` as stripped text. Raises ValueError when it is not text."""
        if not isinstance(raw, str):
            raise ValueError(f"expected text, got {raw!r}")
        return raw.strip()

    def wire(self, value: object) -> object:
        """The value as Locust's parser keeps it and as a command-line argument."""
        return value

    def describe(self) -> str:
        """The kind of value, for the reference documentation."""
        return "text"

    def show(self, value: object) -> str:
        """The value as a person would type it (help texts, documentation)."""
        return str(self.wire(value))


@dataclass(frozen=True)
class Text(ValueType):
    """Text; with ``optional``, empty text means "not given" (None)."""

    optional: bool = True
    name: str = "TEXT"

    @property
    def metavar(self) -> str:
        return self.name

    def parse(self, raw: object) -> str | None:
        text = self.text(raw)
        return (text or None) if self.optional else text

    def wire(self, value: object) -> object:
        return "" if value is None else value

    def describe(self) -> str:
        return self.name.lower()


@dataclass(frozen=True)
class PathValue(ValueType):
    """A file system path; empty means "not given"."""

    name: str = "DIR"

    @property
    def metavar(self) -> str:
        return self.name

    def parse(self, raw: object) -> Path | None:
        text = self.text(str(raw) if isinstance(raw, Path) else raw)
        return Path(text) if text else None

    def wire(self, value: object) -> object:
        return "" if value is None else str(value)

    def describe(self) -> str:
        return "path"


@dataclass(frozen=True)
class Integer(ValueType):
    minimum: int | None = None
    _metavar: ClassVar[str] = "N"
    locust_type: ClassVar[type] = int

    def parse(self, raw: object) -> int:
        return parse_int(raw, self.minimum)

    def describe(self) -> str:
        return "integer" if self.minimum is None else f"integer ≥ {self.minimum}"


@dataclass(frozen=True)
class ForcingValue(ValueType):
    """``--forced-length``: ``auto``, ``none``, or the means (``ignore_eos``, ``min_tokens``,
    ``min_new_tokens``, ``logit_bias``), several joined by ``+``; kept as canonical text."""

    _metavar: ClassVar[str] = "auto|none|MEANS[+MEANS]"

    def parse(self, raw: object) -> str:
        from streamslo.stream.truth import forcing_text, parse_forcing

        text = self.text(raw)
        if text in ("auto", ""):
            return "auto"
        return forcing_text(parse_forcing(text))

    def describe(self) -> str:
        return "`auto`, `none`, or `ignore_eos`, `min_tokens`, `min_new_tokens`, `logit_bias` (several: `a+b`)"


@dataclass(frozen=True)
class IntList(ValueType):
    """Whole numbers ≥ 0: ``2`` or ``2,32000`` as text, a number or a list of numbers in a
    scenario; kept as a tuple, as comma-separated text in Locust."""

    _metavar: ClassVar[str] = "ID[,ID...]"

    def parse(self, raw: object) -> tuple[int, ...]:
        if isinstance(raw, bool):
            raise ValueError(f"expected whole numbers, got {raw!r}")
        if isinstance(raw, int):
            items: list[object] = [raw]
        elif isinstance(raw, str):
            items = [p for p in raw.replace(" ", ",").split(",") if p]
        elif isinstance(raw, (list, tuple)):
            items = list(raw)
        else:
            raise ValueError(f"expected whole numbers, got {raw!r}")
        return tuple(parse_int(i, 0) for i in items)

    def wire(self, value: object) -> object:
        if isinstance(value, (list, tuple)):
            return ",".join(str(v) for v in value)
        return "" if value is None else str(value)

    def describe(self) -> str:
        return "whole numbers, comma-separated"


@dataclass(frozen=True)
class Number(ValueType):
    minimum: float | None = None
    above: bool = False
    """``minimum`` itself is not allowed."""
    _metavar: ClassVar[str] = "X"
    locust_type: ClassVar[type] = float

    def parse(self, raw: object) -> float:
        return parse_float(raw, self.minimum, above=self.above)

    def wire(self, value: object) -> object:
        return float(_real(value))

    def show(self, value: object) -> str:
        return f"{value:g}"

    def describe(self) -> str:
        if self.minimum is None:
            return "number"
        return f"number {'>' if self.above else '≥'} {self.minimum:g}"


@dataclass(frozen=True)
class Fraction(Number):
    _metavar: ClassVar[str] = "FRACTION"

    def parse(self, raw: object) -> float:
        return parse_fraction(raw)

    def describe(self) -> str:
        return "fraction 0–1"


@dataclass(frozen=True)
class Duration(ValueType):
    """Seconds, or ``500ms``/``30s``/``5m``/``1h``/``1m30s``; kept as text in Locust."""

    _metavar: ClassVar[str] = "DURATION"

    def parse(self, raw: object) -> float:
        if not isinstance(raw, (str, int, float)):
            raise ValueError(f"not a duration: {raw!r}")
        if str(raw).strip().startswith("-"):
            raise ValueError(f"must be positive, got {raw}")
        return parse_duration(raw)

    def wire(self, value: object) -> object:
        return format_duration(float(_real(value)))

    def describe(self) -> str:
        return "duration"


@dataclass(frozen=True)
class Parsed(ValueType):
    """A value read by a parse function of its own (a size, a rate, an address), which raises
    :class:`ValueError` with what was expected."""

    parser: Callable[[str], object] = str
    name: str = "VALUE"
    kind: str = "text"
    """What the docs call the value."""
    shown: Callable[[Any], str] = str
    """The value as a person would type it (a default in the help and the docs)."""

    @property
    def metavar(self) -> str:
        return self.name

    def parse(self, raw: object) -> object:
        import argparse

        try:
            return self.parser(self.text(raw))
        except argparse.ArgumentTypeError as exc:  # the parse functions argparse already takes
            raise ValueError(str(exc)) from None

    def describe(self) -> str:
        return self.kind

    def show(self, value: object) -> str:
        return self.shown(value)


@dataclass(frozen=True)
class Choice(ValueType):
    choices: tuple[str, ...] = ()
    empty: bool = False
    """Empty text is allowed (and means "none")."""

    @property
    def metavar(self) -> str:
        return "{" + ",".join(self.choices) + "}"

    def parse(self, raw: object) -> str:
        text = self.text(raw)
        if text in self.choices or (self.empty and not text):
            return text
        raise ValueError(f"must be one of {', '.join(self.choices)}, not {raw!r}")

    def describe(self) -> str:
        return " | ".join(f"`{c}`" for c in self.choices)


@dataclass(frozen=True)
class Switch(ValueType):
    """On or off: a flag on a command line, ``true``/``false`` in a scenario."""

    locust_type: ClassVar[type] = bool

    def parse(self, raw: object) -> bool:
        if not isinstance(raw, bool):
            raise ValueError(f"expected true or false, got {raw!r}")
        return raw

    def describe(self) -> str:
        return "switch"


@dataclass(frozen=True)
class TextList(ValueType):
    """Repeatable text (a flag given several times, a list of strings in a scenario)."""

    name: str = "TEXT"
    choices: tuple[str, ...] = ()
    """The values allowed (empty: any text)."""
    locust_type: ClassVar[type] = list

    @property
    def metavar(self) -> str:
        return self.name

    def parse(self, raw: object) -> tuple[str, ...]:
        items = [raw] if isinstance(raw, str) else raw
        if not isinstance(items, (list, tuple)) or not all(isinstance(i, str) for i in items):
            raise ValueError(f"expected a list of strings, got {raw!r}")
        bad = [i for i in items if self.choices and i not in self.choices]
        if bad:
            raise ValueError(f"must be one of {', '.join(self.choices)}, not {bad[0]!r}")
        return tuple(items)

    def describe(self) -> str:
        if self.choices:
            return "repeatable: " + " | ".join(f"`{c}`" for c in self.choices)
        return "repeatable text"


@dataclass(frozen=True)
class Stages(ValueType):
    """k6-style stages: ``"30s:50,1m:50,10s:0"``, or in a scenario a list of
    ``{duration = "30s", target = 50}`` tables."""

    _metavar: ClassVar[str] = "STAGES"

    def parse(self, raw: object) -> str:
        from streamslo.options.stages import parse_stages

        if isinstance(raw, list):
            try:
                raw = ",".join(f"{s['duration']}:{s['target']}" for s in raw)
            except (TypeError, KeyError):
                raise ValueError("stages must be tables with duration and target") from None
        text = self.text(raw)
        if text:
            try:
                parse_stages(text)
            except BadInputError as exc:
                raise ValueError(str(exc).removeprefix("--stages: ")) from None
        return text

    def describe(self) -> str:
        return "stages"


# ------------------------------------------------------------------------------- the row
@dataclass(frozen=True, slots=True)
class RunOption:
    """One row of the table: an option and every place it applies."""

    name: str
    """The field of :class:`RunOptions` (and of ``RunConfig`` and ``LoadOptions``)."""
    default: Any
    type: ValueType
    help: str
    flag: str
    """The ``streamslo run`` flag (for an inverted switch, the flag that turns it off)."""
    cli: bool = True
    """A ``streamslo run`` and ``streamslo soak`` argument."""
    scenario_key: str | None = None
    """The key in a scenario's ``[load]`` table; None: not a scenario key."""
    locust_flag: str | None = None
    """The option the stream users add to Locust's parser; None: not one."""
    locust_native: str | None = None
    """Locust's own option that ``streamslo run`` translates this one to (documentation)."""
    web_ui: bool = True
    """Shown in Locust's web UI start form (a secret never is)."""
    secret: bool = False
    """Never on a command line or in the web UI: ``streamslo run`` resolves it and hands Locust
    the result through the environment."""
    inverted: bool = False
    """A switch that is on by default; ``flag`` (``--no-...``) turns it off."""
    hidden: bool = False
    """Internal to ``streamslo run``: left out of Locust's ``--help``."""
    group: str = ""
    """The ``--help`` section it is listed in (empty: the command's own)."""
    positional: bool = False
    """A positional argument (``URL``, ``DIR``), not a flag."""
    required: bool = False
    """The declaration gives no default: the command needs it."""
    short: str = ""
    """A one-letter alias (``-q``)."""
    exclusive: str = ""
    """Options that name the same set here exclude one another on a command line."""

    @property
    def locust_dest(self) -> str | None:
        """The attribute of Locust's parsed options."""
        return None if self.locust_flag is None else self.locust_flag[2:].replace("-", "_")

    @property
    def forwarded(self) -> bool:
        """``streamslo run`` passes it on Locust's command line."""
        return self.locust_flag is not None and not self.secret

    @property
    def in_web_ui(self) -> bool:
        return self.locust_flag is not None and self.web_ui and not self.secret

    def help_text(self) -> str:
        """The help, with the default when it says something."""
        d = self.default
        if isinstance(self.type, Switch) or d is None or d == "" or d == ():
            return self.help
        return f"{self.help} (default {self.type.show(d)})"

    def from_wire(self, raw: object) -> object:
        """The typed value from Locust's parsed options.

        Raises:
            BadInputError: a bad value (the message names the flag).
        """
        if isinstance(self.type, Switch):
            return not raw if self.inverted else bool(raw)
        if isinstance(self.type, TextList):
            return tuple(_items(raw))
        if raw is None:
            return self.default
        try:
            return self.type.parse(raw)
        except ValueError as exc:
            raise BadInputError(f"{self.locust_flag}: {exc}") from None

    def argv(self, value: object) -> list[str]:
        """The Locust command-line arguments for ``value``."""
        assert self.locust_flag is not None
        if isinstance(self.type, Switch):
            on = not value if self.inverted else bool(value)  # the flag is given
            return [self.locust_flag] if on else []
        if isinstance(self.type, TextList):
            return [a for item in _items(value) for a in (self.locust_flag, item)]
        if value is None:
            return []
        return [self.locust_flag, str(self.type.wire(value))]


OPTION_KEY = "streamslo.run_option"
"""The key of a :class:`RunOption`'s settings in a dataclass field's metadata."""


def option(
    type: ValueType,
    help: str,
    *,
    flag: str | None = None,
    cli: bool = True,
    scenario: bool | str = True,
    locust: bool | str = True,
    native: str | None = None,
    web_ui: bool = True,
    secret: bool = False,
    inverted: bool = False,
    hidden: bool = False,
    group: str = "",
    positional: bool = False,
    short: str = "",
    exclusive: str = "",
) -> dict[str, object]:
    """The metadata of one :class:`RunOptions` field (everything but its name and default).

    Args:
        type: how the value is read.
        help: one line.
        flag: the ``streamslo run`` flag (default ``--<name>``).
        cli: a ``streamslo run``/``soak`` argument.
        scenario: a ``[load]`` key (True: the field's name; a string: that key).
        locust: registered on Locust's parser (True: as ``flag``; a string: that flag).
        native: Locust's own option that ``streamslo run`` translates it to.
        web_ui: shown in Locust's web UI start form.
        secret: never on a command line or in the web UI.
        inverted: a switch on by default that ``flag`` turns off.
        hidden: not in Locust's ``--help``.
        group: the ``--help`` section (commands with several).
        positional: a positional argument, not a flag.
        short: a one-letter alias (``-q``).
        exclusive: the name of a set of options that exclude one another.
    """
    return {
        OPTION_KEY: {
            "type": type,
            "help": help,
            "flag": flag,
            "cli": cli,
            "scenario": scenario,
            "locust": locust,
            "native": native,
            "web_ui": web_ui,
            "secret": secret,
            "inverted": inverted,
            "hidden": hidden,
            "group": group,
            "positional": positional,
            "short": short,
            "exclusive": exclusive,
        }
    }


def flag_option(
    type: ValueType,
    help: str,
    *,
    flag: str | None = None,
    group: str = "",
    positional: bool = False,
    inverted: bool = False,
    short: str = "",
    exclusive: str = "",
) -> dict[str, object]:
    """The metadata of one option of a command other than ``run`` (neither a scenario key nor a
    Locust option): see :func:`option` for the arguments."""
    return option(
        type,
        help,
        flag=flag,
        scenario=False,
        locust=False,
        web_ui=False,
        inverted=inverted,
        group=group,
        positional=positional,
        short=short,
        exclusive=exclusive,
    )
