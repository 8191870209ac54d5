"""Stream users for SSE and WebSocket LLM endpoints.

Plain Locust::

    locust -f locustfiles/streaming_locustfile.py --host http://127.0.0.1:8000 \
        --protocol mixed --max-tokens 64 --results-dir results/

or headless through ``streamslo run``. The user mix follows ``--protocol`` and
``--slow-readers`` unless user classes are named on the command line.
"""

from locustfiles.users.hooks import install
from locustfiles.users.openloop import OpenLoopStreamUser
from locustfiles.users.sse_user import SlowSSEStreamUser, SSEStreamUser
from locustfiles.users.ws_user import SlowWebSocketStreamUser, WebSocketStreamUser

__all__ = [
    "OpenLoopStreamUser",
    "SSEStreamUser",
    "SlowSSEStreamUser",
    "SlowWebSocketStreamUser",
    "WebSocketStreamUser",
]

install()
