"""WebSocket stream users only: ``locust -f locustfiles/ws_locustfile.py --host URL``."""

from locustfiles.users.hooks import install
from locustfiles.users.ws_user import SlowWebSocketStreamUser, WebSocketStreamUser

__all__ = ["SlowWebSocketStreamUser", "WebSocketStreamUser"]

install()
