"""The container and Kubernetes examples in deploy/ hold together: Docker and Kubernetes do not
run here, so their files are parsed, and every streamslo command in them is parsed by the
suite's own command line, as the containers would run it."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from streamslo.cli import build_parser
from streamslo.run.execute import config_from_args

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
REPO = DEPLOY.parent


def _load(name: str) -> dict[str, Any]:
    doc = yaml.safe_load((DEPLOY / name).read_text())
    assert isinstance(doc, dict)
    return doc


def _run_config(argv: list[str]) -> Any:
    """``streamslo <argv>`` as the suite's own parser and ``streamslo run`` read it."""
    assert argv[:2] == ["streamslo", "run"], argv
    args = build_parser("run").parse_args(argv[1:])
    return config_from_args(args)


def _flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return _load("docker-compose.yml")


def test_compose_runs_a_server_a_master_and_two_workers(compose):
    services = compose["services"]
    assert set(services) == {"server", "master", "worker"}
    server, master, worker = services["server"], services["master"], services["worker"]
    assert server["command"][:2] == ["streamslo", "serve"] and "healthcheck" in server
    # The master: `streamslo run --master`, against the server, waiting for every worker.
    cfg = _run_config([c.replace("${RUN:-run1}", "run1") for c in master["command"]])
    assert cfg.master and cfg.expect_workers == worker["deploy"]["replicas"] == 2
    assert cfg.host == "http://server:8000" and cfg.master_bind_host == "*"
    assert master["depends_on"]["server"]["condition"] == "service_healthy"
    # The workers: plain Locust workers with the suite's locustfile, told only where the master is.
    argv = worker["command"]
    assert argv[:3] == ["locust", "-f", "locustfiles/streaming_locustfile.py"]
    assert (REPO / argv[2]).is_file()
    assert "--worker" in argv and _flag(argv, "--master-host") == "master"
    assert _flag(argv, "--master-port") == str(cfg.master_bind_port)
    assert "--results-dir" not in argv


def test_only_the_master_has_a_volume_and_writes_the_results_there(compose):
    services = compose["services"]
    assert [name for name, s in services.items() if s.get("volumes")] == ["master"]
    (volume,) = services["master"]["volumes"]
    host, mount = volume.split(":")
    out = _flag(services["master"]["command"], "--out")
    assert out.startswith(mount + "/") and host == "./results"


def test_one_image_built_from_the_repository(compose):
    for s in compose["services"].values():
        assert s["image"] == "streamslo:local"
        assert s["build"] == {"context": "..", "dockerfile": "deploy/Dockerfile"}
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert "torch==2.13.0" in dockerfile and "'.[server]'" in dockerfile
    ignored = (DEPLOY / "Dockerfile.dockerignore").read_text().split()
    assert ".venv" in ignored and ".git" in ignored  # a 1 GB venv must not go into the context


@pytest.fixture(scope="module")
def helm() -> dict[str, Any]:
    return _load("helm-values.yaml")


def test_helm_values_run_the_suite_on_locusts_chart(helm):
    loadtest, master, worker = helm["loadtest"], helm["master"], helm["worker"]
    # The locustfile comes from a ConfigMap; no example lib.
    assert loadtest["locust_locustfile_configmap"] and loadtest["locust_lib_configmap"] == ""
    assert (
        loadtest["headless"] is False
    )  # the chart would add --headless, which `run` does not take
    # The chart runs `<command> --master <args>`: the shell script must be a valid `streamslo run`.
    sh, dash_c, script, name = master["command"]
    assert (sh, dash_c, name) == ("sh", "-c", "streamslo-master")
    run_line = script.split(";")[0]
    argv = [a for a in shlex.split(run_line) if a != "$@"]
    argv[2:2] = ["--master", *master["args"]]
    cfg = _run_config(argv)
    assert (
        cfg.master and cfg.expect_workers == worker["replicas"] == 2 and cfg.master_bind_host == "*"
    )
    assert "sleep infinity" in script  # the pod stays up for `kubectl cp`
    # The results go to the master's volume, and the pod is ready when workers can connect.
    (mount,) = master["extraVolumeMounts"]
    assert str(cfg.out).startswith(mount["mountPath"] + "/")
    assert {v["name"] for v in master["extraVolumes"]} == {mount["name"]}
    assert master["readinessProbe"]["tcpSocket"]["port"] == cfg.master_bind_port
    assert "extraVolumeMounts" not in worker


def test_the_docs_say_how_to_collect_the_results():
    text = (REPO / "docs" / "distributed.md").read_text()
    for needle in (
        "deploy/docker-compose.yml",
        "deploy/helm-values.yaml",
        "kubectl cp",
        "--expect-workers",
        "kubectl create configmap",
        "lost_workers",
    ):
        assert needle in text, needle
