"""SSE stream users only: ``locust -f locustfiles/sse_locustfile.py --host URL``."""

from locustfiles.users.hooks import install
from locustfiles.users.sse_user import SlowSSEStreamUser, SSEStreamUser

__all__ = ["SSEStreamUser", "SlowSSEStreamUser"]

install()
