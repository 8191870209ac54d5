"""The Kubernetes path on Locust's own operator (deploy/kubernetes/locusttest.yaml), run here as
a cluster would run it.

Kubernetes does not run here; its network does, in miniature. Each "pod" is a process in a
network namespace of its own, made by the test, joined to the others by veth pairs on a bridge
that lives in one more namespace: no interface of this machine's own namespace is touched, and
traffic never leaves the machine. Names resolve as a cluster's Services do: every pod sees its
own ``/etc/hosts`` (bind-mounted in a mount namespace of its own) naming ``target`` and
``streamslo-master``. Pods share no folder: each has its own working directory and TMPDIR,
and the locustfile each mounts (the ConfigMap) is its own copy. The command lines are the
manifest's, built as the operator builds them (locustio/k8s-operator ``objects.py``: the master
``IMAGE --master ARGS``, each worker ``IMAGE --worker --master-host <name>-master ARGS``), with
the image's entrypoint (deploy/kubernetes/streamslo_pod.py) as IMAGE; only the load is made
smaller and the paths of the image mapped to the pods' folders.

The results are taken as ``kubectl cp`` takes them, while the master holds them, and the
master's exit code (the Job's phase) is the run's verdict.
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from tests.loadgen.helpers import REPO, stop_process

pytestmark = pytest.mark.load

MANIFEST = REPO / "deploy" / "kubernetes" / "locusttest.yaml"
ENTRYPOINT = [sys.executable, str(REPO / "deploy" / "kubernetes" / "streamslo_pod.py")]
LOCUSTFILE = REPO / "locustfiles" / "streaming_locustfile.py"


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=20)


def _locust_test() -> dict:
    (doc,) = [
        d for d in yaml.safe_load_all(MANIFEST.read_text()) if d and d["kind"] == "LocustTest"
    ]
    return doc


@dataclass
class Cluster:
    """Network namespaces joined on one bridge; the name of each pod's namespace and address."""

    tag: str
    root: Path
    subnet: str = "10.213.7"
    pods: dict[str, tuple[str, str]] = field(default_factory=dict)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def hub(self) -> str:
        return f"sslo-{self.tag}-hub"

    def up(self) -> None:
        _ip("netns", "add", self.hub)
        _ip("-n", self.hub, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.hub, "link", "set", "br0", "up")

    def add_pod(self, name: str) -> str:
        """A pod's namespace, wired to the bridge; returns its address."""
        n = len(self.pods) + 2
        ns, addr = f"sslo-{self.tag}-{n}", f"{self.subnet}.{n}"
        _ip("netns", "add", ns)
        _ip(
            "-n",
            self.hub,
            "link",
            "add",
            f"p{n}",
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            ns,
        )
        _ip("-n", self.hub, "link", "set", f"p{n}", "master", "br0", "up")
        _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", "eth0")
        _ip("-n", ns, "link", "set", "eth0", "up")
        _ip("-n", ns, "link", "set", "lo", "up")
        self.pods[name] = (ns, addr)
        (self.root / name / "tmp").mkdir(parents=True)
        return addr

    def hosts(self, services: dict[str, str]) -> Path:
        path = self.root / "hosts"
        lines = ["127.0.0.1 localhost"] + [
            f"{self.pods[pod][1]} {svc}" for svc, pod in services.items()
        ]
        path.write_text("\n".join(lines) + "\n")
        return path

    def run(
        self, pod: str, argv: list[str], hosts: Path, env: dict[str, str]
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` in ``pod``: its namespace, its /etc/hosts, its own folder."""
        ns, _ = self.pods[pod]
        folder = self.root / pod
        script = 'mount --bind "$0" /etc/hosts && cd "$1" && shift && exec "$@"'
        cmd = ["ip", "netns", "exec", ns, "unshare", "--mount", "--propagation", "private"]
        cmd += ["sh", "-c", script, str(hosts), str(folder), *argv]
        penv = dict(
            env,
            TMPDIR=str(folder / "tmp"),
            PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        )
        with (self.root / f"{pod}.log").open("wb") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=penv)
        self.procs.append(proc)
        return proc

    def log(self, pod: str) -> str:
        return (self.root / f"{pod}.log").read_text(errors="replace")

    def down(self) -> None:
        for p in self.procs:
            stop_process(p)
        for ns, _ in self.pods.values():
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=20)
        subprocess.run(["ip", "netns", "del", self.hub], capture_output=True, timeout=20)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    if shutil.which("ip") is None or shutil.which("unshare") is None:
        pytest.skip("no `ip` or `unshare` here: the pods' network namespaces cannot be made")
    c = Cluster(secrets.token_hex(2), tmp_path)
    try:
        c.up()
    except (subprocess.CalledProcessError, OSError) as exc:
        c.down()
        err = getattr(exc, "stderr", b"") or b""
        pytest.skip(
            f"network namespaces cannot be made here (needs root): {err.decode(errors='replace').strip() or exc}"
        )
    try:
        yield c
    finally:
        c.down()


def _smaller(args: list[str], results: Path, locustfile: Path) -> list[str]:
    """The manifest's ARGS with a smaller load and the image's paths mapped to the pod's."""
    small = {"--users": "4", "--spawn-rate": "4", "--duration": "4s", "--max-tokens": "16"}
    out = []
    it = iter(args)
    for a in it:
        if a in small:
            out += [a, small[a]]
            next(it)
        elif a == "-f":
            assert next(it) == "/home/locust/main.py"  # where the operator mounts the ConfigMap
            out += [a, str(locustfile)]
        elif a == "--out":
            assert next(it) == "/results/run"
            out += [a, str(results)]
        else:
            out.append(a)
    # A loaded test machine may lag: that is no part of what is checked here.
    return [*out, "--drain", "5s", "--allow-invalid"]


def test_the_locusttest_runs_as_a_cluster_would_and_the_master_exit_is_the_verdict(cluster):
    spec = _locust_test()
    name, image_args = spec["metadata"]["name"], shlex.split(spec["spec"]["args"])
    workers = spec["spec"]["workers"]
    assert _flag(image_args, "--expect-workers") == str(workers)
    target_host = _flag(image_args, "--host").split("//")[1].split(":")[0]

    for pod in ("target", "master", *(f"worker{i}" for i in range(workers))):
        cluster.add_pod(pod)
    hosts = cluster.hosts({target_host: "target", f"{name}-master": "master"})
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMSLO_")}
    env.update({e["name"]: e["value"] for e in spec["spec"]["env"]})
    env["STREAMSLO_RESULTS_HOLD"] = "120"  # the test takes the results well before

    # The target Service's pod: the bundled server, listening on the pod's address.
    port = _flag(image_args, "--host").rsplit(":", 1)[1]
    serve = ["streamslo", "serve", "--mode", "fixed", "--host", "0.0.0.0", "--port", port]
    target = cluster.run("target", [*ENTRYPOINT, *serve], hosts, env)
    _wait_for(
        lambda: "Application startup complete" in cluster.log("target"),
        60,
        cluster,
        "target",
        target,
    )

    # Each pod gets its own copy of the ConfigMap's locustfile.
    def mounted(pod: str) -> Path:
        path = cluster.root / pod / "locust" / "main.py"
        path.parent.mkdir()
        shutil.copy(LOCUSTFILE, path)
        return path

    results = cluster.root / "master" / "results" / "run"
    master_argv = [*ENTRYPOINT, "--master", *_smaller(image_args, results, mounted("master"))]
    master = cluster.run("master", master_argv, hosts, env)
    for i in range(workers):
        pod = f"worker{i}"
        argv = [
            *ENTRYPOINT,
            "--worker",
            "--master-host",
            f"{name}-master",
            *_smaller(image_args, cluster.root / pod / "results" / "run", mounted(pod)),
        ]
        cluster.run(pod, argv, hosts, env)

    _wait_for(
        lambda: "streamslo run exited with" in cluster.log("master"), 150, cluster, "master", master
    )
    line = next(
        ln for ln in cluster.log("master").splitlines() if "streamslo run exited with" in ln
    )
    verdict = int(line.rsplit(" ", 1)[1])
    assert master.poll() is None, "the master must hold its results until they are taken"
    taken = cluster.root / "taken"
    shutil.copytree(results, taken)  # kubectl cp
    Path(f"{results}.taken").touch()  # kubectl exec ... touch /results/run.taken
    assert master.wait(timeout=30) == verdict, cluster.log("master")[-4000:]

    # The exit code is the run's verdict: 0 when every threshold held, 99 otherwise.
    slo = json.loads((taken / "slo.json").read_text())
    assert verdict == (0 if slo["passed"] else 99), (verdict, slo)
    run = json.loads((taken / "run.json").read_text())
    relay = json.loads((taken / "relay.json").read_text())
    assert run["complete"] is True and run["target"] == f"http://{target_host}:{port}"
    assert (
        relay["workers"] == workers
        and relay["lost_workers"] == []
        and relay["refused_workers"] == []
    )
    per_worker = relay["per_worker"]
    assert len(per_worker) == workers and all(w["records"] > 0 for w in per_worker), per_worker
    rows = (taken / "streams.csv").read_text().splitlines()[1:]
    assert len(rows) == relay["records"] > 0
    # The workers wrote nothing: their pods hold only what they were given.
    for i in range(workers):
        pod = cluster.root / f"worker{i}"
        written = sorted(str(p.relative_to(pod)) for p in pod.rglob("*") if p.is_file())
        assert written == ["locust/main.py"], written
    # Each worker reached the master by its Service name, and was admitted (same versions,
    # same clock): none refused.
    assert "refused" not in (taken / "locust.log").read_text(errors="replace")


def _flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def _wait_for(
    cond, timeout: float, cluster: Cluster, pod: str, proc: subprocess.Popen[bytes]
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    pytest.fail(f"{pod} did not get there in {timeout} s:\n{cluster.log(pod)[-4000:]}")
