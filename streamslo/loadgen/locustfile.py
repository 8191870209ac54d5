"""The streaming locustfile: stream users for SSE and WebSocket LLM endpoints.

It ships inside the package, so ``streamslo run`` finds it in any installation. From a clone,
``locustfiles/streaming_locustfile.py`` re-exports it. Plain Locust::

    locust -f locustfiles/streaming_locustfile.py --host http://127.0.0.1:8000 \
        --protocol mixed --max-tokens 64 --results-dir results/

or headless through ``streamslo run``. The user mix follows ``--protocol`` and
``--slow-readers`` unless user classes are named on the command line.
"""

from streamslo.loadgen.executors import ScenarioUser
from streamslo.loadgen.hooks import install
from streamslo.loadgen.openloop import OpenLoopStreamUser
from streamslo.loadgen.replay import TraceReplayUser
from streamslo.loadgen.session_user import SessionArrivalUser, SessionUser
from streamslo.loadgen.sse_user import SlowSSEStreamUser, SSEStreamUser
from streamslo.loadgen.ws_user import SlowWebSocketStreamUser, WebSocketStreamUser

__all__ = [
    "OpenLoopStreamUser",
    "SSEStreamUser",
    "ScenarioUser",
    "SessionArrivalUser",
    "SessionUser",
    "SlowSSEStreamUser",
    "SlowWebSocketStreamUser",
    "TraceReplayUser",
    "WebSocketStreamUser",
]

install()
