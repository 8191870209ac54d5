"""Shared parts of the fuzz tests: the fuzz servers (uvicorn, and once Gunicorn), what every
answer must look like, and the health check after a fuzz run."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from streamslo.server.config import ServerConfig
from tests.server.servers import Server, start_server

__all__ = [
    "FUZZ_ARGS",
    "FUZZ_CONFIG",
    "SERVER_ERRORS",
    "FuzzServer",
    "assert_survived",
    "start_fuzz_server",
]

#: Small limits keep a fuzz run fast: streams of at most 8 tokens, no pacing between steps.
FUZZ_CONFIG = ServerConfig.build(
    max_tokens_limit=8,
    default_max_tokens=4,
    token_interval_ms=0,
    body_timeout_s=2,
    header_timeout_s=2,
    max_body_bytes=65536,
)
FUZZ_ARGS = [
    "--max-tokens-limit",
    "8",
    "--default-max-tokens",
    "4",
    "--token-interval-ms",
    "0",
    "--body-timeout",
    "2",
    "--header-timeout",
    "2",
    "--max-body-bytes",
    "65536",
]
#: Signs of a server fault in a log.
SERVER_ERRORS = (
    "Exception in ASGI application",
    "internal error",
    "Traceback",
    "Fatal error",
    "ASGI callable returned without completing handshake",
    "WORKER TIMEOUT",
)


@dataclass
class FuzzServer:
    """A server under fuzz and the tally of what it was sent and answered."""

    server: Server
    kind: str
    sent: Counter[str] = field(default_factory=Counter)
    """Inputs sent, by family (``http-schema``, ``http-raw``, ``ws``)."""
    answers: Counter[int] = field(default_factory=Counter)
    """Statuses (HTTP) and close codes (WebSocket) seen."""

    def check_error_body(self, status: int, body: bytes) -> None:
        """A refusal carries ``{"error": {...}}`` with ``code`` its status; nothing is >= 500."""
        self.answers[status] += 1
        assert status < 500, (status, body[:300])
        if status >= 400:
            err = json.loads(body)["error"]
            assert err["code"] == status and err["message"] and err["type"], body[:300]


def start_fuzz_server(kind: str, tmp: Path) -> FuzzServer:
    """A fixed-mode server under ``kind`` (``uvicorn`` or ``gunicorn``) with :data:`FUZZ_ARGS`."""
    return FuzzServer(start_server(["--server", kind, *FUZZ_ARGS], tmp), kind)


def assert_survived(fz: FuzzServer) -> None:
    """After a fuzz run: alive, no 5xx counted, no dead worker, nothing logged as a fault."""
    s = fz.server
    assert s.proc.poll() is None
    assert httpx.get(s.url + "/healthz", timeout=10).status_code == 200
    metrics = httpx.get(s.url + "/metrics", timeout=10).text
    assert "streamslo_http_5xx_total{" not in metrics
    workers = httpx.get(s.url + "/debug/workers", timeout=10).json()
    assert workers["worker_restarts_total"] == 0 and workers["worker_aborts_total"] == 0
    log = s.output()
    for sign in SERVER_ERRORS:
        at = log.find(sign)
        assert at < 0, log[max(0, at - 2000) : at + 2000]
    print(f"\nfuzz {fz.kind}: sent {dict(fz.sent)}, answers {dict(sorted(fz.answers.items()))}")
