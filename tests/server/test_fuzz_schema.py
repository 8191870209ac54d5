"""schemathesis over the server's own OpenAPI description (``/openapi.json``), against the real
server process on a real socket: valid and invalid bodies for every route, 0 answers >= 500."""

from __future__ import annotations

from typing import Any

import httpx
import schemathesis
from hypothesis import HealthCheck, settings

from streamslo.server.openapi import build_schema
from tests.server.fuzz import FUZZ_CONFIG, FuzzServer, assert_survived

# The description the fuzz server serves (checked below), loaded at collection time so each
# route becomes its own test.
schema = schemathesis.openapi.from_dict(build_schema(FUZZ_CONFIG))


def test_the_server_serves_this_description(fuzz_uvicorn: FuzzServer) -> None:
    served = httpx.get(fuzz_uvicorn.server.url + "/openapi.json", timeout=10).json()
    assert served == build_schema(FUZZ_CONFIG)


@schema.parametrize()
@settings(
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
def test_every_route_answers_below_500(case: Any, fuzz_uvicorn: FuzzServer) -> None:
    response = case.call(base_url=fuzz_uvicorn.server.url, timeout=30)
    fuzz_uvicorn.sent["http-schema"] += 1
    fuzz_uvicorn.check_error_body(response.status_code, response.content)


def test_the_server_survived_the_schema_fuzz(fuzz_uvicorn: FuzzServer) -> None:
    assert fuzz_uvicorn.sent["http-schema"] > 100
    assert_survived(fuzz_uvicorn)
