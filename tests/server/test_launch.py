"""``streamslo serve``'s options come from one declaration (streamslo.commands.serve.ServeOptions):
every setting of the server has its flag, the defaults are the server's, and the values reach
the server's settings and Gunicorn's command line."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from streamslo.commands.serve import ServeOptions, add_arguments
from streamslo.errors import BadInputError
from streamslo.options import declare
from streamslo.server.config import ServerConfig
from streamslo.server.launch import Launch, gunicorn_command


def _parse(*argv: str) -> ServeOptions:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return declare.values(parser.parse_args(list(argv)), ServeOptions)


def test_every_setting_has_one_option():
    settable = {f.name for f in dataclasses.fields(ServerConfig)} - {"state_file", "extra"}
    options = {f.name for f in dataclasses.fields(ServeOptions)}
    assert settable <= options
    launcher = {f.name for f in dataclasses.fields(Launch)}
    assert options - settable == launcher
    flags = [o.flag for o in declare.rows(ServeOptions)]
    assert len(set(flags)) == len(flags)


def test_the_defaults_are_the_configs():
    o = _parse()
    assert o.config() == ServerConfig()
    assert o.launch() == Launch()


def test_options_reach_the_config_and_gunicorn():
    o = _parse(
        "--mode",
        "naive",
        "--fault",
        "leak-cancelled",
        "--server",
        "gunicorn",
        "--workers",
        "3",
        "--timeout",
        "7",
        "--write-timeout",
        "2.5",
        "--graceful-timeout",
        "1m",
        "--sndbuf",
        "4096",
        "--port",
        "8123",
    )
    cfg = o.config("state.json")
    assert "leak-cancelled" in cfg.faults and "per-token-sync" in cfg.faults
    assert cfg.write_timeout_s == 2.5 and cfg.sndbuf_bytes == 4096
    assert cfg.graceful_timeout_s == 60.0
    assert cfg.server == "gunicorn" and cfg.state_file == "state.json"
    cmd = gunicorn_command(cfg, o.launch())
    assert cmd[cmd.index("--workers") + 1] == "3" and cmd[cmd.index("--timeout") + 1] == "7"
    assert cmd[cmd.index("--graceful-timeout") + 1] == "60"
    assert cmd[cmd.index("--bind") + 1] == "127.0.0.1:8123"
    assert cmd[-1] == "streamslo.server.app:create_app()"


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--workers", "0"], "--workers"),
        (["--fault", "no-such-fault"], "--fault"),
        (["--write-timeout", "-1"], "--write-timeout"),
    ],
)
def test_a_bad_value_is_a_usage_error_naming_its_flag(argv, words, capsys):
    with pytest.raises(SystemExit) as exc:
        _parse(*argv)
    assert exc.value.code == 2
    assert words in capsys.readouterr().err


def test_settings_out_of_range_together_name_their_flags():
    with pytest.raises(BadInputError, match="--default-max-tokens"):
        _parse("--default-max-tokens", "500", "--max-tokens-limit", "100").config()


_EARLY_STOP = """
import os, signal, sys
from streamslo.server import server as srv

real = srv.DrainingServer.serve


async def serve(self, sockets=None):
    os.kill(os.getpid(), signal.SIGTERM)  # the stop comes before Uvicorn's handlers are in
    await real(self, sockets=sockets)


srv.DrainingServer.serve = serve
from streamslo.cli import main

sys.exit(main(["serve", "--mode", "naive", "--port", sys.argv[1]]))
"""


def test_a_stop_signal_before_uvicorn_takes_over_still_stops_the_server():
    """``streamslo serve`` handles SIGTERM/SIGINT itself until Uvicorn installs its own: a
    signal in that window stops the server once it has started (it was lost, and the server
    served on: a test's terminate() waited 30 s in vain under load)."""
    import subprocess
    import sys

    from streamslo.server.bundled import free_port
    from tests.loadgen.helpers import REPO

    proc = subprocess.Popen(
        [sys.executable, "-c", _EARLY_STOP, str(free_port())],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, out


def test_connections_accepted_on_our_listeners_have_nagle_off():
    """asyncio turns Nagle off only on sockets made with IPPROTO_TCP as their protocol; a plain
    ``socket.socket()`` (the server's own listener, Gunicorn's) is not one, and with Nagle on a
    stream's first tokens waited for a delayed ACK on kept-alive connections (they left
    together, tens of ms late). ``no_delay`` on the listener reaches every accepted socket."""
    import asyncio
    import socket

    from streamslo.server.server import no_delay

    async def accepted_nodelay(fix: bool) -> int:
        lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)  # proto 0, as Gunicorn's
        if fix:
            no_delay(lsock)
        lsock.bind(("127.0.0.1", 0))
        lsock.listen()
        got: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            s = w.get_extra_info("socket")
            got.set_result(s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            w.close()

        server = await asyncio.start_server(handler, sock=lsock)
        try:
            _, w = await asyncio.open_connection(*lsock.getsockname()[:2])
            value = await asyncio.wait_for(got, 10)
            w.close()
        finally:
            server.close()
            await server.wait_closed()
        return value

    assert asyncio.run(accepted_nodelay(fix=False)) == 0  # the trap
    assert asyncio.run(accepted_nodelay(fix=True)) != 0
