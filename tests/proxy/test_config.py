"""The proxy's settings: parsers with units, validation that names the option, the public API."""

from __future__ import annotations

import argparse

import pytest

from streamslo.errors import BadInputError
from streamslo.proxy.config import (
    Direction,
    Endpoint,
    Faults,
    ProxyConfigError,
    ProxyLimits,
    millis_arg,
    parse_listen,
    parse_millis,
    parse_size,
    parse_upstream,
    rate_arg,
)
from tests.test_cli import test_all_matches_public_names as check_all


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", 0),
        ("4096", 4096),
        ("64KiB", 65536),
        ("64kib", 65536),
        ("1KB", 1000),
        ("1.5MB", 1_500_000),
        ("2MiB", 2 * 1024 * 1024),
        ("1GiB", 1024**3),
        ("10 B", 10),
        (" 7 ", 7),
    ],
)
def test_sizes(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("bad", ["", "-1", "lots", "5 KiBs", "1e3", "KiB"])
def test_bad_sizes_name_the_option(bad):
    with pytest.raises(ProxyConfigError, match="--reset-after"):
        parse_size(bad, "--reset-after")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("50", 0.05), ("0", 0.0), ("2.5", 0.0025), ("50ms", 0.05), ("1s", 1.0), ("1m", 60.0)],
)
def test_bare_milliseconds(text, seconds):
    assert parse_millis(text) == pytest.approx(seconds)
    assert millis_arg(text) == pytest.approx(seconds)


@pytest.mark.parametrize("bad", ["-5", "soon", "5x"])
def test_bad_milliseconds(bad):
    with pytest.raises(ProxyConfigError):
        parse_millis(bad, "--latency")
    with pytest.raises(argparse.ArgumentTypeError):
        millis_arg(bad)


def test_rates_take_an_optional_per_second():
    assert rate_arg("2000") == 2000
    assert rate_arg("64KiB/s") == 65536
    with pytest.raises(argparse.ArgumentTypeError):
        rate_arg("0")


@pytest.mark.parametrize(
    ("text", "endpoint"),
    [
        ("127.0.0.1:0", Endpoint("127.0.0.1", 0)),
        (":9000", Endpoint("127.0.0.1", 9000)),
        ("[::1]:8080", Endpoint("::1", 8080)),
        ("0.0.0.0:80", Endpoint("0.0.0.0", 80)),
    ],
)
def test_listen(text, endpoint):
    assert parse_listen(text) == endpoint


@pytest.mark.parametrize("bad", ["nowhere", "::1:80", "host:", "host:http", "host:70000", "[::1]"])
def test_bad_listen(bad):
    with pytest.raises(ProxyConfigError, match="--listen"):
        parse_listen(bad)


@pytest.mark.parametrize(
    ("text", "endpoint"),
    [
        ("http://127.0.0.1:8000", Endpoint("127.0.0.1", 8000)),
        ("http://example.com", Endpoint("example.com", 80)),
        ("https://api.example.com/v1", Endpoint("api.example.com", 443)),
        ("ws://h:9/v1/ws", Endpoint("h", 9)),
        ("wss://h", Endpoint("h", 443)),
        ("tcp://h:7", Endpoint("h", 7)),
        ("localhost:8000", Endpoint("localhost", 8000)),
        ("http://[::1]:81", Endpoint("::1", 81)),
    ],
)
def test_upstream(text, endpoint):
    assert parse_upstream(text) == endpoint


@pytest.mark.parametrize("bad", ["ftp://h:21", "tcp://h", "http://", "h", "http://h:99999", "h:0"])
def test_bad_upstream(bad):
    with pytest.raises(ProxyConfigError, match="--upstream"):
        parse_upstream(bad)


def test_endpoint_text_and_loopback():
    assert str(Endpoint("::1", 80)) == "[::1]:80"
    assert str(Endpoint("127.0.0.1", 80)) == "127.0.0.1:80"
    assert Endpoint("127.0.0.2", 1).is_loopback and Endpoint("localhost", 1).is_loopback
    assert Endpoint("::1", 1).is_loopback
    assert not Endpoint("0.0.0.0", 1).is_loopback
    assert not Endpoint("10.1.2.3", 1).is_loopback
    assert not Endpoint("example.com", 1).is_loopback


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"latency_s": -1}, "--latency"),
        ({"jitter_s": float("nan")}, "--jitter"),
        ({"slow_close_s": -0.1}, "--slow-close"),
        ({"bandwidth": 0}, "--bandwidth"),
        ({"bandwidth": 10, "burst": 0}, "--burst"),
        ({"burst": 10}, "--burst needs"),
        ({"reset_after": -1}, "--reset-after"),
        ({"blackhole_after": -3}, "--blackhole-after"),
        ({"every": 0}, "--every"),
        ({"probability": 1.2}, "--probability"),
        ({"every": 2, "probability": 0.5}, "exclude each other"),
    ],
)
def test_faults_validate_and_name_the_option(kwargs, message):
    with pytest.raises(ProxyConfigError, match=message) as info:
        Faults(**kwargs)
    assert isinstance(info.value, BadInputError) and isinstance(info.value, ValueError)


def test_limits_validate():
    with pytest.raises(ProxyConfigError):
        ProxyLimits(max_buffer=0)
    with pytest.raises(ProxyConfigError):
        ProxyLimits(connect_timeout_s=0)


def test_describe():
    assert Faults().describe() == "none" and not Faults().active
    f = Faults(latency_s=0.05, reset_after=100, direction=Direction.BOTH, probability=0.25, seed=9)
    assert f.active
    assert f.describe() == "latency=50ms reset-after=100B (both, probability 0.25, seed 9)"


@pytest.mark.parametrize(
    "name",
    [
        "streamslo.proxy",
        "streamslo.proxy.config",
        "streamslo.proxy.schedule",
        "streamslo.proxy.engine",
        "streamslo.proxy.process",
        "streamslo.commands.proxy",
    ],
)
def test_all_matches_public_names(name):
    check_all(name)
