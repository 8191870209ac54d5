"""``streamslo check URL``: the command line around :mod:`streamslo.check.contract` (``docs/check.md``).

Prints the table, writes the JSON (``--json FILE``, or ``--out DIR`` for ``DIR/check.json``),
exits 0 (every check passed or warned), 99 (a check failed) or 2 (a bad URL, an unreachable
server, a path that cannot be written).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path

from streamslo.errors import BadInputError
from streamslo.options import declare
from streamslo.options.values import (
    Choice,
    ForcingValue,
    IntList,
    Switch,
    Text,
    TextList,
    flag_option,
)
from streamslo.stream.dialects import APIS, Dialect

__all__ = ["CheckOptions", "add_arguments", "main"]


@dataclass(frozen=True)
class CheckOptions:
    """``streamslo check``'s options (docs/check.md)."""

    url: str = field(
        metadata=flag_option(
            Text(optional=False, name="URL"),
            "the server's base URL, as --host takes it (http://127.0.0.1:8000)",
            positional=True,
        )
    )
    model: str | None = field(
        default=None,
        metadata=flag_option(
            Text(name="NAME"), "the model to ask for (default: the first of /v1/models)"
        ),
    )
    endpoint: str = field(
        default="chat",
        metadata=flag_option(
            Choice(("chat", "completions")),
            "the endpoint a run will use; the other is checked too",
        ),
    )
    api: str = field(
        default="",
        metadata=flag_option(
            Choice(APIS, empty=True),
            "the dialect a run will use (its path judged in detail; the others probed): "
            "openai-chat, openai-completions, openai-responses (/v1/responses) or "
            "anthropic-messages (/v1/messages); default: --endpoint's",
        ),
    )
    websocket: bool = field(
        default=True,
        metadata=flag_option(
            Switch(), "do not check the WebSocket /v1/ws", flag="--no-ws", inverted=True
        ),
    )
    forced_length: str = field(
        default="auto",
        metadata=flag_option(
            ForcingValue(),
            "the means of forcing the length to check (auto: every means is tried)",
        ),
    )
    eos_token_id: tuple[int, ...] = field(
        default=(),
        metadata=flag_option(
            IntList(),
            "the model's end-of-sequence token ids (a bias on them shows whether a forced "
            "length works; default: from --tokenizer, the model's folder or the server)",
        ),
    )
    tokenizer: str | None = field(
        default=None,
        metadata=flag_option(
            Text(name="PATH"), "a local tokenizer or model folder: the model's end-of-sequence ids"
        ),
    )
    api_key_env: str | None = field(
        default=None,
        metadata=flag_option(Text(name="VAR"), "an environment variable holding a bearer API key"),
    )
    header: tuple[str, ...] = field(
        default=(),
        metadata=flag_option(TextList(name="'NAME: VALUE'"), "an extra request header"),
    )
    header_file: str | None = field(
        default=None,
        metadata=flag_option(Text(name="FILE"), "a file of extra request headers"),
    )
    insecure: bool = field(
        default=False, metadata=flag_option(Switch(), "https: skip certificate verification")
    )
    json: str | None = field(
        default=None,
        metadata=flag_option(Text(name="FILE"), "write the results as JSON to FILE (- for stdout)"),
    )
    out: str | None = field(
        default=None, metadata=flag_option(Text(name="DIR"), "write DIR/check.json")
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``check``'s options (:class:`CheckOptions`)."""
    declare.add_arguments(p, CheckOptions)


def _write(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    except OSError as exc:
        raise BadInputError(f"{path}: cannot write ({exc.strerror or exc})") from None


def main(args: argparse.Namespace) -> int:
    """``streamslo check``."""
    o = declare.values(args, CheckOptions)
    from streamslo.check.contract import (
        CheckItem,
        exit_code,
        format_footer,
        format_item,
        run_checks,
        to_json,
    )
    from streamslo.options.redact import Headers, resolve_headers
    from streamslo.stream.dialects import ANTHROPIC_VERSION

    anthropic = o.api == Dialect.MESSAGES
    headers = resolve_headers(o.header, o.header_file, o.api_key_env, anthropic=anthropic)
    if anthropic:  # a default: a header of the user's replaces it
        headers = Headers((("anthropic-version", ANTHROPIC_VERSION),)).merged(headers)
    hide = headers.redactor()  # a server's words may echo a credential: never print it
    table = o.json != "-"
    if table:
        print(f"streamslo check {o.url}", flush=True)

    def show(item: CheckItem) -> None:  # each line as it is decided: a slow server shows progress
        if table:
            print(hide(format_item(item)), flush=True)

    try:
        report = run_checks(
            o.url,
            model=o.model,
            endpoint=o.endpoint,
            headers=headers.as_dict(),
            insecure=o.insecure,
            websocket=o.websocket,
            progress=show,
            api=o.api,
            eos_token_id=o.eos_token_id,
            tokenizer=o.tokenizer,
            forced_length=o.forced_length,
        )
    except BadInputError as exc:
        raise BadInputError(hide(str(exc))) from None
    text = hide(to_json(report))
    if not table:
        sys.stdout.write(text)
    else:
        print(hide(format_footer(report)) + (f"\nmodel: {report.model}" if report.model else ""))
        if o.json:
            _write(Path(o.json), text)
        if o.out:
            _write(Path(o.out) / "check.json", text)
    return exit_code(report)
