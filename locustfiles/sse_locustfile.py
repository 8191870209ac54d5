"""SSE stream users only: ``locust -f locustfiles/sse_locustfile.py --host URL``."""

from streamslo.loadgen.hooks import install
from streamslo.loadgen.sse_user import SlowSSEStreamUser, SSEStreamUser

__all__ = ["SSEStreamUser", "SlowSSEStreamUser"]

install()
