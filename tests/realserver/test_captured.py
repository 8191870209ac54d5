"""A real vLLM's wire bytes, replayed through the Sans-I/O core (default suite: no vLLM needed).

The files in ``captures/`` came off a socket from vLLM 0.32.0 (CPU build) serving the tiny
Llama of ``vllm_setup.py`` (``capture.py`` made them; ``captures.json`` says how). What they
show about vLLM's stream:

- the first chunk announces the role: ``{"role": "assistant", "content": ""}`` (no token);
- a token whose text the detokenizer holds back (a byte of a multi-byte character) comes as a
  chunk with ``"content": ""`` (``text: ""`` on completions): ``*_stream_empty_chunks.http``,
  59 text + 5 empty chunks for 64 tokens (chat), 61 + 3 (completions);
- vLLM merges several tokens into one chunk whenever its API server falls behind the engine
  (``RequestOutputCollector`` aggregates deltas): ``*_stream_merged.http``, 64 tokens in 11
  (chat) and 8 (completions) chunks right after start-up on a busy machine. Over 80 streams
  per endpoint at 4 at a time (``capture.py --survey 80``), text + empty chunks equalled
  ``usage.completion_tokens`` in 60 of 80 chat and 57 of 80 completions streams; the others
  had merged chunks (``captures.json`` ``survey``); busier, 20 of 40 and 5 of 40;
- asked ``return_token_ids: true``, each chunk lists its token ids: their count equalled usage
  in 40 of 40 streams, 12 of them with merged chunks (``chat_stream_token_ids.http``);
- the last choice chunk carries ``finish_reason: "length"``; then a usage-only chunk
  (``choices: []``, ``completion_tokens: 64``); then ``[DONE]``;
- an engine that dies under a stream sends ``data: {"error": {..., "code": 500}}`` in the
  stream, then ``[DONE]``;
- ``max_tokens`` beyond the model's length is a 400 with vLLM's message before any stream.
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from streamslo.results.columns import stream_row
from streamslo.run.evidence import ServerEvidence, parse_prometheus_typed
from streamslo.stream.timing import StreamExpectations, StreamRecord
from tests.stream.drive import Burst, drive_sse

CAPTURES = Path(__file__).resolve().parent / "captures"
SPLITS = [1, 7, 97, 1 << 20]

MERGED = (
    "vLLM merged several tokens into one chunk (its API server fell behind): complete "
    "(finish length, usage 64, [DONE]) with fewer chunks than tokens; without the chunks' "
    "token ids (a run asks vLLM for them: --token-ids auto) a merge cannot be told from a "
    "loss"
)
STREAMS = [
    "chat_stream_empty_chunks.http",
    "completions_stream_empty_chunks.http",
    "chat_stream_merged.http",
    "completions_stream_merged.http",
]


def _raw(name: str) -> bytes:
    return (CAPTURES / name).read_bytes()


def _events(name: str) -> list[Any]:
    body = _raw(name).partition(b"\r\n\r\n")[2]
    return [
        json.loads(m) if m != b"[DONE]" else "[DONE]"
        for m in re.findall(rb"^data: (.*)$", body, flags=re.M)
    ]


def _replay(name: str, size: int, max_tokens: int, coalesced: bool = False) -> StreamRecord:
    raw = _raw(name)
    pieces = [raw[i : i + size] for i in range(0, len(raw), size)]
    # a burst per read 1 ms apart, then EOF (the server closes: Connection: close)
    bursts = [Burst(0.001 * (i + 1), [p]) for i, p in enumerate(pieces)]
    expect = StreamExpectations(
        max_tokens=max_tokens, forced_length=True, coalesced_chunks=coalesced
    )
    return drive_sse(bursts, 0.001 * (len(pieces) + 2), expect)


# ------------------------------------------------------------------ what vLLM sent
def _choices(name: str) -> tuple[list[Any], list[str | None]]:
    events = _events(name)
    choices = [c for e in events[:-2] for c in e["choices"]]
    if name.startswith("chat"):
        return choices, [c["delta"].get("content") for c in choices[1:]]
    return choices, [c["text"] for c in choices]


@pytest.mark.parametrize("name", STREAMS)
def test_the_captured_stream_shape(name: str) -> None:
    head = _raw(name).partition(b"\r\n\r\n")[0].decode().lower()
    assert head.startswith("http/1.1 200") and "content-type: text/event-stream" in head
    assert "transfer-encoding: chunked" in head
    events = _events(name)
    assert events[-1] == "[DONE]"
    usage_chunk = events[-2]
    assert usage_chunk["choices"] == [] and usage_chunk["usage"]["completion_tokens"] == 64
    choices, texts = _choices(name)
    assert choices[-1]["finish_reason"] == "length"
    if name.startswith("chat"):
        assert choices[0]["delta"] == {"role": "assistant", "content": ""}  # not a token
    empty = sum(t == "" for t in texts)
    if "empty_chunks" in name:
        # one chunk per token, some of them with empty text
        assert empty > 0 and len(texts) == 64
    else:
        # fewer chunks than tokens: vLLM merged deltas (the stream is complete: finish
        # "length", usage 64 = max_tokens, [DONE])
        assert empty == 0 and 0 < len(texts) < 64


def test_vllms_token_ids_count_merged_chunks_exactly() -> None:
    """Asked ``return_token_ids: true``, vLLM lists each chunk's token ids: their number is
    the token count even where chunks were merged (40 of 40 streams in the survey, 12 of them
    with merged chunks), where counting chunks is not."""
    choices, texts = _choices("chat_stream_token_ids.http")
    per_chunk = [len(c.get("token_ids") or []) for c in choices]
    assert (
        sum(per_chunk)
        == 64
        == _events("chat_stream_token_ids.http")[-2]["usage"]["completion_tokens"]
    )
    assert max(per_chunk) > 1 and len(texts) < 64  # merged chunks


def test_the_captured_error_shapes() -> None:
    events = _events("engine_killed_stream.http")
    err = events[-2]
    assert events[-1] == "[DONE]" and err["error"]["code"] == 500
    assert err["error"]["message"].startswith("EngineCore encountered an issue")
    head, _, body = _raw("max_tokens_too_long.http").partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400")
    assert json.loads(body)["error"]["param"] == "max_tokens"


def test_the_captured_models_list() -> None:
    body = json.loads(_raw("models.http").partition(b"\r\n\r\n")[2])
    assert [m["id"] for m in body["data"]] == ["tiny-llama"]
    assert body["data"][0]["max_model_len"] == 512


# ------------------------------------------------------------- through streamslo's core
@pytest.mark.parametrize("size", SPLITS)
def test_too_long_max_tokens_is_http_4xx_with_vllms_message(size: int) -> None:
    rec = _replay("max_tokens_too_long.http", size, 1000)
    assert rec.outcome == "http_4xx" and rec.status == 400
    assert "max_tokens=1000 cannot be greater than max_model_len=512" in (rec.error or "")


@pytest.mark.parametrize("size", SPLITS)
def test_an_engine_killed_under_a_stream_is_error_event_with_its_message(size: int) -> None:
    rec = _replay("engine_killed_stream.http", size, 500)
    assert rec.outcome == "error_event"
    assert "EngineCore encountered an issue" in (rec.error or "")


@pytest.mark.parametrize("name", STREAMS)
@pytest.mark.parametrize("size", SPLITS)
def test_with_coalesced_chunks_a_complete_stream_is_ok(name: str, size: int) -> None:
    rec = _replay(name, size, 64, coalesced=True)
    assert rec.outcome == "ok", rec.error
    assert stream_row(rec)["tokens"] == rec.usage_completion_tokens == 64


def _default(name: str) -> Any:
    marks = [pytest.mark.xfail(strict=True, reason=MERGED)] if "merged" in name else []
    return pytest.param(name, marks=marks, id=name.removesuffix(".http"))


#: Every captured stream, and the one that lists its chunks' token ids (merged chunks among them).
DEFAULT_STREAMS = [_default(n) for n in [*STREAMS, "chat_stream_token_ids.http"]]


@pytest.mark.parametrize("name", DEFAULT_STREAMS)
def test_a_complete_vllm_stream_is_ok_with_the_default_flags(name: str) -> None:
    rec = _replay(name, 97, 64)
    assert rec.outcome == "ok", rec.error


@pytest.mark.parametrize("name", DEFAULT_STREAMS)
def test_tokens_equal_the_servers_usage_with_the_default_flags(name: str) -> None:
    rec = _replay(name, 97, 64)
    assert stream_row(rec)["tokens"] == rec.usage_completion_tokens == 64


@pytest.mark.parametrize("size", SPLITS)
def test_a_merged_chunk_counts_the_token_ids_it_lists(size: int) -> None:
    """A chunk listing several token ids is one arrival: one ITL gap, as many tokens as ids."""
    choices, _ = _choices("chat_stream_token_ids.http")
    arrivals = sum(1 for c in choices if c.get("token_ids"))
    rec = _replay("chat_stream_token_ids.http", size, 64)
    assert rec.outcome == "ok", rec.error
    assert rec.tokens == 64 and len(rec.gap_s) == arrivals - 1 < 63


# ------------------------------------------------------------------ vLLM's /metrics
METRICS = ("metrics_idle.txt", "metrics_busy.txt", "metrics_after.txt")


def test_vllms_metrics_parse_with_their_types() -> None:
    lab = '{engine="0",model_name="tiny-llama"}'
    idle, types = parse_prometheus_typed((CAPTURES / "metrics_idle.txt").read_text())
    busy, _ = parse_prometheus_typed((CAPTURES / "metrics_busy.txt").read_text())
    assert types["vllm:num_requests_running"] == types["vllm:num_requests_waiting"] == "gauge"
    assert types["vllm:kv_cache_usage_perc"] == "gauge"  # 0.32's name (older: gpu_cache_usage_perc)
    assert types["vllm:num_preemptions_total"] == "counter"
    assert types["process_cpu_seconds_total"] == "counter"
    assert idle[f"vllm:num_requests_running{lab}"] == 0.0
    assert busy[f"vllm:num_requests_running{lab}"] == 6.0  # six streams were in flight
    assert busy[f"vllm:kv_cache_usage_perc{lab}"] > 0.0
    assert len(busy) > 400  # every sample, histograms' buckets included


def test_a_scrape_of_vllm_tables_its_series_as_the_runs(tmp_path: Path) -> None:
    """The three captured /metrics served in turn to the real scraper, then the report's
    series: running requests peak at 6, CPU is the run's share, not vLLM's lifetime."""
    from streamslo.reports.load import LoadedRun, load_server_evidence
    from streamslo.reports.server_series import moved_samples, panel_series

    texts = [(CAPTURES / n).read_bytes() for n in METRICS]
    served: list[int] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = texts[min(len(served), 2)]
            served.append(1)
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
        ev = ServerEvidence(url.rsplit("/", 1)[0], tmp_path, metrics_url=url)
        for _ in METRICS:
            ev.scrape_once()
    finally:
        server.shutdown()
        server.server_close()
    evidence = load_server_evidence(tmp_path)
    run = LoadedRun(
        "run",
        "vllm",
        None,
        float(evidence.metrics["epoch"].min()),
        None,  # type: ignore[arg-type]
        evidence,
    )
    rows, _ = moved_samples(run)
    by = {r.title: r for r in rows if r.title}
    assert by["vLLM running requests"].value == 6.0
    assert by["vLLM waiting requests"].value == 0.0
    assert by["vLLM KV-cache usage"].value > 0.0
    assert by["vLLM preemptions"].kind == "increase" and by["vLLM preemptions"].value == 0.0
    cpu = by["server process CPU"]
    idle = parse_prometheus_typed(texts[0].decode())[0]["process_cpu_seconds_total"]
    after = parse_prometheus_typed(texts[2].decode())[0]["process_cpu_seconds_total"]
    assert (
        cpu.last is not None and cpu.value == pytest.approx(after - idle) and cpu.value < cpu.last
    )
    assert {"running", "waiting", "kv", "preempt", "cpu", "memory"} <= {
        k.panel for k, _, _ in panel_series(run)
    }
    assert not any(r.sample.endswith(("_bucket", "_created")) for r in rows)
