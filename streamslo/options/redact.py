"""Secrets stay secret: extra request headers, the values to redact, and CSV cells that cannot
start a spreadsheet formula.

- :func:`resolve_headers` turns ``--header K:V``, ``--header-file FILE`` and ``--api-key-env
  VAR`` into the :class:`Headers` sent with every request, and knows which of their values are
  secret. A value may reference the environment as ``${NAME}``, so that it never has to be
  written on a command line.
- ``streamslo run`` hands the resolved headers to its Locust subprocess through the environment
  (:data:`HEADERS_ENV`, read once and removed by :func:`take_inherited_headers`), never on the
  command line, where ``ps`` and CI logs would show them.
- :class:`Redactor` replaces every secret value with ``***`` in any text: the error text kept in
  ``streams.csv``, Locust's failure messages and, through :func:`install_log_redaction`, every
  log record.
- :func:`csv_safe` neutralizes a text cell that a spreadsheet would run as a formula.

What is secret, and why, is described for users in ``docs/security.md``.
"""

from __future__ import annotations

import json
import logging
import os
import re
import urllib.parse
from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from streamslo.errors import BadInputError

__all__ = [
    "CSV_FORMULA_START",
    "HEADERS_ENV",
    "Headers",
    "RedactingFilter",
    "Redactor",
    "csv_safe",
    "install_log_redaction",
    "is_secret_header",
    "resolve_headers",
    "take_inherited_headers",
]

HEADERS_ENV = "STREAMSLO_HEADERS"
"""The environment variable through which ``streamslo run`` gives Locust the headers (JSON)."""

MASK = "***"

#: Header names whose values are credentials (matched anywhere in the name, any case).
_SECRET_NAME = re.compile(r"auth|key|token|secret|passw|cookie|session|credential|signature", re.I)
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def is_secret_header(name: str) -> bool:
    """Whether a header's value is a credential: ``Authorization``, ``X-Api-Key``, ``Cookie``,
    or any name with key, token, secret, auth, password, session or credential in it."""
    return bool(_SECRET_NAME.search(name))


class Redactor:
    """Replaces secret values with ``***`` in text.

    Each secret is also found JSON-escaped and URL-encoded (a server may echo it either way),
    and a secret cut off at the end of the text (error text is often truncated) is masked from
    its first :attr:`MIN_LENGTH` characters on.

    Args:
        secrets: the values to hide; those shorter than :attr:`MIN_LENGTH` are ignored (too
            short to find without masking ordinary words and numbers, and no credential).
    """

    MIN_LENGTH = 4

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        forms: set[str] = set()
        for s in secrets:
            if len(s) >= self.MIN_LENGTH:
                forms.update((s, json.dumps(s)[1:-1], urllib.parse.quote(s, safe="")))
        self._secrets = tuple(sorted(forms, key=len, reverse=True))
        self._pattern = re.compile("|".join(map(re.escape, self._secrets))) if forms else None

    def __bool__(self) -> bool:
        return self._pattern is not None

    def __repr__(self) -> str:
        return f"Redactor({len(self._secrets)} forms of secrets)"

    def __call__(self, text: str) -> str:
        """``text`` with every secret replaced by ``***``."""
        if self._pattern is None or not text:
            return text
        text = self._pattern.sub(MASK, text)
        for s in self._secrets:
            # A truncated copy at the very end: the leftmost start of the secret's first
            # characters within its length of the end, from which the rest is its beginning.
            # (Trying every prefix instead cost 100 µs per 200-character error.)
            head = s[: self.MIN_LENGTH]
            i = text.find(head, max(0, len(text) - len(s) + 1))
            while i != -1:
                if s.startswith(text[i:]):
                    return text[:i] + MASK
                i = text.find(head, i + 1)
        return text


