"""The package stays laid out by layer: the import-linter contracts of pyproject.toml hold, no two
modules import each other (directly or round a longer loop, lazy and type-only imports
included), the top level stays small, and a file name repeats only for a stated reason."""

from __future__ import annotations

import ast
import collections
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "streamslo"

#: The modules at the top of the package: the entry points, and the bottom layer that every
#: package may use (the exception tree, the process's open-files limit).
TOP_LEVEL = {"__init__.py", "__main__.py", "cli.py", "errors.py", "oslimits.py"}

#: File names used by more than one module, and why that is right.
REPEATED_NAMES = {
    "__init__.py": "a package",
    "__main__.py": "python -m of a package (streamslo, server, verify)",
    "command.py": "the command shell of a package (proxy, reports, verify)",
    "sse.py": "stream/ decodes the protocol, transport/ does its I/O (websockets' layout)",
    "ws.py": "stream/ decodes the protocol, transport/ does its I/O (websockets' layout)",
    "compare.py": "commands/ is `streamslo compare`, reports/ the report's before/after maths",
    "soak.py": "commands/ is `streamslo soak`, reports/ the report's soak section",
    "finalize.py": "commands/ is `streamslo finalize`, run/ finalizes (after every run too)",
    "scenarios.py": "workload/ parses scenarios, reports/ reports per scenario",
    "metrics.py": "figures/ is a run's metric registry, server/ the server's Prometheus metrics",
    "model.py": "server/ is the transformer, reports/ the report's typed model",
    "engine.py": "server/ is the decode loop, proxy/ the proxy's relay loop",
    "config.py": "the settings of a program (server/, proxy/)",
    "watchdog.py": "server/ watches its event loop, transport/ a stream's deadlines",
    "dialects.py": "stream/ reads the APIs' events, server/ writes them",
    "replay.py": "loadgen/ replays a trace, figures/ its summary figures, reports/ its report section",
}


def _modules() -> dict[str, Path]:
    mods = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    return mods


def _import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports, anywhere in it (lazy and TYPE_CHECKING too)."""
    mods = _modules()

    def owner(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = collections.defaultdict(set)
    for mod, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [f"{node.module}.{a.name}" for a in node.names]
            for name in names:
                if name.startswith("streamslo"):
                    target = owner(name)
                    if target is not None and target != mod and target != "streamslo":
                        graph[mod].add(target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles():
    assert _cycles(_import_graph()) == []


def test_the_cycle_finder_finds_one():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_layers_hold():
    """pyproject.toml's [tool.importlinter] contracts (lint-imports, from import-linter)."""
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.skip("import-linter is not installed (pip install -e '.[test]')")
    r = subprocess.run(
        [exe, "--config", str(REPO / "pyproject.toml"), "--no-cache"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "0 broken" in r.stdout


def test_the_top_level_holds_only_the_entry_points():
    top = {p.name for p in PACKAGE.glob("*.py")}
    assert top == TOP_LEVEL


def test_a_file_name_repeats_only_for_a_reason():
    names = collections.Counter(p.name for p in PACKAGE.rglob("*.py"))
    repeated = {name for name, n in names.items() if n > 1}
    assert repeated <= set(REPEATED_NAMES), sorted(repeated - set(REPEATED_NAMES))
