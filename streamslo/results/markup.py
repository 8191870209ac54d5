"""The one table writer: rows of text as a Markdown table or an HTML table, one escaping rule
for each (the report, the docs tables generated from code, ``verify --explain``).

Markdown: a ``|`` in a cell is escaped and a line break becomes a space, so a server's message
stays in its cell; HTML: every cell is escaped. The first row is the header.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping, Sequence

__all__ = ["html_table", "markdown_cell", "markdown_table"]


def markdown_cell(text: str) -> str:
    """``text`` safe in one Markdown table cell."""
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def markdown_table(rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table (no trailing newline); the first row is the header."""
    lines = [
        "| " + " | ".join(markdown_cell(c) for c in rows[0]) + " |",
        "|" + "|".join(" --- " for _ in rows[0]) + "|",
    ]
    lines += ["| " + " | ".join(markdown_cell(c) for c in r) + " |" for r in rows[1:]]
    return "\n".join(lines)


#: Cells that read as numbers (right-aligned); text cells are left-aligned.
_NUMERIC = re.compile(r"^([-+—\[]|[0-9]|no data|$)")


def html_table(
    rows: Sequence[Sequence[str]],
    verdict_col: int | None = None,
    change_col: int | None = None,
    change_classes: Mapping[str, str] | None = None,
    table_class: str = "",
) -> str:
    """An HTML table; text columns (any cell that does not read as a number) are marked ``t``
    (left-aligned); ``verdict_col`` cells become badges (``v v-<verdict>``); ``change_col``
    cells get the class ``change_classes`` names for their text."""
    text_cols = {
        i
        for i in range(1, len(rows[0]))
        if any(i < len(r) and not _NUMERIC.match(r[i]) for r in rows[1:])
    }
    head = "".join(
        f'<th class="t">{html.escape(c)}</th>' if i in text_cols else f"<th>{html.escape(c)}</th>"
        for i, c in enumerate(rows[0])
    )
    classes = change_classes or {}
    body = []
    for row in rows[1:]:
        cells = []
        for i, c in enumerate(row):
            text = html.escape(c)
            if i == verdict_col:
                text = f'<span class="v v-{html.escape(c)}">{text}</span>'
            elif i == change_col and c in classes:
                text = f'<span class="{classes[c]}">{text}</span>'
            cells.append(f'<td class="t">{text}</td>' if i in text_cols else f"<td>{text}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    opening = f'<table class="{html.escape(table_class)}">' if table_class else "<table>"
    return f"{opening}<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