def csv_safe(text: str) -> str:
    """A CSV text cell that no spreadsheet runs as a formula (OWASP "CSV injection").

    A cell starting with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return gets a leading
    ``'``; anything else is returned unchanged. Apply it to text columns only: a negative number
    in a numeric column must stay a number.
    """
    if text and text[0] in CSV_FORMULA_START:
        return "'" + text
    return text


CSV_FORMULA_START = frozenset("=+-@\t\r")
"""First characters that make a spreadsheet read a cell as a formula."""


@dataclass(frozen=True)
class Headers:
    """Extra request headers, and which of their values must never be shown."""

    items: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    """``(name, value)`` in the order given; a later name replaces an earlier one."""
    secrets: tuple[str, ...] = field(default=(), repr=False)
    """The values (and parts of values) to redact."""

    def __repr__(self) -> str:
        return f"Headers(names={[k for k, _ in self.items]}, {len(self.secrets)} secrets)"

    def __bool__(self) -> bool:
        return bool(self.items)

    def as_dict(self) -> dict[str, str]:
        """The headers to send (a later duplicate name wins, case-insensitively)."""
        out: dict[str, str] = {}
        for name, value in self.items:
            for old in [k for k in out if k.lower() == name.lower()]:
                del out[old]
            out[name] = value
        return out

    def merged(self, later: Headers) -> Headers:
        """These headers, then ``later``'s (which replace same-named ones)."""
        return Headers(self.items + later.items, tuple(dict.fromkeys(self.secrets + later.secrets)))

    def redactor(self) -> Redactor:
        return Redactor(self.secrets)

    def to_env(self) -> str:
        """The JSON form for :data:`HEADERS_ENV`."""
        return json.dumps(
            {"headers": [list(kv) for kv in self.items], "secrets": list(self.secrets)}
        )

    @classmethod
    def from_env(cls, text: str) -> Headers:
        """Read :meth:`to_env`'s JSON.

        Raises:
            BadInputError: not that JSON.
        """
        try:
            doc = json.loads(text)
            items = tuple((str(k), str(v)) for k, v in doc["headers"])
            secrets = tuple(str(s) for s in doc.get("secrets", ()))
        except (ValueError, KeyError, TypeError):
            raise BadInputError(
                f"{HEADERS_ENV} is not the JSON that streamslo run writes"
            ) from None
        return cls(items, secrets)


def _secret_parts(name: str, value: str, refs: Sequence[str], from_file: bool) -> list[str]:
    parts = list(refs)
    if from_file or refs or is_secret_header(name):
        parts.append(value)
        scheme, sep, credential = value.partition(" ")
        if sep and scheme.isalpha():  # "Bearer sk-...", "Basic dXNl...": the credential alone too
            parts.append(credential.strip())
    return parts


def _parse_header(
    item: str, source: str, environ: Mapping[str, str], from_file: bool
) -> tuple[str, str, list[str]]:
    name, sep, value = item.partition(":")
    name, value = name.strip(), value.strip()
    if not sep or not name or any(c.isspace() for c in name):
        raise BadInputError(f"{source}: a header must be 'Name: value', not {item!r}")
    refs: list[str] = []

    def expand(m: re.Match[str]) -> str:
        var = m.group(1)
        if var not in environ:
            raise BadInputError(f"{source}: header {name}: environment variable {var} is not set")
        refs.append(environ[var])
        return environ[var]

    value = _ENV_REF.sub(expand, value)
    if "\r" in value or "\n" in value:
        raise BadInputError(f"{source}: header {name}: a value cannot hold a line break")
    return name, value, _secret_parts(name, value, refs, from_file)


