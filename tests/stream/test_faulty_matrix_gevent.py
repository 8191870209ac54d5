"""The faulty-server matrix again, under gevent, as the Locust users read.

Under gevent the streams' plain sockets are read by the process's one reader
(``streamslo.transport.reactor``), or, with ``STREAMSLO_READ=per-stream``, each by its own
greenlet, which waits for its socket to be readable before it reads
(``streamslo.transport.common._wait_first``); every outcome, hostile cases included, must stay
what the plain blocking read gives (tests/faulty/server.py's ``EXPECTED``), both ways. The reads run in a child process patched by ``gevent.monkey``, eight greenlets at
a time, as in ``test_faulty_matrix``, whose timing cases (a 1 s stall timeout) are as sensitive
to a loaded machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.faulty.server import EXPECTED

REPO = Path(__file__).resolve().parents[2]

CHILD = """
from gevent import monkey

monkey.patch_all()

import json
import socket
import sys

from gevent.pool import Pool

import os

from streamslo.transport.common import _wait_first
from streamslo.transport.reactor import REACTOR
from tests.faulty.scenarios import HOSTILE
from tests.stream.test_faulty_matrix import CASES, CONCURRENT, LIMITS, limits_for, run_case

probe = socket.socket()
assert type(probe).__module__.startswith("gevent"), "not gevent's sockets"
assert _wait_first(probe, LIMITS) is not None, "the gevent read path is not in use"
probe.close()
out = {}


def one(case):
    return case, run_case(sys.argv[1], *case, limits=limits_for(case[0]))


for batch in ([c for c in CASES if c[0] not in HOSTILE], [c for c in CASES if c[0] in HOSTILE]):
    pool = Pool(CONCURRENT)
    for case, rec in pool.imap_unordered(one, batch):
        out["|".join(case)] = [rec.outcome, rec.error, rec.tokens]
shared = os.environ.get("STREAMSLO_READ") != "per-stream"
assert (REACTOR.reads > 0) == shared, f"{REACTOR.reads} reads by the shared reader"
print(json.dumps(out))
"""


@pytest.fixture(scope="module", params=["shared", "per-stream"])
def gevent_matrix(request, faulty_server) -> dict[str, list[object]]:
    env = {k: v for k, v in os.environ.items() if k != "STREAMSLO_READ"}
    if request.param == "per-stream":
        env["STREAMSLO_READ"] = "per-stream"
    res = subprocess.run(
        [sys.executable, "-c", CHILD, faulty_server.base_url],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    out: dict[str, list[object]] = json.loads(res.stdout.strip().splitlines()[-1])
    return out


@pytest.mark.parametrize("case", sorted(EXPECTED), ids=[f"{s}-{p}" for s, p in sorted(EXPECTED)])
def test_outcome_under_gevent(gevent_matrix, case):
    outcome, error, _ = gevent_matrix["|".join(case)]
    assert outcome == EXPECTED[case], f"{case}: got {outcome} ({error})"
