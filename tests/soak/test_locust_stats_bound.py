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


# A worker's statistics, its report to a master, the master's: Locust's own code throughout.
_TOTALS = """
import json
from types import SimpleNamespace
import locust.stats as ls
from locust.event import Events
from streamslo.loadgen.listeners import TOKEN_ENTRIES, LocustStats, StreamFailure
from streamslo.loadgen.locust_stats import StreamTotals, count_streams_only
from streamslo.stream.timing import StreamRecord

def env():
    e = SimpleNamespace(stats=ls.RequestStats(), events=Events())
    count_streams_only(e)
    count_streams_only(e)  # twice: no harm
    return e

worker, master = env(), env()
def on_request(request_type, name, response_time, response_length, exception=None, **_):
    worker.stats.log_request(request_type, name, response_time, response_length)  # as Locust's runner
    if exception:
        worker.stats.log_error(request_type, name, exception)
worker.events.request.add_listener(on_request)
listener = LocustStats(worker.events.request.fire, "per-gap")
for i in range(10):
    rec = StreamRecord(stream_id=f"s{i}", protocol="ws" if i % 5 == 0 else "sse",
                       user_class="U", started_at=100.0, t0=0.0)
    rec.outcome = "ok" if i % 2 else "truncated"
    rec.ttft_s, rec.e2e_s, rec.gap_s, rec.bytes = 0.05, 0.5, [0.01, 0.02, 0.03], 100
    listener(rec)
def figures(stats):
    return {
        "class": type(stats).__name__,
        "total": [stats.total.num_requests, stats.total.num_failures],
        "entries": {f"{m} {n}": [e.num_requests, e.num_failures] for (n, m), e in stats.entries.items()},
    }
seen = {"worker": figures(worker.stats)}
ls.setup_distributed_stats_event_listeners(worker.events, worker.stats)
ls.setup_distributed_stats_event_listeners(master.events, master.stats)
data = {}
worker.events.report_to_master.fire(client_id="w", data=data)  # clears the worker's figures
master.events.worker_report.fire(client_id="w", data=data)
seen["master"] = figures(master.stats)
print(json.dumps({**seen, "tokens": sorted(TOKEN_ENTRIES)}))
"""


def test_locusts_totals_count_streams_and_the_timings_keep_their_rows():
    r = subprocess.run(
        [sys.executable, "-c", _TOTALS], capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["tokens"] == ["token itl", "token max_gap", "token ttft"]
    for side in ("worker", "master"):  # a master adds up its workers' totals as they come
        f = d[side]
        assert f["class"] == "StreamTotals"
        assert f["total"] == [10, 5], f  # ten streams, five truncated: 50 %, not 12.5 %
        assert f["entries"]["SSE stream"] == [8, 4] and f["entries"]["WS stream"] == [2, 1]
        assert f["entries"]["SSE token ttft"] == [8, 0]
        assert f["entries"]["SSE token itl"] == [24, 0]  # per gap
        assert f["entries"]["WS token itl"] == [6, 0]
