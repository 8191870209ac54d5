"""Locust's per-second counts and chart history stay bounded over a long run, and every figure
Locust reports from them is unchanged (streamslo.loadgen.locust_stats)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.soak.conftest import REPO

# In a subprocess: Locust imports gevent and patches the process, which the tests must not.
_SCRIPT = """
import json, random, sys
from types import SimpleNamespace
import locust.stats as ls
from streamslo.loadgen.locust_stats import HISTORY_KEEP, KEEP_S, trim_locust_stats

clock = [1_800_000_000.0]
class Clock:
    def __getattr__(self, name):
        import time
        return getattr(time, name)
    def time(self):
        return clock[0]
ls.time = Clock()

html = sys.argv[1] if len(sys.argv) > 1 else ""
trimmed = SimpleNamespace(stats=ls.RequestStats(), web_ui=None,
                          parsed_options=SimpleNamespace(html_file=html or None))
plain = SimpleNamespace(stats=ls.RequestStats())
names = [(k, n) for k in ("SSE", "WS") for n in ("ttft", "itl", "max_gap", "stream")]
rng = random.Random(7)
figures, sizes = [], []
for second in range(2 * 3600):  # two hours, 3 to 8 streams a second, a failure now and then
    for _ in range(rng.randint(3, 8)):
        for kind, name in names:
            rt = rng.lognormvariate(5, 1)
            failed = name == "stream" and rng.random() < 0.01
            for env in (trimmed, plain):
                env.stats.log_request(kind, name, rt, 100)
                if failed:
                    env.stats.log_error(kind, name, "truncated: cut")
        clock[0] += rng.random() / 8
    clock[0] = float(int(clock[0]) + 1)
    if second % 2 == 0:
        trim_locust_stats(trimmed, clock[0])
    if second % 5 == 0:
        for env in (trimmed, plain):
            env.stats.history.append({"time": second})
    if second % 600 == 599:
        def fig(s):
            out = []
            for e in [*sorted(s.entries.values(), key=lambda e: (e.method, e.name)), s.total]:
                out.append([e.num_requests, e.num_failures, e.current_rps, e.current_fail_per_sec,
                            e.total_rps, e.get_response_time_percentile(0.99),
                            e.get_current_response_time_percentile(0.95), e.median_response_time])
            return out
        figures.append([fig(trimmed.stats), fig(plain.stats)])
        sizes.append(max(len(e.num_reqs_per_sec) for e in [*trimmed.stats.entries.values(),
                                                           trimmed.stats.total]))
print(json.dumps({
    "figures": figures, "sizes": sizes, "keep": KEEP_S, "history_keep": HISTORY_KEEP,
    "history": len(trimmed.stats.history), "plain_history": len(plain.stats.history),
    "plain_size": len(plain.stats.total.num_reqs_per_sec),
}))
"""


def _run(*args: str) -> dict:  # type: ignore[type-arg]
    r = subprocess.run(
        [sys.executable, "-c", _SCRIPT, *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)  # type: ignore[no-any-return]


def test_two_hours_of_locust_statistics_stay_bounded_with_the_same_figures():
    d = _run()
    assert d["plain_size"] >= 7000  # untrimmed: a key a second, for ever
    assert all(s <= d["keep"] + 3 for s in d["sizes"]), d["sizes"]
    for trimmed, plain in d["figures"]:  # every 10 minutes, every entry
        assert trimmed == plain
    assert d["history"] == d["history_keep"] < d["plain_history"]


def test_the_chart_history_is_kept_whole_for_an_html_report():
    d = _run("report.html")
    assert d["history"] == d["plain_history"]
    assert all(s <= d["keep"] + 3 for s in d["sizes"])
