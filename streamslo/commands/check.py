"""``streamslo check URL``: the command line around :mod:`streamslo.check.contract` (``docs/check.md``).

Prints the table, writes the JSON (``--json FILE``, or ``--out DIR`` for ``DIR/check.json``),
exits 0 (every check passed or warned), 99 (a check failed) or 2 (a bad URL, an unreachable
server, a path that cannot be written).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from streamslo.errors import BadInputError
from streamslo.options.values import IntList
from streamslo.stream.dialects import APIS, Dialect
from streamslo.stream.truth import ForcedLength

__all__ = ["add_arguments", "main"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "url",
        metavar="URL",
        help="the server's base URL, as --host takes it (http://127.0.0.1:8000)",
    )
    p.add_argument("--model", help="the model to ask for (default: the first of /v1/models)")
    p.add_argument(
        "--endpoint",
        choices=("chat", "completions"),
        default="chat",
        help="the endpoint a run will use (default chat); the other is checked too",
    )
    p.add_argument(
        "--api",
        choices=APIS,
        default="",
        help="the dialect a run will use (its path judged in detail; the others probed): "
        "openai-chat, openai-completions, openai-responses (/v1/responses) or "
        "anthropic-messages (/v1/messages); default: --endpoint's",
    )
    p.add_argument(
        "--no-ws", dest="websocket", action="store_false", help="do not check the WebSocket /v1/ws"
    )
    p.add_argument(
        "--forced-length",
        choices=("auto", *(f.value for f in ForcedLength)),
        default="auto",
        help="the means of forcing the length to check (default auto: every means is tried)",
    )
    p.add_argument(
        "--eos-token-id",
        type=_ids,
        default=(),
        metavar="ID[,ID...]",
        help="the model's end-of-sequence token ids (a bias on them shows whether a forced "
        "length works; default: from --tokenizer, the model's folder or the server)",
    )
    p.add_argument(
        "--tokenizer",
        metavar="PATH",
        help="a local tokenizer or model folder: the model's end-of-sequence ids",
    )
    p.add_argument(
        "--api-key-env", metavar="VAR", help="an environment variable holding a bearer API key"
    )
    p.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="'NAME: VALUE'",
        help="an extra request header",
    )
    p.add_argument("--header-file", metavar="FILE", help="a file of extra request headers")
    p.add_argument("--insecure", action="store_true", help="https: skip certificate verification")
    p.add_argument(
        "--json", metavar="FILE", help="write the results as JSON to FILE (- for stdout)"
    )
    p.add_argument("--out", metavar="DIR", help="write DIR/check.json")


def _ids(text: str) -> tuple[int, ...]:
    try:
        return IntList().parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _write(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    except OSError as exc:
        raise BadInputError(f"{path}: cannot write ({exc.strerror or exc})") from None


def main(args: argparse.Namespace) -> int:
    """``streamslo check``."""
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

    anthropic = args.api == Dialect.MESSAGES
    headers = resolve_headers(args.header, args.header_file, args.api_key_env, anthropic=anthropic)
    if anthropic:  # a default: a header of the user's replaces it
        headers = Headers((("anthropic-version", ANTHROPIC_VERSION),)).merged(headers)
    hide = headers.redactor()  # a server's words may echo a credential: never print it
    table = args.json != "-"
    if table:
        print(f"streamslo check {args.url}", flush=True)

    def show(item: CheckItem) -> None:  # each line as it is decided: a slow server shows progress
        if table:
            print(hide(format_item(item)), flush=True)

    try:
        report = run_checks(
            args.url,
            model=args.model,
            endpoint=args.endpoint,
            headers=headers.as_dict(),
            insecure=args.insecure,
            websocket=args.websocket,
            progress=show,
            api=args.api,
            eos_token_id=args.eos_token_id,
            tokenizer=args.tokenizer,
            forced_length=args.forced_length,
        )
    except BadInputError as exc:
        raise BadInputError(hide(str(exc))) from None
    text = hide(to_json(report))
    if not table:
        sys.stdout.write(text)
    else:
        print(hide(format_footer(report)) + (f"\nmodel: {report.model}" if report.model else ""))
        if args.json:
            _write(Path(args.json), text)
        if args.out:
            _write(Path(args.out) / "check.json", text)
    return exit_code(report)
