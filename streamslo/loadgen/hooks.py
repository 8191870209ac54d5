"""Locust event wiring for the stream users: options, user mix, load shape, results,
distributed live figures and the web UI's "Stream SLOs" tab.

:func:`install` is called once by a locustfile; everything else happens in Locust's events.

The web UI's start form shows only the options that are safe to let anyone who reaches it set;
a hand-made request that sets another one (an environment variable to send as a key, a local
file to read or write) is refused, and so is a new host while secret headers are configured.
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Any
from urllib.parse import urlsplit

from locust import events
from locust.runners import MasterRunner, WorkerRunner

from streamslo.errors import EXIT_BAD_INPUT, BadInputError
from streamslo.loadgen import admission, live_windows, loadtime, relay
from streamslo.loadgen.executors import install_done_listener
from streamslo.loadgen.live import (
    BANNER_HTML,
    TAB_STRUCTURE,
    invalid_line,
    live_payload,
    live_rows,
    live_validity,
    tab_rows,
)
from streamslo.loadgen.locust_stats import WorkerTexts, count_streams_only
from streamslo.loadgen.options import register_arguments
from streamslo.loadgen.prewarm import prewarm
from streamslo.loadgen.recorder import RunRecorder, get_recorder
from streamslo.loadgen.shapes import StagesShape, builtin_stages, parse_stages
from streamslo.options.redact import take_inherited_headers
from streamslo.options.run_options import OPTIONS
from streamslo.workload.requests import user_weights

__all__ = ["install", "swarm_refusal"]

log = logging.getLogger(__name__)

_TAB_KEY = "streamslo-slo"


def _apply_mix(environment: Any) -> None:
    opts = get_recorder(environment).opts
    if getattr(environment.parsed_options, "user_classes", None):
        return  # the user picked classes on the command line: respect that
    by_name = {cls.__name__: cls for cls in environment.user_classes}
    # Scenarios and the open loop: one generating user per process, which runs the schedule.
    for wanted, name, what in (
        (opts.scenarios, "ScenarioUser", "[scenarios.*]"),
        (opts.trace, "TraceReplayUser", "--trace"),
        (opts.request_rate > 0, "OpenLoopStreamUser", "--request-rate"),
    ):
        if wanted:
            cls = by_name.get(name)
            if cls is None:
                raise BadInputError(f"{what} needs {name} in the locustfile")
            cls.fixed_count = opts.generators
            environment.user_classes = [cls]
            return
    if opts.sessions:  # agentic sessions: --users sessions in flight, or an arrival schedule
        name = "SessionUser" if opts.session_arrivals == "users" else "SessionArrivalUser"
        cls = by_name.get(name)
        if cls is None:
            raise BadInputError(f"--sessions needs {name} in the locustfile")
        if name == "SessionArrivalUser":
            cls.fixed_count = opts.generators
        environment.user_classes = [cls]
        return
    weights = user_weights(opts.protocol, opts.slow_readers)
    if not any(name in by_name for name in weights):
        # A locustfile with one transport only (ws_locustfile.py): its classes, same rules.
        weights = user_weights("mixed", opts.slow_readers)
    chosen = []
    for name, w in weights.items():
        if name in by_name:
            by_name[name].weight = w
            chosen.append(by_name[name])
    if chosen:
        environment.user_classes = chosen


def _apply_shape(environment: Any) -> None:
    opts = get_recorder(environment).opts
    if opts.scenarios:
        return  # each scenario keeps its own schedule (streamslo.loadgen.executors)
    if opts.stages:
        stages = parse_stages(opts.stages)
    elif opts.shape:
        users = int(environment.parsed_options.num_users or 10)
        run_time = float(environment.parsed_options.run_time or 60)
        stages = builtin_stages(opts.shape, users, run_time)
    else:
        return
    shape = StagesShape(stages)
    shape.runner = environment.runner
    environment.shape_class = shape


#: Locust options that only the command line may set (not shown in the web UI form).
_NOT_FROM_WEB_UI = frozenset(o.locust_dest for o in OPTIONS if o.locust_dest and not o.in_web_ui)


def _origin(url: str | None) -> tuple[str, str, int | None] | None:
    if not url:
        return None
    parts = urlsplit(url if "://" in url else f"http://{url}")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        port = None
    return parts.scheme, (parts.hostname or ""), port


def swarm_refusal(form: dict[str, str], start_host: str | None, has_secrets: bool) -> str | None:
    """Why a web UI start request must be refused, or None to let Locust start the run.

    Args:
        form: the request's form fields.
        start_host: the host given at start (``--host``).
        has_secrets: secret headers or an API key are configured.
    """
    refused = sorted(k for k in form if k in _NOT_FROM_WEB_UI)
    if refused:
        return f"streamslo: {', '.join(refused)} can only be set on the command line"
    host = form.get("host")
    if has_secrets and host and _origin(host) != _origin(start_host):
        return (
            "streamslo: the secret headers are only sent to the host given on the command line "
            f"({start_host or 'none'}); restart Locust to test another host"
        )
    return None


def _add_banner(response: Any) -> Any:
    """Locust's page with the validity banner above its root element (an invalid run is said
    before anything else on the page)."""
    page = response.get_data(as_text=True)
    root = '<div id="root">'
    if root not in page or "streamslo-invalid" in page:
        return response
    response.set_data(page.replace(root, BANNER_HTML + root, 1))
    return response


def _install_web_ui(environment: Any, web_ui: Any) -> None:
    from flask import jsonify, request

    recorder = get_recorder(environment)
    start_host = environment.host
    web_ui.template_args["extended_tabs"] = [{"title": "Stream SLOs", "key": _TAB_KEY}]
    web_ui.template_args["extended_tables"] = [{"key": _TAB_KEY, "structure": TAB_STRUCTURE}]

    def _guard_swarm() -> Any:
        # Locust copies every form field onto its parsed options, shown in the form or not.
        if request.method != "POST" or not request.path.endswith("/swarm"):
            return None
        why = swarm_refusal(dict(request.form), start_host, bool(recorder.opts.headers.secrets))
        if why is None:
            return None
        log.warning("%s (start request from %s refused)", why, request.remote_addr)
        return jsonify({"success": False, "message": why, "host": environment.host}), 403

    def _add_slo_rows(response: Any) -> Any:
        if response.mimetype == "text/html" and request.path.rstrip("/") == "":
            return _add_banner(response)
        if request.path != "/stats/requests" or not response.is_json:
            return response
        data = response.get_json()
        data["extended_stats"] = [{"key": _TAB_KEY, "data": tab_rows(live_rows(environment))}]
        response.set_data(json.dumps(data))
        return response

    def _live() -> Any:
        return live_payload(environment)

    web_ui.app.before_request(_guard_swarm)
    web_ui.app.after_request(_add_slo_rows)
    web_ui.app.route("/streamslo/live")(_live)


_installed = False


def _refusals(environment: Any) -> Any:
    """Where the master tells of a refused worker: the relay's receiver (``relay.json``)."""
    receiver = get_recorder(environment).receiver
    return receiver.refuse if receiver is not None else None


