"""A run's configuration, assembled once (docs/cli.md): the command line over a scenario file's
``[load]`` over the run options' defaults (:mod:`streamslo.options.run_options`), the SLO file,
and what ``[scenarios.*]``, ``--trace`` and ``--sessions`` decide for the Locust run.

:class:`RunConfig` is what :mod:`streamslo.run.execute` runs; it remembers which options the user
set (:attr:`RunConfig.given`), so that what the preflight learns of the server
(:mod:`streamslo.run.adapt`) never overrides a flag.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streamslo.errors import BadInputError, SLOFileError
from streamslo.options.redact import HEADERS_ENV, Headers, resolve_headers
from streamslo.options.run_options import OPTIONS, RunOptions, cli_values
from streamslo.scenario_files import resolve_scenario
from streamslo.slo.budget import read_slo_file
from streamslo.stream.dialects import Dialect
from streamslo.stream.envelope import WSEnvelope
from streamslo.workload.requests import Workload, resolve_system_prompt
from streamslo.workload.scenario_file import read_scenario
from streamslo.workload.scenarios import from_wire
from streamslo.workload.sessions import read_sessions
from streamslo.workload.trace import describe_trace

if TYPE_CHECKING:
    from streamslo.slo.budget import Budget
    from streamslo.slo.thresholds import SLO
    from streamslo.workload.scenario_file import ScenarioFile

__all__ = [
    "RunConfig",
    "config_from_args",
    "describe_scenarios",
    "describe_workload",
    "protocol_mix",
]

_OPTION_NAMES = frozenset(o.name for o in OPTIONS)


@dataclass(frozen=True, kw_only=True)
class RunConfig(RunOptions):
    """One headless load run: every run option (:class:`~streamslo.options.run_options.RunOptions`),
    with a host and a results directory, and what is built from them."""

    host: str
    out: Path
    slo: SLO | None = None
    """A parsed SLO; None: the incidents' default."""
    budget: Budget | None = None
    """The error budget of the SLO file or scenario, or None."""
    extra_locust_args: tuple[str, ...] = field(default_factory=tuple)
    given: frozenset[str] = frozenset()
    """The run options the user set (command line or scenario file): what the preflight learns
    of the server never replaces them."""
    headers: Headers = field(init=False, repr=False, compare=False)
    """``--header-file``, ``--header`` and ``--api-key-env`` resolved (validated at once)."""

    def __post_init__(self) -> None:
        headers = resolve_headers(
            self.header,
            self.header_file,
            self.api_key_env,
            anthropic=self.api == Dialect.MESSAGES,
        )
        object.__setattr__(self, "headers", headers)

    def locust_environment(self) -> dict[str, str]:
        """What the Locust subprocess's environment gets besides ours: the headers (values
        never go on its command line, where ``ps`` and CI logs show them)."""
        return {HEADERS_ENV: self.headers.to_env()} if self.headers else {}


def _scenario_run(values: dict[str, Any], cli: dict[str, Any]) -> dict[str, Any]:
    """What ``[scenarios.*]`` decide for the Locust run: its length (the last scenario's end),
    one :class:`~streamslo.loadgen.executors.ScenarioUser` per generator process, and the stop
    timeout (the longest ``gracefulStop``, unless ``--drain`` is given).

    Raises:
        BadInputError: a whole-run load option as well (``stages``, ``shape``, ``request_rate``;
            ``--users``, ``--duration``: the scenarios say how many and how long).
    """

    clash = [k for k in ("stages", "shape", "request_rate") if values.get(k)]
    clash += [k for k in ("users", "duration") if k in values]
    if clash:
        raise BadInputError(
            f"{values.get('scenario')}: [scenarios.*] set the load; remove {', '.join(clash)} "
            "(a [load] or command-line option), or move it into a scenario"
        )
    scenarios = from_wire(values["scenarios"])
    generators = (
        values.get("expect_workers", 1) if values.get("master") else values.get("processes", 1)
    )
    out: dict[str, Any] = {"duration": max(sc.end for sc in scenarios), "users": max(1, generators)}
    if "drain" not in cli:
        out["drain"] = max(sc.graceful_stop for sc in scenarios)
    return out


def _trace_run(values: dict[str, Any], cli: dict[str, Any]) -> dict[str, Any]:
    """What ``--trace`` decides for the Locust run: one replaying user per generator process,
    and a length of the trace's span at its speed (unless ``--duration`` cuts it shorter).

    Raises:
        BadInputError: scenarios, a request rate, stages or a shape as well (each sets the
            arrivals), or an unreadable trace.
    """

    clash = [k for k in ("scenarios", "stages", "shape", "request_rate") if values.get(k)]
    if clash:
        raise BadInputError(f"--trace sets the arrivals; remove {', '.join(clash)}")
    info = describe_trace(values["trace"], values.get("trace_format", "auto"))
    span = info.span_s / values.get("trace_speed", 1.0)
    generators = (
        values.get("expect_workers", 1) if values.get("master") else values.get("processes", 1)
    )
    out: dict[str, Any] = {"users": max(1, generators)}
    if "duration" not in cli:
        out["duration"] = max(1.0, math.ceil(span + 1.0))
    return out


