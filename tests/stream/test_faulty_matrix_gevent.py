"""The faulty-server matrix again, under gevent, as the Locust users read.

Every outcome, hostile cases included, must be what the plain blocking read gives
(tests/faulty/server.py's ``EXPECTED``) when the reads run on gevent's sockets: in a child
process patched by ``gevent.monkey``, eight greenlets at a time, as in ``test_faulty_matrix``.
(Issue 21 tried reading only after waiting for the socket to be readable, which saves a failed
``recv`` per token; this matrix caught it: floods and an endless WebSocket stream ended
``stalled``.)
"""

from __future__ import annotations

import json
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

from tests.faulty.scenarios import HOSTILE
from tests.stream.test_faulty_matrix import CASES, CONCURRENT, run_case

assert type(socket.socket()).__module__.startswith("gevent"), "not gevent's sockets"
out = {}
for batch in ([c for c in CASES if c[0] not in HOSTILE], [c for c in CASES if c[0] in HOSTILE]):
    pool = Pool(CONCURRENT)
    for case, rec in pool.imap_unordered(lambda c: (c, run_case(sys.argv[1], *c)), batch):
        out["|".join(case)] = [rec.outcome, rec.error, rec.tokens]
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def gevent_matrix(faulty_server) -> dict[str, list[object]]:
    res = subprocess.run(
        [sys.executable, "-c", CHILD, faulty_server.base_url],
        cwd=REPO,
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
