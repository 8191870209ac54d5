"""``streamslo check --api``: each dialect's stream contract against a server speaking it (the
bundled server, the faulty server's dialect faults), and a clear cause when the URL speaks
another dialect (an OpenAI-only server asked for ``/v1/messages``); the run's preflight says
the same."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from streamslo.check.contract import CheckReport, exit_code, run_checks
from streamslo.run.preflight import PreflightFailed, preflight
from streamslo.stream.dialects import APIS
from streamslo.workload.requests import RequestOptions
from tests.server.servers import ROOT, Server, start_server


@pytest.fixture(scope="module")
def bundled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = start_server(["--mode", "fixed"], tmp_path_factory.mktemp("bundled"))
    yield s
    s.stop()


class _OpenAIOnly(BaseHTTPRequestHandler):
    """An OpenAI-compatible server that knows nothing of the event dialects: chat
    completions (a correct stream: max_tokens tokens, finish_reason length, usage, [DONE]),
    /v1/models, and a 404 error body for every other path."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _json(self, status: int, obj: object) -> None:
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": "m", "object": "model"}]})
        else:
            self._json(404, {"error": {"message": "Not Found", "type": "not_found", "code": 404}})

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        if self.path != "/v1/chat/completions":
            self._json(404, {"error": {"message": "Not Found", "type": "not_found", "code": 404}})
            return
        try:
            n = int(json.loads(raw).get("max_tokens", 4))
        except ValueError:
            self._json(400, {"error": {"message": "body is not JSON", "code": 400}})
            return

        def chunk(delta: dict[str, str], finish: str | None = None) -> str:
            obj = {
                "id": "c",
                "object": "chat.completion.chunk",
                "created": 1,
                "model": "m",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
            return f"data: {json.dumps(obj)}\n\n"

        events = [chunk({"role": "assistant"})]
        events += [chunk({"content": f" t{i}"}) for i in range(n - 1)]
        events.append(chunk({"content": " end"}, "length"))
        usage = {"prompt_tokens": 3, "completion_tokens": n, "total_tokens": 3 + n}
        events.append(
            "data: "
            + json.dumps(
                {"id": "c", "object": "chat.completion.chunk", "choices": [], "usage": usage}
            )
            + "\n\n"
        )
        events.append("data: [DONE]\n\n")
        body = "".join(events).encode()
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def openai_only() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _OpenAIOnly)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def item(report: CheckReport, name: str) -> tuple[str, str, tuple[str, ...]]:
    (found,) = [i for i in report.items if i.name == name]
    return found.status, found.detail, found.flags


TERMINAL = {
    "openai-chat": "terminal marker [DONE]",
    "openai-completions": "terminal marker [DONE]",
    "openai-responses": "terminal event",
    "anthropic-messages": "terminal event",
}


@pytest.mark.parametrize("api", APIS)
def test_the_bundled_server_passes_each_dialect(bundled: Server, api: str) -> None:
    report = run_checks(bundled.url, api=api, websocket=False)
    assert exit_code(report) == 0, [i for i in report.items if i.status != "pass"]
    path = RequestOptions(api=api).path
    status, detail, _ = item(report, f"SSE {path}")
    assert status == "pass" and detail.startswith("ok, HTTP 200, 12 tokens")
    assert item(report, TERMINAL[api])[0] == "pass"
    assert item(report, "forced length")[0] == "pass"
    assert item(report, "usage")[0] == "pass"
    assert report.flags == []
    status, detail, _ = item(report, "other dialects")
    assert status == "pass"
    assert detail == "also speaks: " + ", ".join(a for a in APIS if a != api)


def test_the_bundled_websocket_is_named_for_an_event_dialect(bundled: Server) -> None:
    """The bundled /v1/ws speaks OpenAI chunks: for an event dialect, a warning that runs use
    SSE; no flag, since SSE is the default (a check names only flags a run needs)."""
    report = run_checks(bundled.url, api="openai-responses")
    status, detail, flags = item(report, "WebSocket /v1/ws")
    assert status == "warn" and "does not stream openai-responses events" in detail
    assert flags == () and "--protocol sse" not in report.flags


def test_another_dialect_is_named(openai_only: str) -> None:
    """``--api anthropic-messages`` against an OpenAI-only server: the 404 on /v1/messages is
    a failure that says the server does not speak the dialect, and which one it does."""
    report = run_checks(openai_only, api="anthropic-messages", websocket=False)
    assert exit_code(report) == 99
    status, detail, flags = item(report, "SSE /v1/messages")
    assert status == "fail"
    assert "HTTP 404 on /v1/messages: this server does not speak anthropic-messages" in detail
    assert "it speaks openai-chat (/v1/chat/completions)" in detail
    assert flags == ("--api openai-chat",)
    assert item(report, "terminal event")[0] == "skip"
    # The command line: the same line, exit 99, the flag in the footer.
    r = subprocess.run(
        [sys.executable, "-m", "streamslo", "check", openai_only, "--api", "openai-responses"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert r.returncode == 99, r.stdout + r.stderr
    assert "this server does not speak openai-responses" in r.stdout
    assert "a run against this server needs: --api openai-chat" in r.stdout


def test_the_preflight_names_another_dialect(openai_only: str) -> None:
    with pytest.raises(PreflightFailed) as info:
        preflight(openai_only, ["sse"], RequestOptions(api="anthropic-messages", model="m"))
    text = str(info.value)
    assert "does not serve /v1/messages, the anthropic-messages dialect's path" in text
    assert "check --api" in text and "openai-chat: /v1/chat/completions" in text


@pytest.mark.parametrize("api", ["openai-responses", "anthropic-messages"])
@pytest.mark.parametrize(
    ("scenario", "check", "status", "flag"),
    [
        ("ok", "SSE", "pass", None),
        ("natural_end", "forced length", "warn", "--forced-length none"),
        ("usage_more", "usage", "fail", None),
        ("no_terminal", "terminal event", "pass", "--no-done-marker"),
    ],
)
def test_each_dialect_fault_is_named(faulty_server, api, scenario, check, status, flag) -> None:
    if (scenario, api) == ("natural_end", "openai-responses"):
        # response.completed with output_tokens at max_output_tokens is how vLLM and llama.cpp
        # end a forced length: no fault (the short form, usage below the limit, still is).
        scenario = "short_natural"
    if (scenario, api) == ("no_terminal", "openai-responses"):
        # The Responses stop reason rides on its terminal event: without it a stream has
        # neither, and nothing tells a whole answer from a cut one.
        status, flag = "fail", None
    report = run_checks(faulty_server.url(scenario), api=api, model=scenario, websocket=False)
    name = f"SSE {RequestOptions(api=api).path}" if check == "SSE" else check
    got, detail, flags = item(report, name)
    assert got == status, detail
    if flag is not None:
        assert flag in flags, (detail, flags)
