"""The bundled server's memory under a client that floods a streaming WebSocket: the worker's
RSS grows by less than 8 MiB while 16 MiB of requests arrive behind a running stream (its
read-ahead is a small bounded queue; an unbounded one held them all). A figure of a quiet
machine: under load the protocol layer reads and drops more before the close reaches the client
(9.4 MiB under a CPU hog), so the default suite checks the refusal itself
(tests/server/test_hardening.py, ``test_ws_read_ahead_is_bounded``). ``tox -e bench`` runs this.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bench.conftest import bench_run
from tests.server.servers import start_server
from tests.server.test_hardening import flood_a_stream

pytestmark = [pytest.mark.load, bench_run]


def test_a_flooded_streaming_connection_grows_the_worker_by_less_than_8_mib(
    tmp_path: Path,
) -> None:
    server = start_server(["--mode", "fixed"], tmp_path)
    try:
        f = flood_a_stream(server)
    finally:
        server.stop()
    assert f.code == 1008
    assert f.growth_mb < 8, f.growth_mb
