"""Stream users for SSE and WebSocket LLM endpoints (the locustfile ``streamslo run`` uses).

Plain Locust, web UI included::

    locust -f locustfiles/streaming_locustfile.py --host http://127.0.0.1:8000 \
        --protocol mixed --max-tokens 64 --results-dir results/

The users live in :mod:`streamslo.loadgen.locustfile`; this file only re-exports them, so
that Locust finds the user classes here. Outside a clone, point ``-f`` at that module's file:
``python -c "import streamslo.loadgen.locustfile as m; print(m.__file__)"``.
"""

from streamslo.loadgen.locustfile import (
    OpenLoopStreamUser,
    ScenarioUser,
    SessionArrivalUser,
    SessionUser,
    SlowSSEStreamUser,
    SlowWebSocketStreamUser,
    SSEStreamUser,
    TraceReplayUser,
    WebSocketStreamUser,
)

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
