"""A real LiteLLM proxy for the real-server tests: LiteLLM pinned, in a venv of its own, a
config that forwards one model to an upstream OpenAI-compatible server (llama.cpp's
``llama-server`` or vLLM, started by their own setup scripts), and ``litellm --config``
started and stopped.

Three steps, each usable alone (``tox -e litellm`` runs the first, the tests the others)::

    python tests/realserver/litellm_setup.py install DIR        # the venv, ~3 min
    python tests/realserver/litellm_setup.py config DIR --upstream http://127.0.0.1:8012/v1
    python tests/realserver/litellm_setup.py serve DIR --port 8015 --upstream URL  # until Ctrl-C

``DIR`` then holds ``venv/``, ``freeze.txt`` (what the install resolved) and ``config.yaml``.
There is no model to build: LiteLLM serves the upstream's.

What it needs, found by trying (LiteLLM 1.110.2, Python 3.11):

- ``litellm[proxy]`` cannot be installed: the extra requires ``litellm-proxy==1.110.2``, which
  the index does not have, nor ``litellm-proxy-extras==0.4.114.post1`` (database migrations)
  or ``litellm-enterprise==0.1.83.post1`` that it also pins. ``litellm==1.110.2`` (its wheel
  holds ``litellm/proxy``) plus the extra's other requirements, by hand (:data:`PROXY_PINS`, at
  the versions that resolved here), run the proxy without those three.
- LiteLLM releases 1.82.7 and 1.82.8 were malicious (2026; a ``.pth`` file that ran at every
  interpreter start): the version is pinned, the venv is LiteLLM's alone, and ``install``
  refuses a venv where any ``.pth`` file other than setuptools' ``distutils-precedence.pth``
  appears (:func:`check_pth`).
- Offline: ``LITELLM_OFFLINE_MODE=true`` and ``LITELLM_LOCAL_MODEL_COST_MAP=true`` (else every
  start tries to fetch a model price list from GitHub, 3 attempts over ~10 s, then falls back to
  its bundled copy), ``LITELLM_TELEMETRY_DISABLED=true``.
- The proxy refuses to start without ``general_settings.master_key``; every request, ``/v1/models``
  included, then needs ``Authorization: Bearer MASTER_KEY`` (:data:`MASTER_KEY`);
  ``/health/liveliness`` needs none.
- ``/v1/models`` lists the config's model name with ``owned_by: "openai"``: the engine behind it
  is hidden. It starts in ~10 s.
- What it passes on (a recording upstream): every request field as it came, unknown ones too
  (``ignore_eos``, ``min_tokens``, ``logit_bias``, ``timings_per_token``, ``return_token_ids``,
  ``generation_config``), and it always asks the upstream for usage
  (``stream_options.include_usage``), which the client gets only when it asked too (a last
  ``choices: []`` chunk). Chat chunks keep llama.cpp's ``timings`` and ``logprobs``; completions
  chunks lose both. It drops a chunk whose text is empty (vLLM's ``"content": ""`` chunks:
  48 tokens, 44 chunks), unless the chunk has something else (``token_ids``). It ends with
  ``data: [DONE]``.

Only the standard library is imported at the top: every step runs with any Python.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import ClassVar

import venvs  # (tests/realserver: run as a script or imported)
from served import ServedProcess, launch, serve_until_stopped
from venvs import venv_dir

__all__ = [
    "LITELLM",
    "MASTER_KEY",
    "MODEL_NAME",
    "PROXY_PINS",
    "LiteLLMServer",
    "check_pth",
    "install",
    "is_installed",
    "start_server",
    "venv_dir",
    "write_config",
]

#: The LiteLLM release (the version is pinned: see the module's docstring).
LITELLM = "1.110.2"
#: The ``proxy`` extra's requirements of LiteLLM 1.110.2 less ``litellm-proxy``,
#: ``litellm-proxy-extras`` and ``litellm-enterprise`` (not on the index), at the versions
#: that resolved together here (Python 3.11, Linux).
PROXY_PINS = (
    "gunicorn==23.0.0",
    "uvicorn==0.55.0",
    "granian==2.8.9",
    "uvloop==0.23.0",
    "fastapi==0.165.0",
    "starlette==1.10.0",
    "backoff==2.2.1",
    "pyyaml==6.0.4",
    "rq==2.12.0",
    "orjson==3.13.0",
    "hiredis==3.5.0",
    "apscheduler==3.11.3",
    "fastapi-sso==0.23.0",
    "pyjwt==2.15.1",
    "python-multipart==0.0.34",
    "cryptography==50.0.2",
    "pynacl==1.6.2",
    "websockets==15.0.1",
    "boto3==1.44.18",
    "azure-identity==1.27.0",
    "azure-storage-blob==12.31.1",
    "mcp==2.3.0",
    "httpx2==2.17.0",
    "pydantic==2.14.4",
    "restrictedpython==8.5",
    "rich==13.9.4",
    "inquirerpy==0.3.4",
    "tomlkit==0.15.3",
    "polars==1.44.2",
    "soundfile==0.14.0",
    "pyroscope-io==0.8.16",
    "expression==5.8.0",
    "backports-zstd==1.8.0",
    "semver==3.2.0",
)
#: ``.pth`` files a fresh venv with these packages holds (setuptools' own).
EXPECTED_PTH = frozenset({"distutils-precedence.pth"})
#: The proxy's master key (loopback only, a test's key; never a secret).
MASTER_KEY = "sk-streamslo-test"
#: The name the proxy serves the upstream's model under.
MODEL_NAME = "tiny-llama"
#: Written in the venv when ``install`` finished; a second ``install`` then does nothing.
_READY = ".streamslo-litellm-ready"


def check_pth(venv: Path) -> list[str]:
    """The ``.pth`` files in ``venv``'s site directories that are not :data:`EXPECTED_PTH`
    (empty: none)."""
    found = []
    for site in venvs.site_packages(venv):
        if site.is_dir():
            found += [p.name for p in site.glob("*.pth") if p.name not in EXPECTED_PTH]
    return sorted(found)


def is_installed(directory: Path) -> bool:
    """Whether ``DIR/venv`` holds a finished install of this version."""
    return venvs.is_ready(venv_dir(directory), _READY, litellm=LITELLM)


def install(directory: Path, force: bool = False) -> float:
    """Install LiteLLM and its proxy's requirements into ``DIR/venv``. Returns the seconds it
    took (0 when it was installed already).

    Raises:
        subprocess.CalledProcessError: a step failed (pip's output is on stderr).
        RuntimeError: an unexpected ``.pth`` file appeared in the venv (it is left as it is,
            unmarked, for a look; nothing of it is run by this script).
    """
    directory = directory.resolve()
    venv = venv_dir(directory)
    if is_installed(directory) and not force:
        stray = check_pth(venv)
        if stray:
            raise RuntimeError(f"unexpected .pth files in {venv}: {stray}")
        return 0.0
    started = time.monotonic()
    venvs.make(venv)
    venvs.pip_install(venv, f"litellm=={LITELLM}", *PROXY_PINS)
    stray = check_pth(venv)
    if stray:
        raise RuntimeError(
            f"unexpected .pth files in {venv} after installing LiteLLM {LITELLM}: {stray} "
            "(a .pth file runs at every interpreter start: look before using this venv)"
        )
    freeze = subprocess.run(
        [str(venvs.python(venv)), "-m", "pip", "freeze"],
        check=True,
        capture_output=True,
        text=True,
    )
    (directory / "freeze.txt").write_text(freeze.stdout)
    # Imports as the server will, so a broken venv fails here and not in a test.
    venvs.run_python(venv, "-c", "import litellm.proxy.proxy_server", env=serve_env())
    return venvs.mark_ready(venv, _READY, {"litellm": LITELLM}, started)


def write_config(
    directory: Path,
    upstream: str,
    upstream_model: str = MODEL_NAME,
    model_name: str = MODEL_NAME,
    litellm_settings: dict[str, object] | None = None,
) -> Path:
    """Write ``DIR/config.yaml`` (JSON, which YAML reads): one model, ``model_name``, forwarded
    to the OpenAI-compatible ``upstream`` (its ``/v1`` base URL, e.g.
    ``http://127.0.0.1:8012/v1``) as ``upstream_model``, and :data:`MASTER_KEY`. Returns the
    path."""
    config: dict[str, object] = {
        "model_list": [
            {
                "model_name": model_name,
                "litellm_params": {
                    "model": f"openai/{upstream_model}",
                    "api_base": upstream,
                    "api_key": "none",
                },
            }
        ],
        "general_settings": {"master_key": MASTER_KEY},
    }
    if litellm_settings:
        config["litellm_settings"] = litellm_settings
    path = directory / "config.yaml"
    directory.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config, indent=2) + "\n")
    return path


def serve_env() -> dict[str, str]:
    """The environment the proxy runs in: offline, no telemetry, no feedback banner."""
    env = venvs.environ(
        {
            "LITELLM_OFFLINE_MODE": "true",
            "LITELLM_LOCAL_MODEL_COST_MAP": "true",
            "LITELLM_TELEMETRY_DISABLED": "true",
            "LITELLM_DONT_SHOW_FEEDBACK_BOX": "true",
            "HF_HUB_OFFLINE": "1",
            "DO_NOT_TRACK": "1",
        }
    )
    # A database URL in the caller's environment would make the proxy use it.
    env.pop("DATABASE_URL", None)
    return env


class LiteLLMServer(ServedProcess):
    """A LiteLLM proxy started by :func:`start_server`, in a process group of its own. Requests
    need ``Authorization: Bearer`` :data:`MASTER_KEY` (:attr:`headers`)."""

    headers: ClassVar[dict[str, str]] = {"Authorization": f"Bearer {MASTER_KEY}"}


def start_server(
    directory: Path,
    port: int,
    log: Path,
    upstream: str,
    upstream_model: str = MODEL_NAME,
    timeout: float = 180.0,
    litellm_settings: dict[str, object] | None = None,
    extra: tuple[str, ...] = (),
) -> LiteLLMServer:
    """Write the config (:func:`write_config`), start the proxy on 127.0.0.1:``port`` and wait
    until ``/v1/models`` answers (with the master key).

    Raises:
        RuntimeError: the proxy exited or did not answer within ``timeout`` (its log's tail
            in the message).
    """
    directory = directory.resolve()
    config = write_config(directory, upstream, upstream_model, litellm_settings=litellm_settings)
    cmd = [
        str(venv_dir(directory) / "bin" / "litellm"),
        "--config",
        str(config),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *extra,
    ]
    return launch(
        LiteLLMServer,
        "litellm",
        cmd,
        port,
        log,
        timeout,
        env=serve_env(),
        poll_s=0.5,
        headers=LiteLLMServer.headers,
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("install", help="LiteLLM and its proxy's requirements into DIR/venv")
    p.add_argument("dir", type=Path)
    p.add_argument("--force", action="store_true")
    for name, text in (("config", "write DIR/config.yaml"), ("serve", "serve until interrupted")):
        p = sub.add_parser(name, help=text)
        p.add_argument("dir", type=Path)
        p.add_argument(
            "--upstream", required=True, help="the upstream's /v1 base URL (127.0.0.1 only)"
        )
        p.add_argument("--upstream-model", default=MODEL_NAME)
        if name == "serve":
            p.add_argument("--port", type=int, default=8015)
    args = ap.parse_args(argv)
    directory: Path = args.dir.resolve()
    if args.cmd == "install":
        seconds = install(directory, force=args.force)
        print(venvs.ready_line(f"LiteLLM {LITELLM}", venv_dir(directory), seconds))
    elif args.cmd == "config":
        print(write_config(directory, args.upstream, args.upstream_model))
    else:
        log = directory / "serve.log"
        server = start_server(directory, args.port, log, args.upstream, args.upstream_model)
        print(f"master key: {MASTER_KEY}")
        serve_until_stopped(server)
    return 0


if __name__ == "__main__":
    sys.exit(main())
