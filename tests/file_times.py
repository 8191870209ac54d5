"""Write ``tests/file_times.json`` (seconds per test file, the slow ones) from JUnit XML reports
of a run (``pytest --junitxml=run.xml``)::

    python -m tests.file_times run.xml [more.xml ...]

The suite's conftest schedules the slowest files first (tests/conftest.py).
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

#: Files faster than this keep their collection order (they fill in at the end).
MIN_SECONDS = 5.0


def file_times(reports: list[Path]) -> dict[str, float]:
    """Seconds per test file (setup, call and teardown of its tests) over ``reports``."""
    seconds: Counter[str] = Counter()
    for report in reports:
        for case in ET.parse(report).getroot().iter("testcase"):
            parts = case.get("classname", "").split(".")  # module[.Class]
            while parts and not (REPO / ("/".join(parts) + ".py")).is_file():
                parts.pop()
            if parts:
                seconds["/".join(parts) + ".py"] += float(case.get("time", 0))
    return {
        path: round(s, 1)
        for path, s in sorted(seconds.items(), key=lambda kv: -kv[1])
        if s >= MIN_SECONDS
    }


def main(argv: list[str]) -> int:
    out = Path(__file__).with_name("file_times.json")
    out.write_text(json.dumps(file_times([Path(a) for a in argv]), indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
