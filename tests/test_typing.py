"""``Any`` at the package's public boundaries stays rare (issue 19): under 5 % of the public
functions and methods take or return it.

The measure, read with :mod:`ast` from every module of ``streamslo``:

* a module is public unless a part of its dotted name starts with ``_`` (``__init__`` and
  ``__main__`` are public);
* a public function is a module-level function, or a method of a module-level class, whose
  name does not start with ``_`` -- plus ``__init__`` and ``__call__``: a public class's
  constructor and call are boundaries as much as its methods (a class whose name starts with
  ``_`` is private, and so are its methods; functions nested in functions are not counted);
* it mentions ``Any`` when a parameter's annotation (``*args`` and ``**kwargs`` included) or
  the return annotation names ``Any`` (``typing.Any``, ``dict[str, Any]``, a string
  annotation), or names a module-level alias that does (``JSON = dict[str, Any]``), resolved
  through aliases of aliases. A TypedDict, a Protocol or ``object`` is not ``Any``.

Where ``Any`` is right, :data:`KEPT` says why; every function still counted has its reason
there, so a new ``Any`` at a boundary is a decision written down, not a slip.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "streamslo"

#: The share of public functions allowed to mention ``Any``.
LIMIT = 0.05

_TYPE_ALIAS = getattr(ast, "TypeAlias", None)

_WIRE = (
    "untrusted wire data (another process's message, a file an older version wrote), checked "
    "by catching KeyError/TypeError/ValueError: a TypedDict would claim a shape nobody checked"
)
_JSON = "parsed JSON of a file or a request body, of no fixed shape; each reader checks its keys"
_LOCUST = (
    "Locust's untyped side: EventHook.add_listener/fire are untyped, Environment.runner is "
    "Optional, and message handlers are called with keywords (environment=, msg=)"
)
_FORWARDED = "arguments forwarded unchanged to a callee that checks them (uvicorn, a dataclass)"
_OPTIONS = (
    "option values by field name, each of its option's own type (str, float, Path, tuple...), "
    "handed on to dataclasses.replace(**values)"
)

#: Public functions that keep ``Any``, and why (a prefix ending in ``.`` covers a module).
#: "left:" marks what is not right yet and how to fix it.
KEPT: dict[str, str] = {
    "streamslo.loadgen.admission.Admission.on_hello": _LOCUST,
    "streamslo.loadgen.admission.Admission.on_test_start": _LOCUST,
    "streamslo.loadgen.admission.install": _LOCUST,
    "streamslo.figures.histogram.LogHistogram.from_wire": _WIRE,
    "streamslo.figures.windows.GroupAggregate.from_wire": _WIRE,
    "streamslo.figures.windows.GeneratorSample.from_wire": _WIRE,
    "streamslo.figures.windows.WindowBook.merge": _WIRE,
    "streamslo.loadgen.live_windows.WindowsChannel.merge": _WIRE,
    "streamslo.results.batch.GapColumns.from_wire": _WIRE,
    "streamslo.results.batch.RecordBatch.from_wire": _WIRE,
    "streamslo.slo.live_eval.totals_from_wire": _WIRE,
    "streamslo.slo.budget.Budget.from_dict": _WIRE,
    "streamslo.results.layout.read_json": _JSON,
    "streamslo.server.protocol.load_json_object": _JSON,
    "streamslo.server.workerstate.read": _JSON,
    "streamslo.workload.scenarios.dropped_totals": _JSON + " (procs/*.json)",
    "streamslo.stream.chunkjson.": (
        "a server's parsed JSON chunk, on the per-token path that is being sped up in parallel "
        "(issue 19); left: Mapping[str, object] with the isinstance checks it already makes"
    ),
    "streamslo.loadgen.live_windows.install": _LOCUST,
    "streamslo.loadgen.relay.install": _LOCUST,
    "streamslo.loadgen.relay.RelaySender.on_ack": _LOCUST,
    "streamslo.loadgen.relay.RelayReceiver.on_records": _LOCUST,
    "streamslo.loadgen.recorder.RunRecorder.__init__": _LOCUST,
    "streamslo.loadgen.recorder.get_recorder": _LOCUST,
    "streamslo.server.gunicorn_conf.": "gunicorn's server hooks: gunicorn is untyped",
    "streamslo.reports.knee_charts.knee_chart": _FORWARDED + " (knee_figure's keywords)",
    "streamslo.server.config.ServerConfig.build": _FORWARDED + " (the ServerConfig fields)",
    "streamslo.server.guard.GuardedH11Protocol.__init__": _FORWARDED,
    "streamslo.server.guard.GuardedWSProtocol.__init__": _FORWARDED,
    "streamslo.server.server.DrainingUvicornWorker.__init__": _FORWARDED,
    "streamslo.server.server.uvicorn_kwargs": "keyword arguments for uvicorn.Config, of many types",
    "streamslo.options.run_options.cli_values": _OPTIONS,
    "streamslo.options.run_options.from_locust": _OPTIONS,
    "streamslo.run.execute.load_scenario": _OPTIONS,
    "streamslo.run.config.describe_scenarios": "run.json's scenarios: JSON values of a scenario's schedule",
    "streamslo.run.config.describe_workload": "run.json's workload: JSON values, one key per source",
    "streamslo.runfiles.finalize.finalize": (
        "left: run_info is merged over run.json read as JSON, and the plain-Locust caller writes "
        "None where RunJson says int; RunJson should allow None there (then run_info: RunJson)"
    ),
    "streamslo.reports.sweep_report.sweep_rows": (
        "left: reads each sweep.json entry by key; a TypedDict of an entry is the fix"
    ),
}


def _mentions(node: ast.AST | None, aliases: set[str]) -> bool:
    if node is None:
        return False
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and (n.id == "Any" or n.id in aliases):
            return True
        if isinstance(n, ast.Attribute) and n.attr == "Any":
            return True
        if isinstance(n, ast.Constant) and isinstance(n.value, str):
            try:
                inner = ast.parse(n.value, mode="eval")
            except SyntaxError:
                continue
            if _mentions(inner, aliases):
                return True
    return False


def _any_aliases(trees: list[ast.Module]) -> set[str]:
    """Module-level names bound to a type that mentions ``Any`` (to a fixed point)."""
    aliases: set[str] = set()
    while True:
        found = set(aliases)
        for tree in trees:
            for stmt in tree.body:
                if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
                    target, value = stmt.targets[0], stmt.value
                elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
                    target, value = stmt.target, stmt.value
                elif _TYPE_ALIAS is not None and isinstance(stmt, _TYPE_ALIAS):
                    target, value = stmt.name, stmt.value  # ``type X = ...`` (3.12)
                else:
                    continue
                if not isinstance(target, ast.Name) or isinstance(value, ast.Call):
                    continue
                if _mentions(value, aliases):
                    found.add(target.id)
        if found == aliases:
            return aliases
        aliases = found


def _is_public(name: str) -> bool:
    return not name.startswith("_") or name in ("__init__", "__call__")


def _annotations(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.expr | None]:
    a = fn.args
    params = [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]
    return [p.annotation if p is not None else None for p in params] + [fn.returns]


@functools.cache
def measure() -> tuple[list[str], list[str]]:
    """(every public function, those that mention ``Any``), as dotted names."""
    paths = sorted(PACKAGE.rglob("*.py"))
    trees = {path: ast.parse(path.read_text(encoding="utf-8")) for path in paths}
    aliases = _any_aliases(list(trees.values()))
    public: list[str] = []
    with_any: list[str] = []

    def count(fn: ast.FunctionDef | ast.AsyncFunctionDef, name: str) -> None:
        public.append(name)
        if any(_mentions(ann, aliases) for ann in _annotations(fn)):
            with_any.append(name)

    for path, tree in trees.items():
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if any(p.startswith("_") and p not in ("__init__", "__main__") for p in parts):
            continue
        module = ".".join(p for p in parts if p != "__init__")
        for stmt in tree.body:
            if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
                if not stmt.name.startswith("_"):
                    count(stmt, f"{module}.{stmt.name}")
            elif isinstance(stmt, ast.ClassDef) and not stmt.name.startswith("_"):
                for member in stmt.body:
                    if isinstance(member, ast.FunctionDef | ast.AsyncFunctionDef) and _is_public(
                        member.name
                    ):
                        count(member, f"{module}.{stmt.name}.{member.name}")
    return public, with_any


def _reason(name: str) -> str | None:
    for key, why in KEPT.items():
        if name == key or (key.endswith(".") and name.startswith(key)):
            return why
    return None


def test_any_is_rare_at_public_boundaries() -> None:
    public, with_any = measure()
    share = len(with_any) / len(public)
    print(f"\n{len(with_any)} of {len(public)} public functions mention Any ({share:.1%})")
    for name in with_any:
        print(f"  {name}: {_reason(name) or 'NO REASON'}")
    assert share < LIMIT, f"{len(with_any)} of {len(public)} public functions mention Any"


def test_every_kept_any_has_its_reason() -> None:
    _, with_any = measure()
    unexplained = [name for name in with_any if _reason(name) is None]
    assert not unexplained, f"Any at a public boundary without a reason in KEPT: {unexplained}"


def test_the_measure_sees_aliases_and_strings() -> None:
    tree = ast.parse(
        "from typing import Any\n"
        "JSON = dict[str, Any]\n"
        "Rows = list[JSON]\n"
        "def f(x: Rows) -> None: ...\n"
        "def g(x: 'dict[str, Any]') -> None: ...\n"
        "def h(x: dict[str, object]) -> None: ...\n"
    )
    aliases = _any_aliases([tree])
    assert aliases == {"JSON", "Rows"}
    fns = [s for s in tree.body if isinstance(s, ast.FunctionDef)]
    seen = [any(_mentions(a, aliases) for a in _annotations(fn)) for fn in fns]
    assert seen == [True, True, False]
