"""``streamslo run``: a headless Locust run that writes a results directory (SPEC §5, §7).

Locust runs as a subprocess (it monkey-patches the interpreter with gevent); this process
watches it: it scrapes the bundled server's evidence, evaluates ``abortOnFail`` thresholds as
the results grow, finalizes the directory, prints the summary and returns the exit code.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streamslo.errors import EXIT_BAD_INPUT, EXIT_OK, EXIT_THRESHOLD, BadInputError
from streamslo.units import duration_arg, fraction_arg, parse_duration, positive_int_arg

__all__ = ["RunConfig", "add_arguments", "config_from_args", "execute", "load_scenario", "main"]


@dataclass(frozen=True)
class RunConfig:
    """One headless load run."""

    host: str
    out: Path
    users: int = 50
    spawn_rate: float = 0.0
    """Users started per second; 0 starts them all within a second."""
    duration: float = 60.0
    protocol: str = "sse"
    max_tokens: int = 64
    slow_readers: float = 0.0
    stall_timeout: float = 10.0
    request_timeout: float = 300.0
    drain: float = 30.0
    warmup: float = 0.0
    processes: int = 1
    endpoint: str = "chat"
    model: str | None = None
    prompt_file: str | None = None
    prompt_tokens: int = 16
    api_key_env: str | None = None
    headers: tuple[str, ...] = ()
    insecure: bool = False
    seed: int = 0
    request_rate: float = 0.0
    burstiness: float = 1.0
    max_concurrency: int = 0
    coalesced_chunks: bool = False
    ignore_eos: bool = True
    usage: bool = True
    done_marker: bool = True
    stages: str = ""
    shape: str = ""
    scenario: str | None = None
    slo: Any = None
    """A parsed SLO (streamslo.thresholds); None: the incidents' default."""
    slo_source: str | None = None
    allow_invalid: bool = False
    generator_cpus: str | None = None
    """``taskset -c`` list for the load generator (measure with server and load apart)."""
    extra_locust_args: tuple[str, ...] = field(default_factory=tuple)
    quiet: bool = False


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``streamslo run`` options (SPEC §7). Defaults are None where a scenario may set them."""
    p.add_argument("--host", help="base URL of the server, e.g. http://127.0.0.1:8000")
    p.add_argument("--out", type=Path, help="results directory to write")
    p.add_argument("--protocol", choices=["sse", "ws", "mixed"], help="transport: SSE, WebSocket, or half each (default sse)")
    p.add_argument("--users", type=positive_int_arg, help="concurrent users (streams), default 50")
    p.add_argument("--spawn-rate", type=float, help="users started per second (default: all at once)")
    p.add_argument("--duration", type=duration_arg, help="how long new streams start (30s, 5m), default 60s")
    p.add_argument("--max-tokens", type=positive_int_arg, help="max_tokens per request, default 64")
    p.add_argument("--slow-readers", type=fraction_arg, help="fraction of users that read slowly")
    p.add_argument("--stall-timeout", type=duration_arg, help="no byte for this long: stalled (default 10s)")
    p.add_argument("--request-timeout", type=duration_arg, help="whole-request deadline (default 300s)")
    p.add_argument("--drain", type=duration_arg, help="time streams in flight get at the end (default 30s)")
    p.add_argument("--warmup", type=duration_arg, help="streams started earlier are left out")
    p.add_argument("--processes", type=positive_int_arg, help="Locust processes (master + workers)")
    p.add_argument("--coalesced-chunks", action="store_true", default=None, help="server packs tokens per chunk")
    p.add_argument("--scenario", help="a scenario TOML file ([load] options, [thresholds])")
    p.add_argument("--slo", help="an SLO TOML file (default: the incidents' SLO)")
    p.add_argument("--model", help="model name (default: the first of /v1/models)")
    p.add_argument("--endpoint", choices=["chat", "completions", "stream"], help="/v1/chat/completions (default), /v1/completions or /v1/stream")
    p.add_argument("--api-key-env", help="environment variable holding the API key")
    p.add_argument("--header", action="append", default=None, help="extra header K:V (repeatable)")
    p.add_argument("--insecure", action="store_true", default=None, help="skip TLS verification")
    p.add_argument("--prompt-file", help="prompts: one per line, or JSON Lines with 'prompt'")
    p.add_argument("--prompt-tokens", type=positive_int_arg, help="words per synthetic prompt")
    p.add_argument("--seed", type=int, help="seed for prompts and arrivals")
    p.add_argument("--request-rate", type=float, help="open loop: requests per second")
    p.add_argument("--burstiness", type=float, help="open loop: gamma shape (1 = Poisson)")
    p.add_argument("--max-concurrency", type=int, help="open loop: streams in flight at most")
    p.add_argument("--no-ignore-eos", action="store_true", default=None, help="do not send ignore_eos")
    p.add_argument("--no-usage", action="store_true", default=None, help="do not ask for usage")
    p.add_argument("--no-done-marker", action="store_true", default=None, help="streams end with the body")
    p.add_argument("--stages", help='k6-style stages "30s:50,1m:50,10s:0"')
    p.add_argument("--shape", choices=["ramp", "steps", "spike"], help="a built-in load shape over --users and --duration")
    p.add_argument("--allow-invalid", action="store_true", default=None, help="a saturated generator does not fail the run")
    p.add_argument("--generator-cpus", help="pin the load generator with taskset -c LIST")
    p.add_argument("--quiet", action="store_true", help="no summary table")


_SCENARIO_KEYS = {
    "host", "protocol", "users", "spawn_rate", "duration", "max_tokens", "slow_readers",
    "stall_timeout", "request_timeout", "drain", "warmup", "processes", "endpoint", "model",
    "prompt_file", "prompt_tokens", "api_key_env", "headers", "insecure", "seed", "request_rate",
    "burstiness", "max_concurrency", "coalesced_chunks", "ignore_eos", "usage", "done_marker",
    "stages", "shape", "generator_cpus",
}
_DURATION_KEYS = {"duration", "stall_timeout", "request_timeout", "drain", "warmup"}


def load_scenario(path: str) -> tuple[dict[str, Any], Any]:
    """A scenario file: ``[load]`` options (and k6 ``stages``), optional ``[thresholds]``."""
    import tomllib

    from streamslo import thresholds

    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise BadInputError(f"{path}: cannot read the scenario ({exc.strerror})") from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BadInputError(f"{path}: {exc}") from None
    load = doc.get("load", {})
    if not isinstance(load, dict):
        raise BadInputError(f"{path}: [load] must be a table")
    out: dict[str, Any] = {}
    for key, value in load.items():
        k = key.replace("-", "_")
        if k not in _SCENARIO_KEYS:
            raise BadInputError(f"{path}: unknown [load] key {key!r}")
        if k in _DURATION_KEYS:
            value = parse_duration(value)
        if k == "stages" and isinstance(value, list):
            value = ",".join(f"{s['duration']}:{s['target']}" for s in value)
        if k == "headers":
            value = tuple(value)
        out[k] = value
    slo = (
        thresholds.parse_thresholds_table(doc["thresholds"], source=path, text=text)
        if "thresholds" in doc
        else None
    )
    return out, slo


def config_from_args(args: argparse.Namespace) -> RunConfig:
    """Merge the scenario file (if any) under the command line, then the defaults.

    Raises:
        BadInputError: a missing or bad value.
    """
    from streamslo import thresholds

    values: dict[str, Any] = {}
    slo = None
    if args.scenario:
        values, slo = load_scenario(args.scenario)
        values["scenario"] = args.scenario
    cli = {
        "host": args.host, "out": args.out, "protocol": args.protocol, "users": args.users,
        "spawn_rate": args.spawn_rate, "duration": args.duration, "max_tokens": args.max_tokens,
        "slow_readers": args.slow_readers, "stall_timeout": args.stall_timeout,
        "request_timeout": args.request_timeout, "drain": args.drain, "warmup": args.warmup,
        "processes": args.processes, "coalesced_chunks": args.coalesced_chunks, "model": args.model,
        "endpoint": args.endpoint, "api_key_env": args.api_key_env,
        "headers": tuple(args.header) if args.header else None, "insecure": args.insecure,
        "prompt_file": args.prompt_file, "prompt_tokens": args.prompt_tokens, "seed": args.seed,
        "request_rate": args.request_rate, "burstiness": args.burstiness,
        "max_concurrency": args.max_concurrency, "stages": args.stages, "shape": args.shape,
        "allow_invalid": args.allow_invalid, "generator_cpus": args.generator_cpus,
        "ignore_eos": False if args.no_ignore_eos else None,
        "usage": False if args.no_usage else None,
        "done_marker": False if args.no_done_marker else None,
    }
    values.update({k: v for k, v in cli.items() if v is not None})
    if args.slo:
        slo = thresholds.load_slo(args.slo)
        values["slo_source"] = args.slo
    if not values.get("host"):
        raise BadInputError("--host is required (or 'host' in the scenario's [load])")
    if not values.get("out"):
        raise BadInputError("--out DIR is required")
    values["out"] = Path(values["out"])
    values["slo"] = slo
    values["quiet"] = bool(getattr(args, "quiet", False))
    return RunConfig(**values)


def _locust_command(cfg: RunConfig, locustfile: Path) -> list[str]:
    run_time = cfg.warmup + cfg.duration
    spawn = cfg.spawn_rate if cfg.spawn_rate > 0 else float(cfg.users)
    cmd = [
        sys.executable, "-m", "locust", "-f", str(locustfile), "--headless",
        "--host", cfg.host, "-u", str(cfg.users), "-r", f"{spawn:g}",
        "--run-time", f"{max(1, round(run_time))}s", "--stop-timeout", str(math.ceil(cfg.drain)),
        "--exit-code-on-error", "0", "--only-summary", "--loglevel", "WARNING",
        "--results-dir", str(cfg.out), "--protocol", cfg.protocol,
        "--max-tokens", str(cfg.max_tokens), "--endpoint", cfg.endpoint,
        "--slow-readers", f"{cfg.slow_readers:g}", "--stall-timeout", f"{cfg.stall_timeout:g}",
        "--request-timeout", f"{cfg.request_timeout:g}", "--warmup", f"{cfg.warmup:g}",
        "--seed", str(cfg.seed), "--prompt-tokens", str(cfg.prompt_tokens),
        "--request-rate", f"{cfg.request_rate:g}", "--burstiness", f"{cfg.burstiness:g}",
        "--max-concurrency", str(cfg.max_concurrency), "--processes-hint", str(cfg.processes),
    ]
    if cfg.processes > 1:
        cmd += ["--processes", str(cfg.processes), "--master-bind-host", "127.0.0.1"]
    if cfg.model:
        cmd += ["--model", cfg.model]
    if cfg.prompt_file:
        cmd += ["--prompt-file", cfg.prompt_file]
    if cfg.api_key_env:
        cmd += ["--api-key-env", cfg.api_key_env]
    for h in cfg.headers:
        cmd += ["--header", h]
    for flag, on in (
        ("--insecure", cfg.insecure), ("--coalesced-chunks", cfg.coalesced_chunks),
        ("--no-ignore-eos", not cfg.ignore_eos), ("--no-usage", not cfg.usage),
        ("--no-done-marker", not cfg.done_marker),
    ):
        if on:
            cmd.append(flag)
    if cfg.stages:
        cmd += ["--stages", cfg.stages]
    elif cfg.shape:
        cmd += ["--shape", cfg.shape]
    if cfg.generator_cpus:
        cmd = ["taskset", "-c", cfg.generator_cpus, *cmd]
    return [*cmd, *cfg.extra_locust_args]


def execute(cfg: RunConfig) -> int:
    """Run the load, finalize the directory, return the exit code.

    The results directory says ``complete: false`` from the start; it is finalized however the
    run ends: at its end, after an ``abortOnFail``, after a stop signal, or after Locust died.

    Returns:
        0 every threshold held; 99 a threshold failed (or the run is invalid, not allowed);
        1 the load generator died (the directory is finalized with ``killed: true``).

    Raises:
        BadInputError: the directory is not empty, or Locust rejected the options.
        KeyboardInterrupt: Ctrl-C or a stop signal (:class:`streamslo.signals.Interrupted`)
            stopped the run; raised again once the directory is finalized, so that a caller
            (``compare``, ``soak``) stops too.
    """
    from importlib.metadata import version

    from streamslo import __version__, thresholds
    from streamslo.errors import EXIT_INTERNAL
    from streamslo.evidence import ServerEvidence
    from streamslo.finalize import finalize, iso_utc, last_record_epoch
    from streamslo.results import Layout, load_run, new_run_json, read_run_start, write_json
    from streamslo.summary_table import format_summary

    layout = Layout(cfg.out)
    out = layout.root
    if out.exists() and any(out.iterdir()):
        raise BadInputError(f"{out}: the results directory is not empty (choose a new --out)")
    out.mkdir(parents=True, exist_ok=True)
    slo = cfg.slo if cfg.slo is not None else thresholds.DEFAULT_SLO
    evidence = ServerEvidence(cfg.host, out, insecure=cfg.insecure)
    server = evidence.probe()
    start = time.time()
    info: dict[str, Any] = {
        "tool_version": __version__,
        "start": iso_utc(start),
        "start_epoch": start,
        "target": cfg.host,
        "scenario": cfg.scenario,
        "users": cfg.users,
        "spawn_rate": cfg.spawn_rate,
        "duration_s": cfg.duration,
        "warmup_s": cfg.warmup,
        "drain_s": cfg.drain,
        "protocol": cfg.protocol,
        "protocol_mix": _mix(cfg),
        "endpoint": cfg.endpoint,
        "max_tokens": cfg.max_tokens,
        "stall_timeout": cfg.stall_timeout,
        "request_timeout": cfg.request_timeout,
        "request_rate": cfg.request_rate or None,
        "processes": cfg.processes,
        "slo": cfg.slo_source or ("scenario" if cfg.slo is not None else "default"),
        "locust_version": version("locust"),
        "server_mode": server.get("mode") if server else None,
        "server": server,
    }
    write_json(layout.run_json, new_run_json(info))
    locustfile = Path(__file__).resolve().parent / "loadgen" / "locustfile.py"
    env = dict(os.environ, STREAMSLO_RUNNER="1", PYTHONUNBUFFERED="1")
    aborted: list[Any] = []
    overran = False
    interrupted: KeyboardInterrupt | None = None
    proc: subprocess.Popen[bytes] | None = None
    with open(layout.locust_log, "wb") as log:
        try:
            proc = subprocess.Popen(
                _locust_command(cfg, locustfile), stdout=log, stderr=subprocess.STDOUT, env=env,
                start_new_session=True, preexec_fn=_die_with_parent,
            )
            evidence.start()
            aborted, overran = _watch(proc, cfg, slo, out)
        except KeyboardInterrupt as exc:
            # Ctrl-C, SIGTERM, SIGHUP: stop Locust as at the end of a run (streams in flight
            # get the drain), then finalize what was measured.
            interrupted = exc
            print("streamslo run: interrupted; stopping the load (streams in flight get the drain) "
                  "and keeping the results", file=sys.stderr, flush=True)
            if proc is not None:
                _stop(proc, cfg.drain)
        except BaseException:
            if proc is not None:
                _stop(proc, 5.0)
            raise
        finally:
            evidence.stop()
    rc = proc.returncode if proc is not None else None
    died = rc not in (0, None) and not aborted and interrupted is None and not overran
    tail = layout.locust_log.read_text(errors="replace")[-2000:] if died else ""
    if died and (rc == EXIT_BAD_INPUT or ("error:" in tail and "usage:" in tail)):
        raise BadInputError(f"locust rejected the options:\n{tail}")
    run_start = read_run_start(layout) or start
    end = time.time()
    if died:
        # Locust was killed: the run's end is its last record, not now.
        end = last_record_epoch(load_run(out)) or end
    summary, checks = finalize(
        out,
        {
            "start": iso_utc(run_start),
            "start_epoch": run_start,
            "end": iso_utc(end),
            "end_epoch": end,
            "aborted": [c.as_dict() for c in aborted] or None,
            "interrupted": interrupted is not None,
            "stop_signal": _signal_name(interrupted),
            "killed": died,
            "overran": overran,
            "locust_exit_code": rc,
        },
        slo,
        extra_checks=aborted,
    )
    data = load_run(out)
    failed = [c for c in checks if not c.passed] + list(aborted)
    if not cfg.quiet:
        print(format_summary(summary, list(aborted) + list(checks), data.run))
    if interrupted is not None:
        raise interrupted
    if died:
        print(f"streamslo run: the load generator (locust) {_exit_words(rc)} before the run's end; "
              f"what it had written is finalized in {out} (run.json killed: true). "
              f"See {layout.locust_log}:\n{tail}", file=sys.stderr)
        return EXIT_INTERNAL
    if failed:
        return EXIT_THRESHOLD
    if not data.valid and not cfg.allow_invalid:
        print(f"streamslo run: the run is invalid: {data.run.get('invalid_reason')}", file=sys.stderr)
        return EXIT_THRESHOLD
    return EXIT_OK


def _signal_name(exc: KeyboardInterrupt | None) -> str | None:
    from streamslo.signals import exit_code_of

    return None if exc is None else signal.Signals(exit_code_of(exc) - 128).name


def _exit_words(rc: int | None) -> str:
    if rc is not None and rc < 0:
        return f"was killed by {signal.Signals(-rc).name}"
    return f"exited with code {rc}"


def _die_with_parent() -> None:
    """In the Locust child, before exec: have Linux send it SIGTERM if ``streamslo run`` dies
    without stopping it (SIGKILL), so that Locust stops and flushes instead of running on."""
    if not sys.platform.startswith("linux"):
        return
    import contextlib
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG


def _mix(cfg: RunConfig) -> dict[str, float]:
    f = cfg.slow_readers
    if cfg.protocol == "mixed":
        return {"sse": 0.5, "ws": 0.5, "slow_readers": f}
    return {cfg.protocol: 1.0, "slow_readers": f}


def _watch(proc: subprocess.Popen[bytes], cfg: RunConfig, slo: Any, out: Path) -> tuple[list[Any], bool]:
    """Wait for Locust; stop it early when an abortOnFail threshold fails, or when it runs far
    past its end (a hung generator).

    Returns:
        (the abortOnFail checks that stopped it, whether it ran past its end and was stopped).
    """
    from streamslo import thresholds
    from streamslo.results import Layout, load_run

    start = time.monotonic()
    has_abort = any(getattr(t, "abort_on_fail", False) for t in getattr(slo, "thresholds", ()))
    limit = cfg.warmup + cfg.duration + cfg.drain + 120.0
    streams_csv = Layout(out).streams_csv
    while proc.poll() is None:
        time.sleep(1.0)
        elapsed = time.monotonic() - start
        if elapsed > limit:
            print(f"streamslo run: locust still runs {elapsed:.0f}s after the start; stopping it", file=sys.stderr)
            _stop(proc, 5.0)
            return [], True
        if has_abort and int(elapsed) % 5 == 0 and streams_csv.exists():
            try:
                data = load_run(out)
            except BadInputError:
                continue
            failed = thresholds.abort_check(slo, data, elapsed)
            if failed:
                _stop(proc, cfg.drain)
                return list(failed), False
    return [], False


def _stop(proc: subprocess.Popen[bytes], drain: float) -> None:
    """SIGTERM Locust's process group (streams in flight get ``drain``), SIGKILL it after."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=drain + 15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def main(args: argparse.Namespace) -> int:
    """``streamslo run``."""
    return execute(config_from_args(args))
