"""The options of a load run, declared once.

Every option of ``streamslo run`` (and ``streamslo soak``), every ``[load]`` key of a scenario
file and every option the stream users add to Locust's parser is one field of
:class:`RunOptions`: the field gives the name, the Python type and the default; its metadata, a
:class:`RunOption` row, gives the value's parser, the help text and where else the option
applies. :data:`OPTIONS` is that table, and everything else is derived from it:

- :func:`add_cli_arguments`: the ``streamslo run`` / ``soak`` arguments;
- :func:`scenario_values`: the ``[load]`` table of a scenario file (an unknown key is an error);
- :func:`register_locust_arguments`: the options on Locust's own parser (and its web UI form);
- :func:`locust_argv`: the Locust command line ``streamslo run`` builds;
- :func:`from_locust`: the typed values back from Locust's parsed options;
- :func:`markdown_reference`: the options table of ``docs/cli.md``
  (``python -m streamslo.options.run_options docs/cli.md`` rewrites it).

Adding an option is one field below (plus the code that uses it). Durations accept seconds or
``500ms``/``30s``/``5m``/``1h`` wherever they are given.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from streamslo.errors import BadInputError, SLOFileError
from streamslo.figures.registry import GoodputBounds
from streamslo.options.cancel import CancelAfterSpec
from streamslo.options.declare import add_arguments, rows
from streamslo.options.lengths import LengthDist, LengthSpec, SecondsDist, SecondsSpec
from streamslo.options.toml_file import TomlFile
from streamslo.options.values import (
    Choice,
    Duration,
    ForcingValue,
    Fraction,
    Integer,
    IntList,
    Number,
    PathValue,
    RunOption,
    Stages,
    Switch,
    Text,
    TextList,
    ValueType,
    option,
)
from streamslo.results.markup import markdown_cell
from streamslo.stream.dialects import Dialect
from streamslo.transport.common import ClientLimits  # the client's own defaults, stated once

if TYPE_CHECKING:
    from locust.argument_parser import LocustArgumentParser

__all__ = [
    "BEGIN",
    "DEFAULTS",
    "END",
    "OPTIONS",
    "GoodputSpec",
    "RunOption",
    "RunOptions",
    "add_cli_arguments",
    "cli_values",
    "from_locust",
    "locust_argv",
    "markdown_reference",
    "register_locust_arguments",
    "scenario_values",
    "update_reference",
]


# ------------------------------------------------------------------------------- the table
_ENDPOINTS = ("chat", "completions", "stream")
_APIS = tuple(d.value for d in Dialect)


@dataclass(frozen=True)
class GoodputSpec(ValueType):
    """vLLM's goodput bounds, ``ttft:500 tpot:50 e2el:2000`` (milliseconds): several words on
    a command line (``nargs``), one string or a list in a scenario. Kept as canonical text
    (``ttft_ms:500 tpot_ms:50``); empty: no goodput."""

    nargs: ClassVar[str] = "+"
    _metavar: ClassVar[str] = "KEY:MS"

    def parse(self, raw: object) -> str:
        if isinstance(raw, (list, tuple)):
            raw = " ".join(str(r) for r in raw)
        text = self.text(raw)
        if not text:
            return ""
        bounds = GoodputBounds.parse(text)
        return " ".join(f"{k}:{v:g}" for k, v in bounds.as_dict().items())

    def describe(self) -> str:
        return "`KEY:MS` words (`ttft`, `tpot`, `e2el`, `ttfo`)"


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """Every option of a load run, typed, with its one default. Each field is a table row."""

    # --- target and output
    host: str = field(
        default="",
        metadata=option(
            Text(optional=False, name="URL"),
            "base URL of the server, e.g. http://127.0.0.1:8000",
            locust=False,
            native="--host",
        ),
    )
    out: Path | None = field(
        default=None,
        metadata=option(
            PathValue(),
            "the results directory to write (new or empty)",
            scenario=False,
            locust="--results-dir",
            web_ui=False,
        ),
    )
    scenario: str | None = field(
        default=None,
        metadata=option(
            Text(name="FILE"),
            "a scenario TOML file: [scenarios.NAME] k6 executors (docs/scenarios.md), [load] options "
            "(keys are these options' names, e.g. max_tokens) and [thresholds]",
            scenario=False,
            locust=False,
        ),
    )
    slo_source: str | None = field(
        default=None,
        metadata=option(
            Text(name="FILE"),
            "an SLO TOML file (default: the scenario's [thresholds], else the incidents' SLO)",
            flag="--slo",
            scenario=False,
            web_ui=False,
        ),
    )
    # --- what each request asks for
    protocol: str = field(
        default="sse",
        metadata=option(Choice(("sse", "ws", "mixed")), "transport: SSE, WebSocket, or half each"),
    )
    endpoint: str = field(
        default="chat",
        metadata=option(
            Choice(_ENDPOINTS),
            "/v1/chat/completions, /v1/completions or /v1/stream (the older form of --api)",
        ),
    )
    api: str = field(
        default="",
        metadata=option(
            Choice(_APIS, empty=True),
            "the streaming dialect (docs/outcomes.md): OpenAI chat or completions chunks, "
            "OpenAI Responses events (/v1/responses) or Anthropic Messages events (/v1/messages); "
            "default: the one --endpoint names",
        ),
    )
    path: str | None = field(
        default=None,
        metadata=option(
            Text(name="PATH"), "the request path (default: the dialect's, e.g. /v1/responses)"
        ),
    )
    model: str | None = field(
        default=None,
        metadata=option(Text(name="NAME"), "model name (default: the first of /v1/models)"),
    )
    max_tokens: int = field(default=64, metadata=option(Integer(1), "max_tokens per request"))
    prompt_file: str | None = field(
        default=None,
        metadata=option(
            Text(name="FILE"), "prompts: one per line, or JSON Lines with 'prompt'", web_ui=False
        ),
    )
    dataset: str | None = field(
        default=None,
        metadata=option(
            Text(name="PATH"),
            "prompts from a dataset: ShareGPT JSON, JSON Lines, or a local Hugging Face dataset folder",
            web_ui=False,
        ),
    )
    dataset_format: str = field(
        default="auto",
        metadata=option(
            Choice(("auto", "sharegpt", "jsonl", "hf")), "--dataset's format (auto: detected)"
        ),
    )
    prompt_tokens: LengthDist = field(
        default=LengthDist.fixed(16),
        metadata=option(
            LengthSpec(),
            "synthetic prompt length (words, or tokens with --tokenizer): N, uniform:MIN,MAX or normal:MEAN,STDEV[,MIN[,MAX]]",
        ),
    )
    output_tokens: LengthDist | None = field(
        default=None,
        metadata=option(
            LengthSpec(optional=True),
            "per-request max_tokens drawn from a length distribution (default: the dataset's reply length, else --max-tokens)",
        ),
    )
    tokenizer: str | None = field(
        default=None,
        metadata=option(
            Text(name="PATH"),
            "a local tokenizer.json (or a folder holding one): lengths in tokens, not words; "
            "its folder's end-of-sequence ids for a logit_bias forced length",
            web_ui=False,
        ),
    )
    turns: int = field(
        default=1,
        metadata=option(
            Integer(1),
            "requests per conversation; each carries the history (the answers as they streamed)",
        ),
    )
    system_prompt: str | None = field(
        default=None,
        metadata=option(
            Text(name="TEXT|@FILE"), "a system message first in every chat request", web_ui=False
        ),
    )
    temperature: float = field(default=0.0, metadata=option(Number(0), "sampling temperature"))
    seed: int = field(default=0, metadata=option(Integer(), "seed for prompts and arrivals"))
    ignore_eos: bool = field(
        default=True,
        metadata=option(
            Switch(),
            "do not send ignore_eos: true (for servers that reject it)",
            flag="--no-ignore-eos",
            inverted=True,
        ),
    )
    usage: bool = field(
        default=True,
        metadata=option(
            Switch(),
            "do not ask for stream_options.include_usage",
            flag="--no-usage",
            inverted=True,
        ),
    )
    done_marker: bool = field(
        default=True,
        metadata=option(
            Switch(),
            "streams end with the body, not with [DONE]",
            flag="--no-done-marker",
            inverted=True,
        ),
    )
    coalesced_chunks: bool = field(
        default=False,
        metadata=option(Switch(), "the server may pack several tokens into one chunk"),
    )
    token_ids: str = field(
        default="auto",
        metadata=option(
            Choice(("auto", "on", "off")),
            "ask for each chunk's token ids (vLLM's return_token_ids: "
            "exact token counts when it merges tokens into one chunk); auto: when /v1/models says vLLM",
        ),
    )
    forced_length: str = field(
        default="auto",
        metadata=option(
            ForcingValue(),
            "how each request makes the server send exactly max_tokens tokens, so that a stream "
            "cut short that says 'stop' can be seen: auto learns it before the load "
            "(ignore_eos, min_tokens, transformers' min_new_tokens, a logit_bias against the "
            "end-of-sequence tokens); none: not forced",
        ),
    )
    eos_token_id: tuple[int, ...] = field(
        default=(),
        metadata=option(
            IntList(),
            "the model's end-of-sequence token ids, for a logit_bias against them (default: "
            "from --tokenizer, or the server's tokenizer endpoint)",
        ),
    )
    reference: str = field(
        default="auto",
        metadata=option(
            Choice(("auto", "on", "off")),
            "reference replies: before the load, the idle server's greedy reply to each prompt, "
            "one at a time; a stream that stops on a strict prefix of its reference is a silent "
            "truncation. auto: where no forced length works",
            locust=False,
        ),
    )
    reference_prompts: int = field(
        default=16,
        metadata=option(
            Integer(1),
            "with reference replies: the distinct prompts the run sends (each has its reference)",
        ),
    )
    reference_replies: str = field(
        default="",
        metadata=option(
            Text(optional=False, name="JSON"),
            "the reference replies streamslo run recorded (internal: JSON, prompt digest -> reply)",
            cli=False,
            scenario=False,
            web_ui=False,
            hidden=True,
        ),
    )
    adapt: bool = field(
        default=True,
        metadata=option(
            Switch(),
            "take the request flags as given: no probes before the load to learn what the server "
            "accepts and honours (docs/servers.md)",
            flag="--no-adapt",
            inverted=True,
            locust=False,
        ),
    )
    ws_request_template: str | None = field(
        default=None,
        metadata=option(
            Text(name="FILE"),
            'WebSocket: a JSON file whose string "{{request}}" is replaced by each request body',
            web_ui=False,
        ),
    )
    ws_chunk_path: str | None = field(
        default=None,
        metadata=option(
            Text(name="PATH"),
            "WebSocket: where the OpenAI chunk sits in each message, dotted (e.g. data.chunk)",
        ),
    )
    ws_done_message: str = field(
        default="[DONE]",
        metadata=option(
            Text(optional=False, name="TEXT"),
            "WebSocket: the message that ends a request: text, or a JSON object the message contains",
        ),
    )
    goodput: str = field(
        default="",
        metadata=option(
            GoodputSpec(),
            "per-request SLOs for goodput, vLLM's syntax in ms: ttft:500 tpot:50 e2el:2000 (ttfo: the first answer token)",
            locust=False,
        ),
    )
    # --- credentials and transport
    api_key_env: str | None = field(
        default=None,
        metadata=option(
            Text(name="VAR"), "environment variable holding a bearer API key", secret=True
        ),
    )
    header: tuple[str, ...] = field(
        default=(),
        repr=False,
        metadata=option(
            TextList(name="'NAME: VALUE'"),
            "extra request header, repeatable; ${VAR} in VALUE reads the environment",
            scenario="headers",
            secret=True,
        ),
    )
    header_file: str | None = field(
        default=None,
        metadata=option(
            Text(name="FILE"),
            "extra request headers, one 'Name: value' per line (all kept secret)",
            secret=True,
        ),
    )
    insecure: bool = field(
        default=False, metadata=option(Switch(), "https: skip certificate verification")
    )
    # --- how clients read and give up
    slow_readers: float = field(
        default=0.0, metadata=option(Fraction(), "fraction of users that read slowly")
    )
    slow_read_pause: float = field(
        default=0.05, metadata=option(Duration(), "slow readers: pause between reads")
    )
    stall_timeout: float = field(
        default=ClientLimits.stall_timeout,
        metadata=option(
            Duration(), "no token for this long once the stream began (before it: no head): stalled"
        ),
    )
    first_token_timeout: float = field(
        default=0.0,
        metadata=option(
            Duration(),
            "response head to first token at most this long (long prefills; 0: the stall timeout)",
        ),
    )
    request_timeout: float = field(
        default=ClientLimits.request_timeout,
        metadata=option(Duration(), "whole-request deadline: timeout"),
    )
    # --- how much load, and when
    users: int = field(
        default=50,
        metadata=option(Integer(1), "concurrent users (streams)", locust=False, native="-u"),
    )
    spawn_rate: float = field(
        default=0.0,
        metadata=option(
            Number(0),
            "users started per second (0: all within a second)",
            locust=False,
            native="-r",
        ),
    )
    duration: float = field(
        default=60.0,
        metadata=option(
            Duration(),
            "how long new streams start, from the first request (start-up not included), after the warm-up",
            locust=False,
            native="--run-time",
        ),
    )
    warmup: float = field(
        default=0.0,
        metadata=option(
            Duration(), "streams started within this long of the start are left out of every figure"
        ),
    )
    drain: float = field(
        default=30.0,
        metadata=option(
            Duration(),
            "time the streams in flight get at the end",
            locust=False,
            native="--stop-timeout",
        ),
    )
    think_time: float = field(
        default=0.0, metadata=option(Duration(), "closed loop: pause between a user's streams")
    )
    request_rate: float = field(
        default=0.0,
        metadata=option(
            Number(0), "open loop: requests per second over all processes (0: closed loop)"
        ),
    )
    burstiness: float = field(
        default=1.0,
        metadata=option(
            Number(0, above=True), "open loop: gamma shape of the arrivals (1: Poisson)"
        ),
    )
    max_concurrency: int = field(
        default=0, metadata=option(Integer(0), "open loop: streams in flight at most (0: no cap)")
    )
    stages: str = field(
        default="",
        metadata=option(Stages(), 'k6-style stages "30s:50,1m:50,10s:0" (duration:users)'),
    )
    scenarios: str = field(
        default="",
        metadata=option(
            Text(name="JSON"),
            "the scenario file's [scenarios.*] tables as JSON (set by streamslo run)",
            cli=False,
            scenario=False,
            locust="--scenarios-json",
            web_ui=False,
            hidden=True,
        ),
    )
    load_time: float = field(
        default=0.0,
        metadata=option(
            Duration(),
            "the load's length from the first request (set by streamslo run: warm-up plus duration)",
            cli=False,
            scenario=False,
            locust="--load-time",
            web_ui=False,
            hidden=True,
        ),
    )
    shape: str = field(
        default="",
        metadata=option(
            Choice(("ramp", "steps", "spike"), empty=True),
            "a built-in load shape over --users and --duration",
        ),
    )
    itl_events: str = field(
        default="per-stream",
        metadata=option(
            Choice(("per-stream", "per-gap", "off")),
            "ITL in Locust's statistics: each stream's mean and max gap, every gap, or none",
        ),
    )
    # --- long runs: windows, progress, the target's metrics
    window: float = field(
        default=10.0,
        metadata=option(
            Duration(), "length of a windows.csv window (live figures, budget burn rates)"
        ),
    )
    metrics_url: str | None = field(
        default=None,
        metadata=option(
            Text(name="URL"),
            "the target's Prometheus metrics to scrape during the run, e.g. "
            "http://127.0.0.1:8000/metrics (the bundled server's are found by themselves)",
            locust=False,
        ),
    )
    prometheus_port: int = field(
        default=0,
        metadata=option(
            Integer(0),
            "serve the load generator's own metrics for Prometheus on 127.0.0.1:PORT (0: off)",
            locust=False,
        ),
    )
    progress: str = field(
        default="auto",
        metadata=option(
            Choice(("auto", "live", "plain", "off")),
            "progress output on stderr: a live line (a terminal), a plain line every --progress-interval (CI logs), or none",
            locust=False,
        ),
    )
    progress_interval: float = field(
        default=30.0,
        metadata=option(Duration(), "seconds between plain progress lines", locust=False),
    )
    # --- the load generator
    processes: int = field(
        default=1,
        metadata=option(
            Integer(1),
            "Locust processes generating load",
            locust="--processes-hint",
            web_ui=False,
            hidden=True,
            native="--processes",
        ),
    )
    master: bool = field(
        default=False,
        metadata=option(
            Switch(),
            "distributed: be Locust's master; the load comes from `locust -f "
            "locustfiles/streaming_locustfile.py --worker --master-host HOST` processes",
            locust=False,
            native="--master",
        ),
    )
    expect_workers: int = field(
        default=1,
        metadata=option(
            Integer(1),
            "--master: the workers to wait for before the load starts",
            locust=False,
            native="--expect-workers",
        ),
    )
    master_bind_host: str = field(
        default="127.0.0.1",
        metadata=option(
            Text(optional=False, name="ADDRESS"),
            "--master: the interface workers connect to (* for all)",
            locust=False,
            native="--master-bind-host",
        ),
    )
    master_bind_port: int = field(
        default=5557,
        metadata=option(
            Integer(1),
            "--master: the port workers connect to",
            locust=False,
            native="--master-bind-port",
        ),
    )
    generator_cpus: str | None = field(
        default=None,
        metadata=option(
            Text(name="LIST"), "pin the load generator with taskset -c LIST", locust=False
        ),
    )
    allow_invalid: bool = field(
        default=False,
        metadata=option(
            Switch(),
            "a saturated load generator does not fail the run",
            scenario=False,
            locust=False,
        ),
    )
    quiet: bool = field(
        default=False,
        metadata=option(Switch(), "print no summary table", scenario=False, locust=False),
    )
    # --- replay: traces, shared prefixes, clients that hang up (docs/workloads.md)
    trace: str | None = field(
        default=None,
        metadata=option(
            Text(name="PATH"),
            "replay a request trace with its timing and lengths (Mooncake JSONL, JSONL/CSV "
            "with a time column, BurstGPT CSV; docs/workloads.md); the run lasts the trace",
            web_ui=False,
        ),
    )
    trace_speed: float = field(
        default=1.0,
        metadata=option(
            Number(0, above=True), "--trace: replay speed (2: twice the arrivals per second)"
        ),
    )
    trace_format: str = field(
        default="auto",
        metadata=option(
            Choice(("auto", "mooncake", "jsonl", "csv", "burstgpt")),
            "--trace's format (auto: detected)",
        ),
    )
    trace_late: str = field(
        default="send",
        metadata=option(
            Choice(("send", "drop")),
            "--trace: an arrival the generator cannot start on time is sent late "
            "(its lateness in schedule_lag_ms) or dropped and counted (dropped_iterations)",
        ),
    )
    trace_max_lag: float = field(
        default=0.05,
        metadata=option(Duration(), "--trace-late drop: an arrival later than this is dropped"),
    )
    trace_block_tokens: int = field(
        default=512,
        metadata=option(Integer(1), "--trace: prompt tokens per hash id (Mooncake's blocks: 512)"),
    )
    sessions: str | None = field(
        default=None,
        metadata=option(
            Text(name="PATH|synthetic"),
            "agentic sessions: replay a session file (JSON Lines, a step a line; docs/workloads.md) "
            "or 'synthetic' ones shaped by --session-*; each user runs one session at a time",
            web_ui=False,
        ),
    )
    session_format: str = field(
        default="auto",
        metadata=option(
            Choice(("auto", "jsonl", "otel", "swe-agent")),
            "--sessions PATH: the file's format: streamslo's JSON Lines, an OpenTelemetry GenAI "
            "export (OTLP/JSON), SWE-agent trajectories (a .traj file or a directory); auto "
            "tells them apart",
        ),
    )
    session_steps: int = field(
        default=8,
        metadata=option(Integer(1), "--sessions synthetic: steps a session"),
    )
    session_fanout: int = field(
        default=1,
        metadata=option(
            Integer(1), "--sessions synthetic: subagent branches after the first step (1: a chain)"
        ),
    )
    tool_time: SecondsDist = field(
        default=SecondsDist("fixed", 0.5),
        metadata=option(
            SecondsSpec(), "--sessions synthetic: tool time between a step and the next"
        ),
    )
    session_input_tokens: int = field(
        default=128,
        metadata=option(
            Integer(1),
            "--sessions synthetic: each step's new input (a tool's result), on top of the "
            "context so far",
        ),
    )
    session_arrivals: str = field(
        default="users",
        metadata=option(
            Choice(("users", "rate", "trace")),
            "--sessions: how sessions arrive: 'users' (--users sessions in flight, the next when "
            "one ends), 'rate' (--session-rate a second, open loop) or 'trace' (each session at "
            "the file's at_s)",
        ),
    )
    session_rate: float = field(
        default=1.0,
        metadata=option(
            Number(0, above=True),
            "--session-arrivals rate: sessions arriving a second (all processes)",
        ),
    )
    session_tools: str = field(
        default="auto",
        metadata=option(
            Choice(("auto", "none", "off")),
            "--sessions: what a tool step sends: the tool, the model choosing (auto); the tool "
            "with tool_choice none (a server not set up for tool calls: vLLM without "
            "--enable-auto-tool-choice, llama.cpp without --jinja); no tool (off)",
        ),
    )
    session_header: str = field(
        default="X-Session-ID",
        metadata=option(
            Text(optional=False, name="NAME"),
            "--sessions: a header naming the session on each of its requests, so a router can "
            "keep it on one replica (empty: none)",
        ),
    )
    on_broken_step: str = field(
        default="abort",
        metadata=option(
            Choice(("abort", "continue")),
            "--sessions: after a step that did not end ok, send none of the session's later "
            "steps (abort) or go on with what the step brought (continue)",
        ),
    )
    prefix_groups: int = field(
        default=0,
        metadata=option(
            Integer(0),
            "synthetic prompts share N prefixes (system prompts, documents), each group an equal "
            "share of the traffic (0: none)",
        ),
    )
    prefix_tokens: LengthDist = field(
        default=LengthDist.fixed(256),
        metadata=option(
            LengthSpec(),
            "--prefix-groups: each shared prefix's length (words, or tokens with --tokenizer)",
        ),
    )
    cancel_rate: float = field(
        default=0.0,
        metadata=option(
            Fraction(),
            "share of streams the client hangs up on (client_cancelled; AIPerf's "
            "--request-cancellation-rate, as a fraction)",
        ),
    )
    cancel_after: str = field(
        default="2s",
        metadata=option(
            CancelAfterSpec(),
            "--cancel-rate: when the client hangs up, from the request's start: a time, "
            "N content chunks (20tok), or uniform:LOW,HIGH",
        ),
    )
    cancel_check: float = field(
        default=10.0,
        metadata=option(
            Duration(),
            "--cancel-rate with a metrics URL: after the run the server's in-flight gauge must "
            "return to its baseline within this long (the verdict says if not)",
            locust=False,
        ),
    )
    history: str | None = field(
        default=None,
        metadata=option(
            Text(name="PATH"),
            "add the finished run to this history store, for trends and regression verdicts "
            "over nights (docs/history.md)",
            locust=False,
        ),
    )
    preflight: bool = field(
        default=True,
        metadata=option(
            Switch(),
            "skip the preflight: one short request per protocol before any load, which stops a run "
            "against a wrong target (no connection, TLS, 401/403, 404, unknown model, not a stream) with exit 2",
            flag="--no-preflight",
            inverted=True,
            locust=False,
        ),
    )


OPTIONS: tuple[RunOption, ...] = rows(RunOptions)
"""The table: one row per field of :class:`RunOptions`, in order."""

DEFAULTS = RunOptions()
"""Every option at its default: for other typed objects whose defaults must be the same
(``RequestOptions``), so that a default is written once."""

_BY_SCENARIO_KEY = {o.scenario_key: o for o in OPTIONS if o.scenario_key}


# ------------------------------------------------------------------------------ derivations
def add_cli_arguments(
    parser: argparse.ArgumentParser,
    *,
    required: Iterable[str] = (),
    help: Mapping[str, str] | None = None,
    exclude: Iterable[str] = (),
    only: Iterable[str] | None = None,
    defaults: Mapping[str, object] | None = None,
) -> None:
    """Add every ``streamslo run`` option to ``parser`` (or the few a command takes).

    Every default is None, so that :func:`cli_values` knows what the command line set (a
    scenario's value applies otherwise, then the table's default), unless ``defaults`` gives
    the command's own.

    Args:
        parser: the sub-command's parser.
        required: option names the command requires.
        help: option name -> help text that replaces the table's for this command.
        exclude: option names the command refuses (left out of its parser and its help).
        only: the option names the command takes (None: every one); ``compare`` takes a few.
        defaults: option name -> the command's own default (its help says so).
    """
    add_arguments(
        parser,
        RunOptions,
        defaults=False,
        required=required,
        help=help,
        exclude=exclude,
        only=only,
        own_defaults=defaults,
    )


def cli_values(args: argparse.Namespace) -> dict[str, Any]:
    """The options the command line set (those :func:`add_cli_arguments` left at None are
    left out); lists become tuples, and the words of a multi-word option are parsed together.

    Raises:
        BadInputError: a multi-word option with a bad value (the message names the flag).
    """
    out: dict[str, Any] = {}
    for opt in OPTIONS:
        value = getattr(args, opt.name, None) if opt.cli else None
        if value is not None and getattr(opt.type, "nargs", None):
            try:
                value = opt.type.parse(value)
            except ValueError as exc:
                raise BadInputError(f"{opt.flag}: {exc}") from None
        if value is not None:
            out[opt.name] = tuple(value) if isinstance(value, list) else value
    return out


def scenario_values(table: object, source: str, toml: TomlFile | None = None) -> dict[str, object]:
    """The options of a scenario's ``[load]`` table (``-`` and ``_`` alike in keys).

    Args:
        table: the ``[load]`` table.
        source: the file (named in errors).
        toml: the parsed file, so that errors can name the line too.

    Raises:
        BadInputError: not a table, an unknown key, or a bad value (the message names the
            file, the line when known, and the key).
    """

    def fail(key: str | None, message: str) -> BadInputError:
        if toml is None:
            return BadInputError(f"{source}: {message}")
        line = toml.key_line("load", key) if key is not None else toml.table_line("load")
        return SLOFileError(source, line, message)

    if not isinstance(table, dict):
        raise fail(None, "[load] must be a table")
    out: dict[str, Any] = {}
    for key, raw in table.items():
        opt = _BY_SCENARIO_KEY.get(str(key).replace("-", "_"))
        if opt is None:
            known = ", ".join(sorted(_BY_SCENARIO_KEY))
            raise fail(str(key), f"unknown [load] key {key!r} (known keys: {known})")
        try:
            out[opt.name] = opt.type.parse(raw)
        except ValueError as exc:
            raise fail(str(key), f"[load] {key}: {exc}") from None
    return out


def register_locust_arguments(parser: LocustArgumentParser) -> None:
    """Add the stream users' options to Locust's parser (``init_command_line_parser``).

    Secrets and local paths stay out of the web UI form (``include_in_web_ui=False``).
    """
    for opt in OPTIONS:
        if opt.locust_flag is None:
            continue
        kw: dict[str, Any] = {
            "help": argparse.SUPPRESS if opt.hidden else opt.help_text().replace("%", "%%"),
            "include_in_web_ui": opt.in_web_ui,
        }
        if isinstance(opt.type, Switch):
            kw.update(action="store_true", default=False)
        elif isinstance(opt.type, TextList):
            kw.update(action="append", default=[])
        else:
            kw["default"] = opt.type.wire(opt.default)
            if isinstance(opt.type, Choice):
                kw["choices"] = [*([""] if opt.type.empty else []), *opt.type.choices]
            else:
                kw["type"] = opt.type.locust_type
        parser.add_argument(opt.locust_flag, **kw)


def from_locust(parsed: object) -> dict[str, Any]:
    """Typed values of every option Locust's parser holds, by field name.

    Raises:
        BadInputError: a bad value (the message names the flag).
    """
    return {
        o.name: o.from_wire(getattr(parsed, o.locust_dest, None))
        for o in OPTIONS
        if o.locust_dest is not None
    }


def locust_argv(values: RunOptions) -> list[str]:
    """The Locust command-line arguments for the stream users' options that differ from their
    defaults. Secrets are never among them (``streamslo run`` passes those by environment);
    Locust's own options (users, run time...) are the runner's to translate."""
    argv: list[str] = []
    for opt in OPTIONS:
        if opt.forwarded:
            value = getattr(values, opt.name)
            if value != opt.default:
                argv += opt.argv(value)
    return argv


# ---------------------------------------------------------------------------- documentation
BEGIN = (
    "<!-- BEGIN run options: generated by `python -m streamslo.options.run_options docs/cli.md` -->"
)
END = "<!-- END run options -->"


def markdown_reference() -> str:
    """The options table of ``docs/cli.md`` (Markdown, between :data:`BEGIN` and :data:`END`)."""
    lines = [
        BEGIN,
        "",
        "| `streamslo run` option | value | default | scenario `[load]` key | Locust option | web UI | meaning |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for o in OPTIONS:
        flag = f"`{o.flag}`" if o.cli else "—"
        if o.inverted:
            default = "on (the flag turns it off)"
        elif isinstance(o.type, Switch):
            default = "off"
        elif o.default in (None, "", ()):
            default = "—"
        else:
            default = f"`{o.type.show(o.default)}`"
        key = f"`{o.scenario_key}`" if o.scenario_key else "—"
        if o.scenario_key and o.inverted:
            key += " (`false` = the flag)"
        if o.locust_flag:
            locust = f"`{o.locust_flag}`" + (" (by environment)" if o.secret else "")
            if o.locust_native:
                locust = f"Locust's `{o.locust_native}`, and {locust}"
        elif o.locust_native:
            locust = f"Locust's `{o.locust_native}`"
        else:
            locust = "—"
        ui = ("yes" if o.in_web_ui else "no") if o.locust_flag else "—"
        lines.append(
            f"| {flag} | {markdown_cell(o.type.describe())} | {markdown_cell(default)} | {key} | {locust} | {ui} | {markdown_cell(o.help)} |"
        )
    lines += ["", END]
    return "\n".join(lines)


def update_reference(path: str | Path) -> bool:
    """Rewrite the generated table in ``path`` (between the markers). Returns whether it changed.

    Raises:
        BadInputError: the file lacks the markers.
    """
    p = Path(path)
    text = p.read_text(encoding="utf-8")
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise BadInputError(f"{p}: no generated run-options block ({BEGIN!r} ... {END!r})")
    new = text[:start] + markdown_reference() + text[end + len(END) :]
    if new != text:
        p.write_text(new, encoding="utf-8")
    return new != text


if __name__ == "__main__":
    for target in sys.argv[1:] or ["docs/cli.md"]:
        print(f"{target}: {'updated' if update_reference(target) else 'up to date'}")
