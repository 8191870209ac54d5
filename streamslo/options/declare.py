"""One way to declare a command's options (docs/cli.md): a frozen dataclass whose fields carry their
flag, value type and help (:func:`streamslo.options.values.option`), as ``streamslo run``'s
:class:`~streamslo.options.run_options.RunOptions` does. From that one declaration come:

- :func:`add_arguments`: the command's ``argparse`` arguments (help sections, positionals,
  switches, repeatable and multi-word values);
- :func:`values`: the typed options back from the parsed arguments;
- :func:`markdown`: the command's options table in the docs (``tests/test_docs.py`` keeps each
  page equal to it).

Every command declares its options so (``tests/test_cli.py`` checks that no command adds an
argument by hand).
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from streamslo.errors import BadInputError
from streamslo.options.values import (
    OPTION_KEY,
    Choice,
    RunOption,
    Switch,
    TextList,
)
from streamslo.results.markup import markdown_cell

__all__ = ["add_arguments", "markdown", "rows", "values"]

T = TypeVar("T")


def rows(cls: type) -> tuple[RunOption, ...]:
    """The table of an options dataclass: one :class:`RunOption` per field, in order."""
    out = []
    for f in dataclasses.fields(cls):
        if OPTION_KEY not in f.metadata:
            continue
        m = f.metadata[OPTION_KEY]
        flag = m["flag"] or ("" if m["positional"] else "--" + f.name.replace("_", "-"))
        scenario = m["scenario"]
        locust = m["locust"]
        default = f.default
        if default is dataclasses.MISSING and f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        out.append(
            RunOption(
                name=f.name,
                default=None if default is dataclasses.MISSING else default,
                type=m["type"],
                help=m["help"],
                flag=flag,
                cli=m["cli"],
                scenario_key=(f.name if scenario is True else scenario or None),
                locust_flag=(flag if locust is True else locust or None),
                locust_native=m["native"],
                web_ui=m["web_ui"],
                secret=m["secret"],
                inverted=m["inverted"],
                hidden=m["hidden"],
                group=m["group"],
                positional=m["positional"],
                required=default is dataclasses.MISSING,
                short=m.get("short", ""),
                exclusive=m.get("exclusive", ""),
            )
        )
    return tuple(out)


def _convert(opt: RunOption) -> Callable[[str], Any]:
    def convert(text: str) -> Any:
        try:
            return opt.type.parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = opt.type.describe()  # argparse names the type in some messages
    return convert


def add_arguments(
    parser: argparse.ArgumentParser,
    cls: type,
    *,
    defaults: bool = True,
    required: Iterable[str] = (),
    help: Mapping[str, str] | None = None,
    exclude: Iterable[str] = (),
    only: Iterable[str] | None = None,
    own_defaults: Mapping[str, object] | None = None,
    suppress: bool = False,
) -> None:
    """Add the options of ``cls`` to ``parser``, each in its help section.

    Args:
        parser: the command's parser.
        cls: the options dataclass.
        defaults: each argument's default is its field's (False: None, so that the caller
            knows what the command line set: ``run``'s scenario values apply otherwise).
        required: option names the command requires.
        help: option name -> help text that replaces the declared one for this command.
        exclude: option names the command refuses.
        only: the option names the command takes (None: every one).
        own_defaults: option name -> the command's own default (its help says so).
        suppress: a flag not given leaves no attribute (a sub-command's copy of its parent's
            flags: the value given before the sub-command's name stands).
    """
    must = set(required)
    left_out = set(exclude)
    chosen = None if only is None else set(only)
    own = dict(own_defaults or {})
    groups: dict[str, argparse._ArgumentGroup] = {}
    sets: dict[tuple[str, str], argparse._MutuallyExclusiveGroup] = {}
    for opt in rows(cls):
        if not opt.cli or opt.name in left_out or (chosen is not None and opt.name not in chosen):
            continue
        shown = dataclasses.replace(opt, default=own[opt.name]) if opt.name in own else opt
        text = (help or {}).get(opt.name) or shown.help_text()
        target: Any = parser
        if opt.group:
            if opt.group not in groups:
                groups[opt.group] = parser.add_argument_group(opt.group)
            target = groups[opt.group]
        kw: dict[str, Any] = {"help": text.replace("%", "%%")}
        if not opt.positional:
            kw["dest"] = opt.name
            kw["default"] = own.get(opt.name, opt.default) if defaults else own.get(opt.name)
        elif not opt.required:
            kw["default"] = opt.default
        if isinstance(opt.type, Switch):
            kw.update(action="store_const", const=not opt.inverted)
            if defaults and not opt.positional:
                kw["default"] = bool(own.get(opt.name, opt.default))
        elif isinstance(opt.type, TextList) and not opt.positional:
            kw.update(action="append", metavar=opt.type.metavar)
            if opt.type.choices:
                kw["choices"] = list(opt.type.choices)
            if defaults:
                initial = own.get(opt.name, opt.default)
                kw["default"] = list(initial) if isinstance(initial, (list, tuple)) else []
        elif isinstance(opt.type, TextList):
            kw.update(nargs=getattr(opt.type, "positional_nargs", "+"), metavar=opt.type.metavar)
        elif isinstance(opt.type, Choice):
            kw["choices"] = list(opt.type.choices)
        elif getattr(opt.type, "nargs", None):
            # several words, parsed together by values() / run's cli_values()
            kw.update(nargs=getattr(opt.type, "nargs"), metavar=opt.type.metavar)  # noqa: B009
        else:
            kw.update(type=_convert(opt), metavar=opt.type.metavar)
        if opt.positional:
            if not opt.required and "nargs" not in kw:
                kw["nargs"] = "?"
            target.add_argument(opt.name, **kw)
            continue
        if opt.name in must or (opt.required and defaults):
            kw["required"] = True
        if suppress:
            kw["default"] = argparse.SUPPRESS
        if opt.exclusive:
            key = (opt.group, opt.exclusive)
            if key not in sets:
                sets[key] = target.add_mutually_exclusive_group()
            target = sets[key]
        target.add_argument(*((opt.short,) if opt.short else ()), opt.flag, **kw)


def values(args: argparse.Namespace, cls: type[T]) -> T:
    """The typed options of ``cls`` from parsed arguments (a field the command line did not
    carry keeps its default).

    Raises:
        BadInputError: a multi-word option with a bad value (the message names the flag).
    """
    out: dict[str, Any] = {}
    for opt in rows(cls):
        if not hasattr(args, opt.name):
            continue
        value = getattr(args, opt.name)
        if value is not None and getattr(opt.type, "nargs", None) and isinstance(value, list):
            try:
                value = opt.type.parse(value)
            except ValueError as exc:
                raise BadInputError(f"{opt.flag}: {exc}") from None
        if isinstance(value, list):
            value = tuple(value)
        if value is None and not opt.required:
            continue
        out[opt.name] = value
    return cls(**out)


def markdown(cls: type, command: str) -> str:
    """The docs table of ``cls``'s options (``command`` names the command in its header)."""
    lines = [
        f"| `streamslo {command}` option | value | default | meaning |",
        "| --- | --- | --- | --- |",
    ]
    for o in rows(cls):
        if not o.cli:
            continue
        flag = f"`{o.type.metavar}`" if o.positional else f"`{o.flag}`"
        if o.short:
            flag = f"`{o.short}`, {flag}"
        if o.inverted:
            default = "on (the flag turns it off)"
        elif isinstance(o.type, Switch):
            default = "off"
        elif o.required or o.default in (None, "", ()):
            default = "—"
        else:
            default = f"`{o.type.show(o.default)}`"
        lines.append(
            f"| {flag} | {markdown_cell(o.type.describe())} | {markdown_cell(default)} | {markdown_cell(o.help)} |"
        )
    return "\n".join(lines)
