"""deploy/kubernetes/: the LocustTest manifest and the image's entrypoint hold together (parsed
here; tests/loadgen/test_kubernetes.py runs them in network namespaces)."""

from __future__ import annotations

import importlib.util
import shlex
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from streamslo.cli import build_parser
from streamslo.run.execute import config_from_args

REPO = Path(__file__).resolve().parents[2]
KUBE = REPO / "deploy" / "kubernetes"


def _pod() -> ModuleType:
    spec = importlib.util.spec_from_file_location("streamslo_pod", KUBE / "streamslo_pod.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def test_doc() -> dict:
    (doc,) = [d for d in yaml.safe_load_all((KUBE / "locusttest.yaml").read_text()) if d]
    return doc


def test_the_manifest_is_a_locusttest_of_the_official_operator(test_doc):
    assert test_doc["apiVersion"] == "locust.cloud/v1" and test_doc["kind"] == "LocustTest"
    spec = test_doc["spec"]
    assert set(spec) <= {
        "image",
        "imagePullPolicy",
        "imagePullSecrets",
        "workers",
        "args",
        "env",
        "master",
        "worker",
        "locustfile",
        "labels",
        "annotations",
        "metrics",
    }  # the CRD's fields (charts/locust-operator/crds/locusttest.yaml)
    assert spec["locustfile"] == {"configMap": {"name": "streamslo-locustfile"}}
    assert isinstance(spec["args"], str) and isinstance(spec["workers"], int)


def test_the_master_runs_streamslo_run_with_the_manifests_args(test_doc):
    """The operator runs `IMAGE --master ARGS`: the entrypoint's `streamslo run` must parse, wait
    for as many workers as the worker Job has, listen beyond loopback, and write the results."""
    args = shlex.split(test_doc["spec"]["args"])
    argv, out = _pod().master_command(args)
    assert argv[:3] == ["streamslo", "run", "--master"] and "-f" not in argv
    cfg = config_from_args(build_parser("run").parse_args(argv[1:]))
    assert cfg.master and cfg.expect_workers == test_doc["spec"]["workers"]
    assert cfg.master_bind_host == "*" and cfg.master_bind_port == 5557  # the Service's port
    assert out == str(cfg.out) == "/results/run"


def test_a_worker_runs_the_locustfile_and_takes_the_rest_from_its_master(test_doc):
    args = shlex.split(test_doc["spec"]["args"])
    pod = _pod()
    argv = pod.worker_command(["--master-host", "streamslo-master", *args, "--api-key-env", "K"])
    assert argv == [
        "locust",
        "-f",
        "/home/locust/main.py",
        "--worker",
        "--master-host",
        "streamslo-master",
        "--master-port",
        "5557",
        "--api-key-env",
        "K",
    ]
    with pytest.raises(SystemExit):
        pod.worker_command(args)  # no --master-host: the operator always gives it


def test_the_image_starts_the_entrypoint_and_other_commands_run_as_given():
    dockerfile = (REPO / "deploy" / "Dockerfile").read_text()
    assert "deploy/kubernetes/streamslo_pod.py /usr/local/bin/streamslo-pod" in dockerfile
    assert 'ENTRYPOINT ["streamslo-pod"]' in dockerfile
    pod = _pod()
    assert pod.master_command(["--users", "5"])[1] == pod.DEFAULT_OUT
