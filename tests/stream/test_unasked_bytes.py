"""The keep-alive check before a request (``unasked_bytes``): what waits on an idle connection,
on plain and on gevent sockets, and that under gevent it does not go round the event loop
(which delayed every request by the other streams' pending reads: TTFT's offset)."""

from __future__ import annotations

import socket
from collections.abc import Callable

import gevent
import gevent.select
import gevent.socket
import pytest

from streamslo.transport.common import unasked_bytes

PAIRS: dict[str, Callable[[], tuple[socket.socket, socket.socket]]] = {
    "plain": socket.socketpair,
    "gevent": gevent.socket.socketpair,  # type: ignore[dict-item]
}


@pytest.fixture
def gevent_select(monkeypatch: pytest.MonkeyPatch) -> None:
    """``select.select`` as ``gevent.monkey`` leaves it under Locust."""
    import select

    monkeypatch.setattr(select, "select", gevent.select.select)


@pytest.mark.parametrize("kind", sorted(PAIRS))
def test_idle_data_and_close(kind: str, gevent_select: None) -> None:
    ours, server = PAIRS[kind]()
    try:
        assert not unasked_bytes(ours)  # idle and open: reusable
        server.sendall(b"stray")
        assert unasked_bytes(ours)
        assert ours.recv(16) == b"stray"  # only looked at, not consumed
        assert not unasked_bytes(ours)
        server.close()
        assert unasked_bytes(ours)  # the server's close
    finally:
        ours.close()
        server.close()


def test_reset_is_not_reusable() -> None:
    ours, server = socket.socketpair()
    try:
        server.sendall(b"x")
        ours.shutdown(socket.SHUT_RD)
        assert unasked_bytes(ours)
    finally:
        ours.close()
        server.close()


def test_gevent_check_does_not_yield(gevent_select: None) -> None:
    ours, server = gevent.socket.socketpair()
    ran: list[bool] = []
    try:
        gevent.spawn(ran.append, True)  # would run if the check went round the loop
        assert not unasked_bytes(ours)
        assert not ran
        gevent.sleep(0)
        assert ran
    finally:
        ours.close()
        server.close()
