"""Secrets stay secret: header resolution, redaction in text and logs, CSV-safe cells."""

from __future__ import annotations

import json
import logging

import pytest

from streamslo.errors import BadInputError
from streamslo.options import redact
from streamslo.options.redact import (
    HEADERS_ENV,
    Headers,
    Redactor,
    csv_safe,
    install_log_redaction,
    is_secret_header,
    resolve_headers,
)

KEY = "sk-live-4f9a8b7c6d5e"


def test_redactor_masks_every_copy_and_encoding():
    r = Redactor([KEY, "p@ss word/x"])
    assert r(f"401: key {KEY} rejected; again {KEY}") == "401: key *** rejected; again ***"
    assert r('{"message": "p@ss word/x"}') == '{"message": "***"}'
    assert r("url?k=p%40ss%20word%2Fx") == "url?k=***"
    assert r(json.dumps({"k": 'quo"te-secret'})) == json.dumps(
        {"k": 'quo"te-secret'}
    )  # not a secret
    assert Redactor(['quo"te-secret'])(json.dumps({"k": 'quo"te-secret'})) == '{"k": "***"}'


def test_redactor_masks_a_secret_cut_off_at_the_end():
    r = Redactor([KEY])
    assert r(f"error: bad key {KEY[:9]}") == "error: bad key ***"
    assert r("error: bad key sk-") == "error: bad key sk-"  # under MIN_LENGTH: ordinary text


def test_short_and_empty_values_are_not_secrets():
    r = Redactor(["", "abc"])
    assert not r
    assert r("abc 401") == "abc 401"


def test_secret_header_names():
    for name in (
        "Authorization",
        "Proxy-Authorization",
        "X-Api-Key",
        "api-key",
        "Cookie",
        "X-Auth-Token",
        "X-Client-Secret",
        "Session",
    ):
        assert is_secret_header(name), name
    for name in ("X-Request-Id", "Accept", "X-Tenant", "User-Agent"):
        assert not is_secret_header(name), name


def test_resolve_headers_marks_what_is_secret(tmp_path):
    hfile = tmp_path / "h"
    hfile.write_text("# credentials\nX-Org: org-from-file\n\nX-Trace: overridden\n")
    env = {"MY_KEY": KEY, "TEAM": "team-1234"}
    h = resolve_headers(
        ["X-Trace: trace-1", "X-Team: ${TEAM}", "X-Api-Key: raw-api-key"], str(hfile), "MY_KEY", env
    )
    assert h.as_dict() == {
        "X-Org": "org-from-file",
        "X-Trace": "trace-1",
        "X-Team": "team-1234",
        "X-Api-Key": "raw-api-key",
        "Authorization": f"Bearer {KEY}",
    }
    secret = set(h.secrets)
    assert {"org-from-file", "team-1234", "raw-api-key", KEY} <= secret  # file, ${VAR}, name, key
    assert "trace-1" not in secret  # a plain --header with an ordinary name
    assert "org-from-file" not in repr(h) and KEY not in repr(h)


def test_authorization_credential_is_secret_without_its_scheme():
    h = resolve_headers(["Authorization: Basic dXNlcjpwYXNz"], environ={})
    assert h.redactor()("echo: dXNlcjpwYXNz") == "echo: ***"


@pytest.mark.parametrize(
    ("items", "message"),
    [
        (["X-Key ${NOPE}"], "'Name: value'"),
        (["Bad Name: v"], "'Name: value'"),
        (["X-Key: ${NOPE}"], "NOPE is not set"),
    ],
)
def test_bad_headers_are_bad_input(items, message):
    with pytest.raises(BadInputError, match=message):
        resolve_headers(items, environ={})


def test_missing_api_key_variable_is_bad_input():
    with pytest.raises(BadInputError, match="H4_NOT_SET is not set"):
        resolve_headers(api_key_env="H4_NOT_SET", environ={})


def test_headers_travel_by_environment_and_are_taken_once(monkeypatch):
    h = resolve_headers(["X-Api-Key: abcd-1234"], environ={})
    env = {HEADERS_ENV: h.to_env(), "OTHER": "1"}
    monkeypatch.setattr(redact, "_inherited", None)
    got = redact.take_inherited_headers(env)
    assert got == h and HEADERS_ENV not in env  # removed: nothing started later inherits it
    assert redact.take_inherited_headers({HEADERS_ENV: "ignored"}) is got
    with pytest.raises(BadInputError, match=HEADERS_ENV):
        Headers.from_env("not json")


def test_merged_headers_later_wins():
    a = Headers((("Authorization", "Bearer one"),), ("Bearer one",))
    b = Headers((("authorization", "Bearer two"),), ("Bearer two",))
    assert a.merged(b).as_dict() == {"authorization": "Bearer two"}
    assert set(a.merged(b).secrets) == {"Bearer one", "Bearer two"}


@pytest.mark.parametrize("text", ["=1+2", "+1", "-2+3", "@SUM(A1)", "\tx", "\rx"])
def test_csv_safe_neutralizes_formulas(text):
    assert csv_safe(text) == "'" + text


@pytest.mark.parametrize("text", ["", "length", "HTTP 401: =x", "'quoted", "1-2"])
def test_csv_safe_leaves_other_text(text):
    assert csv_safe(text) is text


def test_log_records_of_child_loggers_and_tracebacks_are_redacted():
    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(self.format(record))

    root = logging.getLogger()
    handler = Keep()
    root.addHandler(handler)
    try:
        f = install_log_redaction(Redactor([KEY]))
        child = logging.getLogger("streamslo.locust.h4test")
        child.warning("server said %s", KEY)
        try:
            raise ValueError(f"bad key {KEY}")
        except ValueError:
            logging.getLogger("somewhere.else").exception("failed")
        assert records and all(KEY not in r for r in records), records
        assert "server said ***" in records[0] and "ValueError: bad key ***" in records[1]
    finally:
        root.removeHandler(handler)
        f.redactor = Redactor()


def test_a_target_never_shows_its_header_values() -> None:
    """A Target in a log line or a traceback (its repr) holds no credential."""
    from streamslo.transport.common import Target

    target = Target.from_url("http://127.0.0.1:8000", {"Authorization": "Bearer sk-very-secret"})
    assert "sk-very-secret" not in repr(target)
    assert target.headers["Authorization"] == "Bearer sk-very-secret"
