"""schemathesis over the server's own OpenAPI description (``/openapi.json``), against the app
in this process (schemathesis' ASGI transport; request validation needs no socket): valid and
invalid bodies for every route, 0 answers >= 500, and no exception out of the app. Raw HTTP
framing and WebSocket conversations are fuzzed on a real socket (test_fuzz_http.py,
test_fuzz_ws.py)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from streamslo.server.openapi import build_schema
from tests.server.fuzz import FUZZ_CONFIG
from tests.server.inprocess import LOOPBACK

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send

# The description the fuzz app serves (checked below), loaded at collection time so each
# route becomes its own test.
schema = schemathesis.openapi.from_dict(build_schema(FUZZ_CONFIG))


class Tally:
    """The fuzz app and what the schema fuzz sent it and got back."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.sent = 0
        self.answers: Counter[int] = Counter()

    def get(self, path: str) -> Any:
        """GET ``path`` from the app (schemathesis' client: the same lifespan as the fuzz)."""
        from schemathesis.python import asgi

        with asgi.get_client(self.app) as client:
            return client.get("http://testserver" + path)


@pytest.fixture(scope="module")
def fuzz_app() -> Iterator[Tally]:
    """The app with the fuzz limits, called from loopback (as the socket fuzz's clients; the
    ``/debug`` routes answer loopback), its lifespan run by schemathesis (started at the first
    call, stopped here)."""
    from schemathesis.python import asgi

    from streamslo.server.app import create_app

    app = create_app(FUZZ_CONFIG)

    async def from_loopback(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            scope = {**scope, "client": LOOPBACK}
        await app(scope, receive, send)

    try:
        yield Tally(from_loopback)
    finally:
        asgi.shutdown_lifespans()


def test_the_app_serves_this_description(fuzz_app: Tally) -> None:
    assert fuzz_app.get("/openapi.json").json() == build_schema(FUZZ_CONFIG)


@schema.parametrize()
@settings(
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
def test_every_route_answers_below_500(case: Any, fuzz_app: Tally) -> None:
    response = case.call(app=fuzz_app.app)  # an exception out of the app is raised here
    fuzz_app.sent += 1
    status = response.status_code
    fuzz_app.answers[status] += 1
    assert status < 500, (status, response.content[:300])
    if status >= 400:
        err = response.json()["error"]
        assert err["code"] == status and err["message"] and err["type"], response.content[:300]


def test_the_app_survived_the_schema_fuzz(fuzz_app: Tally) -> None:
    assert fuzz_app.sent > 100, fuzz_app.answers
    assert fuzz_app.get("/healthz").status_code == 200
    assert "streamslo_http_5xx_total{" not in fuzz_app.get("/metrics").text
    print(
        f"\nfuzz schema (in process): sent {fuzz_app.sent}, answers {sorted(fuzz_app.answers.items())}"
    )