def _on_args(parser: Any, **_: Any) -> None:
    register_arguments(parser)


def _on_init(environment: Any, runner: Any = None, web_ui: Any = None, **_: Any) -> None:
    # Locust's totals (the web UI's header and charts, --csv) count streams, not timings.
    count_streams_only(environment)
    try:
        get_recorder(environment)
        if not isinstance(runner, WorkerRunner):
            # The master (or the local runner) decides which users run and how many; a
            # worker must keep every class so it can spawn whatever it is told.
            _apply_mix(environment)
            _apply_shape(environment)
        if isinstance(runner, MasterRunner):
            install_done_listener(runner)  # [scenarios.*]: workers say when they are done
            # Each error group shown as the text its workers reported most (after Locust's
            # own listener, which merged the report).
            environment.events.worker_report.add_listener(WorkerTexts(environment.stats))
    except BadInputError as exc:
        log.error("streamslo: %s", exc)
        environment.process_exit_code = EXIT_BAD_INPUT
        if runner is not None:
            runner.quit()
        return
    if web_ui is not None:
        _install_web_ui(environment, web_ui)


def _on_test_start(environment: Any, **_: Any) -> None:
    _stopped.clear()
    prewarm()  # before any stream: Locust's stop() would otherwise stall the last ones
    get_recorder(environment).on_test_start(
        generating=not isinstance(environment.runner, MasterRunner)
    )
    if not isinstance(environment.runner, WorkerRunner):
        loadtime.start(environment)


def _on_test_stop(environment: Any, **_: Any) -> None:
    _stopped.setdefault("at", time.time())  # the run's end: Locust's web UI outlives it
    get_recorder(environment).on_test_stop()


def _on_init_remember(environment: Any, **_: Any) -> None:
    _env_holder["env"] = environment


def _on_quitting(environment: Any, **_: Any) -> None:
    rec: RunRecorder = get_recorder(environment)
    rec.on_test_stop()
    if isinstance(environment.runner, WorkerRunner) or os.environ.get("STREAMSLO_RUNNER"):
        return
    d = rec.opts.results_dir
    if d is not None:
        from streamslo.runfiles.finalize import finalize_plain_locust

        finalize_plain_locust(environment, d, rec.run_start, _stopped.get("at"))


def _on_quit(**_: Any) -> None:
    """After Locust's end-of-run tables (its ``quit`` event): an invalid run says so there."""
    environment = _env_holder.get("env")
    if environment is None or isinstance(environment.runner, WorkerRunner):
        return
    line = invalid_line(live_validity(environment), so_far=False)
    if line:
        log.warning("streamslo: %s", line)


def install() -> None:
    """Register the stream users' listeners on Locust's global events (once per process, however
    many locustfiles import this)."""
    global _installed
    if _installed:
        return
    _installed = True
    # Before Locust forks its --processes workers: they keep the headers, and nothing started
    # later finds them in the environment.
    take_inherited_headers()

    # Locust's hooks are untyped: register through Any, not as decorators (which would make
    # every listener untyped for mypy).
    hooks: Any = events
    hooks.init_command_line_parser.add_listener(_on_args)
    hooks.init.add_listener(_on_init)
    hooks.test_start.add_listener(_on_test_start)
    hooks.test_stop.add_listener(_on_test_stop)
    hooks.init.add_listener(_on_init_remember)
    hooks.quitting.add_listener(_on_quitting)
    hooks.quit.add_listener(_on_quit)
    relay.install(hooks, get_recorder)  # distributed runs: workers' streams travel to the master
    # ... from workers of the same versions and clock only (after the relay: its receiver
    # keeps the refused workers for relay.json)
    admission.install(hooks, _refusals)
    live_windows.install(
        hooks, _env_holder
    )  # last: its quitting listener runs first (reverse order)


_env_holder: dict[str, Any] = {}
#: ``"at"``: when the last test stopped (a test started since clears it).
_stopped: dict[str, float] = {}
