"""``streamslo proxy`` as a user runs it: help, usage errors (exit 2), the first stdout line,
signals (exit 0 with the counters), and a real ``streamslo run`` through it."""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import sys
import time

import pandas as pd
import pytest

from streamslo.cli import main as cli_main
from streamslo.proxy import spawn_proxy
from tests.faulty.process import unused_port
from tests.faulty.server import STALL_S
from tests.stream.test_faulty_matrix import run_case


def proxy_cmd(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streamslo", "proxy", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_help_lists_every_fault():
    r = proxy_cmd("--help")
    assert r.returncode == 0, r.stderr
    for option in (
        "--listen",
        "--upstream",
        "--latency",
        "--jitter",
        "--bandwidth",
        "--reset-after",
        "--blackhole-after",
        "--slow-close",
        "--direction",
        "--every",
        "--probability",
        "--seed",
    ):
        assert option in r.stdout, option


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "--upstream"),
        (("--upstream", "ftp://host:21"), "unsupported scheme"),
        (("--upstream", "http://127.0.0.1:1", "--latency", "soon"), "--latency"),
        (("--upstream", "http://127.0.0.1:1", "--jitter", "-5"), "--jitter"),
        (("--upstream", "http://127.0.0.1:1", "--bandwidth", "0"), "--bandwidth"),
        (("--upstream", "http://127.0.0.1:1", "--reset-after", "lots"), "--reset-after"),
        (("--upstream", "http://127.0.0.1:1", "--listen", "nowhere"), "--listen"),
        (("--upstream", "http://127.0.0.1:1", "--listen", "127.0.0.1:70000"), "--listen"),
        (
            ("--upstream", "http://127.0.0.1:1", "--every", "2", "--probability", "0.5"),
            "not allowed with",
        ),
        (("--upstream", "http://127.0.0.1:1", "--probability", "1.5"), "--probability"),
        (("--upstream", "http://127.0.0.1:1", "--direction", "sideways"), "--direction"),
        (("--upstream", "http://127.0.0.1:1", "--burst", "100"), "--burst needs --bandwidth"),
        (("--upstream", "http://127.0.0.1:1", "--max-buffer", "0"), "--max-buffer"),
    ],
)
def test_bad_arguments_exit_2_with_a_clear_message(args, message, capsys):
    # in-process (the same entry point as the console script), so the table stays fast
    try:
        rc = cli_main(["proxy", *args])
    except SystemExit as exc:
        rc = exc.code
    err = capsys.readouterr().err
    assert rc == 2, err
    assert message in err
    assert "Traceback" not in err


def test_bad_arguments_exit_2_in_a_real_process():
    r = proxy_cmd("--upstream", "http://127.0.0.1:1", "--bandwidth", "fast")
    assert r.returncode == 2
    assert "--bandwidth" in r.stderr and "Traceback" not in r.stderr


def test_an_address_in_use_exits_2():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = proxy_cmd("--upstream", "http://127.0.0.1:1", "--listen", f"127.0.0.1:{port}")
    assert r.returncode == 2
    assert "cannot listen on" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_exits_0_with_stats(faulty_server, sig):
    with spawn_proxy(["--upstream", faulty_server.base_url, "--reset-after", "400"]) as proxy:
        assert proxy.address.host == "127.0.0.1" and proxy.address.port > 0
        rec = run_case(proxy.url, "timed", "sse")
        # a stream still open when the signal comes is ended, not waited for
        with socket.create_connection((proxy.address.host, proxy.address.port), timeout=5) as held:
            held.sendall(
                b"POST /s/stall_after_headers/v1/completions HTTP/1.1\r\nHost: x\r\n"
                b"Content-Length: 2\r\n\r\n{}"
            )
            assert held.recv(100).startswith(b"HTTP/1.1 200")  # headers, then silence
            t0 = time.perf_counter()
            rc = proxy.stop(sig)
            with contextlib.suppress(ConnectionResetError):
                while held.recv(65536):
                    pass
            held_for = time.perf_counter() - t0
    assert rc == 0
    assert held_for < STALL_S  # closed by the shutdown, not by the server's own FIN
    assert rec.outcome == "truncated"
    assert proxy.stats["connections"] == 2
    assert proxy.stats["resets"] == 1
    assert proxy.stats["active"] == 0


def test_first_line_names_the_address_and_faults(faulty_server):
    port = unused_port()
    with spawn_proxy(
        [
            "--upstream",
            faulty_server.base_url,
            "--listen",
            f"127.0.0.1:{port}",
            "--latency",
            "50",
            "--jitter",
            "10ms",
            "--bandwidth",
            "64KiB/s",
            "--every",
            "3",
        ]
    ) as proxy:
        assert proxy.address.port == port
        rc = proxy.stop()
    assert rc == 0
    assert proxy.banner.startswith(f"listening 127.0.0.1:{port} -> 127.0.0.1:{faulty_server.port} ")
    assert "latency=50ms jitter=10ms bandwidth=65536B/s" in proxy.banner
    assert "every 3 connections" in proxy.banner
    assert proxy.stats["connections"] == 0


@pytest.mark.load
def test_streamslo_run_through_the_proxy_mixes_good_and_cut_streams(faulty_server, tmp_path):
    """Each connection is reset after 4,500 bytes. The users keep their connection between
    streams (an 8-token stream is about 1.5 to 1.8 KB on the wire), so every connection
    carries two ok streams and cuts the third mid-body: both transports see ok and
    truncated streams, and the run fails its truncation SLO (exit 99)."""
    with spawn_proxy(["--upstream", faulty_server.base_url, "--reset-after", "4500"]) as proxy:
        out = tmp_path / "run"
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "streamslo",
                "run",
                "--host",
                proxy.url,
                "--out",
                str(out),
                "--allow-invalid",
                "--model",
                "ok",
                "--users",
                "4",
                "--duration",
                "3",
                "--protocol",
                "mixed",
                "--max-tokens",
                "8",
                # Timers no stream here should meet (each ends ok or reset within a second):
                # on a loaded machine a starved stream met the 2 s stall timeout (stalled), and
                # one still running at a 3 s drain would end cancelled. The drain ends as soon
                # as the streams in flight do.
                "--drain",
                "20",
                "--stall-timeout",
                "20",
                # every connection through the proxy is counted: neither the preflight nor a
                # /v1/models lookup (the faulty server lists more than 4,500 bytes of models) may be
                "--no-preflight",
                "--token-ids",
                "off",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        rc = proxy.stop()
    assert r.returncode == 99, r.stdout + r.stderr
    assert rc == 0
    streams = pd.read_csv(out / "streams.csv")
    counts = streams.groupby(["protocol", "outcome"]).size().to_dict()
    for protocol in ("sse", "ws"):
        ok, cut = counts.get((protocol, "ok"), 0), counts.get((protocol, "truncated"), 0)
        assert cut >= 1 and ok >= cut, counts  # two ok streams per cut one
    assert set(streams["outcome"]) == {"ok", "truncated"}, counts
    assert proxy.stats["resets"] == (streams["outcome"] == "truncated").sum()
