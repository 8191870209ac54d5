"""WebSocket stream users only: ``locust -f locustfiles/ws_locustfile.py --host URL``."""

from streamslo.loadgen.hooks import install
from streamslo.loadgen.ws_user import SlowWebSocketStreamUser, WebSocketStreamUser

__all__ = ["SlowWebSocketStreamUser", "WebSocketStreamUser"]

install()
