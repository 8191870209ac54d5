"""The reference in docs/ matches the code it documents."""

from __future__ import annotations

import re
from pathlib import Path

from streamslo.figures.metrics import METRICS
from streamslo.verify.slo import OPTIONS

DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_the_metrics_page_lists_the_registry() -> None:
    text = (DOCS / "metrics.md").read_text()
    rows = re.findall(r"^\| `(\w+)` \| (\w+) \| (\w+) \| (.+?) \|$", text, flags=re.M)
    assert rows == [(m.name, m.kind, m.unit, m.description) for m in METRICS.values()]


def test_the_plugin_page_lists_every_setting() -> None:
    text = (DOCS / "pytest-plugin.md").read_text()
    for opt in OPTIONS:
        assert f"`{opt.flag}" in text and f"`{opt.env}`" in text and f"`{opt.ini}`" in text, (
            opt.name
        )


def _markdown_files() -> list[Path]:
    repo = DOCS.parent
    skip = {".venv", ".vllm-venv", ".tox", ".git", "build", "node_modules"}
    return [p for p in repo.rglob("*.md") if not skip & set(p.relative_to(repo).parts)]


def test_every_relative_link_resolves() -> None:
    """A link in the README or a reference page that points at a missing file is a dead end for
    the reader (links to other sites are not checked: no network here)."""
    missing = []
    for page in _markdown_files():
        for target in re.findall(r"\]\(([^)\s#]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            if re.match(r"^[a-z]+:", target):
                continue
            if not (page.parent / target).exists():
                missing.append(f"{page.relative_to(DOCS.parent)} -> {target}")
    assert not missing, missing


def test_the_index_lists_every_page() -> None:
    listed = set(re.findall(r"\]\(([\w-]+\.md)\)", (DOCS / "index.md").read_text(encoding="utf-8")))
    pages = {p.name for p in DOCS.glob("*.md")} - {"index.md"}
    assert pages == listed, (sorted(pages - listed), sorted(listed - pages))


def _toml_blocks() -> list[tuple[str, str]]:
    blocks = []
    for page in [DOCS.parent / "README.md", *sorted(DOCS.glob("*.md"))]:
        for i, text in enumerate(
            re.findall(r"```toml\n(.*?)```", page.read_text(encoding="utf-8"), re.S)
        ):
            blocks.append((f"{page.name}#{i + 1}", text))
    return blocks


def test_every_toml_example_is_a_valid_file(tmp_path: Path) -> None:
    """The examples a reader copies must load: a scenario file (``[scenarios]`` or ``[load]``)
    as ``--scenario`` reads it, anything else as an SLO file."""
    import tomllib

    from streamslo.slo.thresholds import parse_slo
    from streamslo.workload.scenario_file import read_scenario

    blocks = _toml_blocks()
    assert len(blocks) >= 5
    for where, text in blocks:
        doc = tomllib.loads(text)
        if "scenarios" in doc or "load" in doc:
            path = tmp_path / where.replace("#", "-")
            path.write_text(text, encoding="utf-8")
            read_scenario(path)
        elif "thresholds" in doc:
            parse_slo(text, where)
        else:  # a [budget] shown alone: checked inside a minimal SLO file
            assert set(doc) == {"budget"}, where
            parse_slo(text + '\n[thresholds]\nitl_ms = ["p(99)<200"]\n', where)


def test_the_results_page_lists_every_streams_csv_column() -> None:
    """docs/results.md's streams.csv table is the column table's (results/columns.py)."""
    from streamslo.results.columns import docs_table

    assert docs_table() in (DOCS / "results.md").read_text(encoding="utf-8")


def test_each_commands_options_table_is_its_declaration():
    """Each command's reference page carries the table made from its one declaration
    (python -m streamslo.commands.option_tables rewrites them)."""
    from streamslo.commands.option_tables import TABLES, table

    for command, (page, _, _) in TABLES.items():
        text = (DOCS.parent / page).read_text(encoding="utf-8")
        assert table(command) in text, (
            f"{page}: the {command} options table is stale: python -m streamslo.commands.option_tables"
        )
