"""The measurement core never loads gevent or locust (locust monkey-patches at import)."""

import subprocess
import sys


def test_core_does_not_import_gevent_or_locust():
    code = (
        "import sys, streamslo.stream.sse, streamslo.stream.tracker, streamslo.stream.http1, "
        "streamslo.stream.exchange, streamslo.stream.ws, streamslo.stream.chunkjson, "
        "streamslo.transport.sync, streamslo.transport.fetch, streamslo.results.layout, streamslo.figures.metrics, "
        "streamslo.slo.thresholds; "
        "bad = [m for m in ('gevent', 'locust') if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