def resolve_headers(
    items: Iterable[str] = (),
    header_file: str | None = None,
    api_key_env: str | None = None,
    environ: Mapping[str, str] | None = None,
    anthropic: bool = False,
) -> Headers:
    """The extra headers of a run.

    Args:
        items: ``--header`` values, ``"Name: value"``; ``${VAR}`` in a value is replaced by that
            environment variable.
        header_file: a file of such lines (blank lines and ``#`` comments skipped); read first,
            so ``--header`` overrides it.
        api_key_env: an environment variable holding a bearer API key: sends
            ``Authorization: Bearer <key>`` (it overrides an ``Authorization`` header).
        environ: the environment (default ``os.environ``).
        anthropic: the Anthropic Messages dialect: the key goes in ``x-api-key`` (and no
            ``Authorization`` header is made).

    Returns:
        The headers. Secret: values of credential-like names (:func:`is_secret_header`), every
        value read from ``header_file``, every value that references the environment, the key.

    Raises:
        BadInputError: a malformed header, an unreadable file, a variable that is not set (the
            message names the source, never a value).
    """
    env = os.environ if environ is None else environ
    pairs: list[tuple[str, str]] = []
    secrets: list[str] = []
    if header_file:
        try:
            lines = Path(header_file).read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise BadInputError(f"--header-file {header_file}: cannot read it ({exc})") from None
        for no, line in enumerate(lines, 1):
            if line.strip() and not line.lstrip().startswith("#"):
                name, value, parts = _parse_header(line, f"{header_file}:{no}", env, True)
                pairs.append((name, value))
                secrets += parts
    for item in items:
        name, value, parts = _parse_header(item, "--header", env, False)
        pairs.append((name, value))
        secrets += parts
    if api_key_env:
        key = env.get(api_key_env)
        if not key:
            raise BadInputError(f"--api-key-env: environment variable {api_key_env} is not set")
        if anthropic:
            pairs.append(("x-api-key", key))
            secrets.append(key)
        else:
            pairs.append(("Authorization", f"Bearer {key}"))
            secrets += [key, f"Bearer {key}"]
    return Headers(tuple(pairs), tuple(dict.fromkeys(s for s in secrets if s)))


_inherited: Headers | None = None


def take_inherited_headers(environ: MutableMapping[str, str] | None = None) -> Headers:
    """The headers ``streamslo run`` passed in :data:`HEADERS_ENV`, read on the first call and
    removed from the environment then, so that no process started later inherits them.

    Call it early in a Locust process (at import of the locustfile): Locust's ``--processes``
    workers are forks and keep what was read.
    """
    global _inherited
    if _inherited is None:
        env: MutableMapping[str, str] = os.environ if environ is None else environ
        text = env.pop(HEADERS_ENV, None)
        _inherited = Headers.from_env(text) if text else Headers()
    return _inherited


class RedactingFilter(logging.Filter):
    """A logging filter that redacts secrets from a record's message and traceback."""

    def __init__(self, redactor: Redactor) -> None:
        super().__init__()
        self.redactor = redactor

    def filter(self, record: logging.LogRecord) -> bool:
        redact = self.redactor
        if not redact:
            return True
        message = record.getMessage()
        masked = redact(message)
        if masked != message:
            record.msg, record.args = masked, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True


_filter: RedactingFilter | None = None


def install_log_redaction(
    redactor: Redactor, loggers: Sequence[str] = ("streamslo",)
) -> RedactingFilter:
    """Redact ``redactor``'s secrets from every log record this process writes.

    One filter goes on the named loggers and on every handler of those loggers and of the root
    logger: a filter on a logger alone would miss records of its child loggers, which go straight
    to the handlers. Call it after logging is set up; calling again replaces the secrets.

    Returns:
        The filter (its ``redactor`` may be replaced later).
    """
    global _filter
    if _filter is None:
        _filter = RedactingFilter(redactor)
    _filter.redactor = redactor
    targets: list[logging.Logger] = [logging.getLogger(name) for name in loggers]
    targets.append(logging.getLogger())
    for logger in targets:
        if _filter not in logger.filters:
            logger.addFilter(_filter)
        for handler in logger.handlers:
            if _filter not in handler.filters:
                handler.addFilter(_filter)
    return _filter