def config_from_args(args: argparse.Namespace, scenario: ScenarioFile | None = None) -> RunConfig:
    """Merge the command line over the scenario file (if any), over the defaults.

    Args:
        args: the parsed command line.
        scenario: the scenario file ``args.scenario`` names, when the caller has read it
            already (``soak`` reads it for its host first); else it is read here.

    Raises:
        BadInputError: a missing or bad value.
    """

    values: dict[str, Any] = {}
    slo = budget = None
    cli = cli_values(args)
    if cli.get("scenario"):
        if scenario is None:
            scenario = read_scenario(resolve_scenario(cli["scenario"]))
        cli["scenario"] = scenario.path
        values, slo, budget = dict(scenario.values), scenario.slo, scenario.budget
    values.update(cli)
    if values.get("slo_source"):
        slo, own_budget = read_slo_file(values["slo_source"])
        if slo is None:
            raise SLOFileError(
                values["slo_source"],
                None,
                'no [thresholds] table: expected e.g. [thresholds] then itl_ms = ["p(99)<200"]',
            )
        budget = own_budget or budget
    if values.get("scenarios"):
        values.update(_scenario_run(values, cli))
    if values.get("trace"):
        values.update(_trace_run(values, cli))
    if values.get("sessions"):
        _check_sessions(values)
    if not values.get("host"):
        raise BadInputError("--host is required (or 'host' in the scenario's [load])")
    if not values.get("out"):
        raise BadInputError("--out DIR is required")
    if values.get("master") and values.get("processes", 1) > 1:
        raise BadInputError(
            "--master takes its load from workers: give --expect-workers, not --processes"
        )
    window = values.get("window", 10.0)
    if not window > 0:
        raise BadInputError(f"--window must be longer than 0, not {window:g}")
    source = budget.source if budget is not None else ""
    for a in budget.alerts if budget is not None else ():
        if a.short_s < window:
            raise BadInputError(
                f"{source}: the alert {a.name}'s short window ({a.short_s:g} s) is shorter than "
                f"--window ({window:g} s): lower --window, or lower [budget] time_scale"
            )
    return RunConfig(**values, slo=slo, budget=budget, given=frozenset(values) & _OPTION_NAMES)


def _check_sessions(values: dict[str, Any]) -> None:
    """``--sessions`` sets what each request sends and when: no other source of requests or
    arrivals beside it; a session file is read now (bad input before any load).

    Raises:
        BadInputError: a clash, or a session file with a bad line (file and line named).
    """
    clash = [
        flag
        for flag, on in (
            ("--trace", values.get("trace")),
            ("[scenarios]", values.get("scenarios")),
            ("--request-rate", (values.get("request_rate") or 0) > 0),
            ("--turns", (values.get("turns") or 1) > 1),
        )
        if on
    ]
    if clash:
        raise BadInputError(
            f"--sessions sets the requests and their order; remove {', '.join(clash)}"
        )
    if values["sessions"] != "synthetic":
        read_sessions(values["sessions"], values.get("session_format", "auto"))


def describe_scenarios(wire: str) -> list[dict[str, Any]] | None:
    """run.json's ``scenarios``: each one's name, executor and schedule (None without)."""
    if not wire:
        return None

    return [
        {
            "name": sc.name,
            "executor": sc.executor,
            "start_s": sc.start_time,
            "duration_s": sc.duration,
            "graceful_stop_s": sc.graceful_stop,
            "peak_vus": sc.peak_vus(),
            "protocol": dict(sc.protocol) if sc.protocol is not None else None,
        }
        for sc in from_wire(wire)
    ]


def describe_workload(cfg: RunConfig) -> dict[str, object]:
    """What ``run.json`` keeps about the prompts (``workload``: source, dataset name and
    sha256, lengths, turns); reading the inputs here rejects a bad one before Locust starts.

    Raises:
        BadInputError: an unreadable dataset, prompt file, tokenizer, system prompt file or
            WebSocket request template.
    """

    resolve_system_prompt(cfg.system_prompt)
    envelope = WSEnvelope.from_options(
        cfg.ws_request_template, cfg.ws_chunk_path, cfg.ws_done_message
    )
    out = Workload(cfg).describe()
    if not envelope.plain:
        out["ws_envelope"] = {
            "request_template": cfg.ws_request_template,
            "chunk_path": cfg.ws_chunk_path,
            "done_message": cfg.ws_done_message,
        }
    return out


def protocol_mix(cfg: RunConfig) -> dict[str, float]:
    """run.json's ``protocol_mix``: each transport's share and the slow readers'."""
    f = cfg.slow_readers
    if cfg.protocol == "mixed":
        return {"sse": 0.5, "ws": 0.5, "slow_readers": f}
    return {cfg.protocol: 1.0, "slow_readers": f}
