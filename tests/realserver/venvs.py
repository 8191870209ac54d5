"""The venvs the real-server setup scripts install their servers into, and the steps they
share: make a venv, run a step with its command printed, install torch's CPU build and then a
package held to it, mark a venv ready (a second ``install`` then does nothing), and run a step
again with a venv's own Python. Only the standard library: the scripts run it with any Python,
a venv's included.

Why torch goes first, by its CPU build's local version (``torch==2.13.0+cpu``): PyPI's plain
``2.13.0`` is the CUDA build, and a package that needs torch, installed without a constraint,
makes pip resolve a newer torch with a dozen CUDA wheels. The CPU wheel comes from a local
wheel folder (``PIP_FIND_LINKS``) or PyTorch's CPU index
(``PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

__all__ = [
    "environ",
    "install_cpu_torch",
    "is_ready",
    "make",
    "mark_ready",
    "pip_install",
    "python",
    "read_marker",
    "ready_line",
    "run",
    "run_in",
    "run_python",
    "site_packages",
    "venv_dir",
]

#: Prints the venv's site directories as JSON: ``purelib`` (where pip installs) first.
_SITE_DIRS = (
    "import json, site, sysconfig; p = sysconfig.get_paths(); "
    "print(json.dumps([p['purelib'], p['platlib'], *site.getsitepackages()]))"
)


def venv_dir(directory: Path) -> Path:
    """The venv ``install`` makes in ``directory``."""
    return directory / "venv"


def python(venv: Path) -> Path:
    """The venv's Python."""
    return venv / "bin" / "python"


def environ(values: Mapping[str, str]) -> dict[str, str]:
    """This process's environment with ``values`` set: what a server or a step runs with."""
    return {**os.environ, **values}


def run(cmd: list[str], log: Path | None = None, **kw: object) -> None:
    """Run one step, its command printed first (``+ ...``). With ``log``, its output goes there
    (appended) and, when it fails, the log's tail to stderr.

    Raises:
        subprocess.CalledProcessError: the step failed.
    """
    print("+", " ".join(cmd), flush=True)
    if log is None:
        subprocess.run(cmd, check=True, **kw)  # type: ignore[call-overload]
        return
    with open(log, "ab") as fh:
        proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, **kw)  # type: ignore[call-overload]
    if proc.returncode:
        tail = log.read_text(errors="replace")[-3000:]
        print(tail, file=sys.stderr)
        raise subprocess.CalledProcessError(proc.returncode, cmd)


def run_python(venv: Path, *args: str, **kw: object) -> None:
    """Run the venv's Python with ``args`` as one step (:func:`run`)."""
    run([str(python(venv)), *args], **kw)  # type: ignore[arg-type]


def make(venv: Path) -> None:
    """Make ``venv`` with this Python, unless it has a Python already."""
    if not python(venv).exists():
        run([sys.executable, "-m", "venv", str(venv)])


def pip_install(venv: Path, *args: str, **kw: object) -> None:
    """``pip install -q args`` into the venv (:func:`run`'s keywords: ``env``, ...)."""
    run_python(venv, "-m", "pip", "install", "-q", *args, **kw)


def install_cpu_torch(venv: Path, torch: str, *requirements: str) -> None:
    """Install torch's CPU build (``torch==TORCH+cpu``) into the venv, then ``requirements``
    with torch held to it by a constraints file (see the module's docstring for why).

    Raises:
        subprocess.CalledProcessError: pip failed.
    """
    pin = f"torch=={torch}+cpu"
    pip_install(venv, pin)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as fh:
        fh.write(pin + "\n")
        constraints = fh.name
    try:
        pip_install(venv, *requirements, "-c", constraints)
    finally:
        os.unlink(constraints)


def site_packages(venv: Path) -> list[Path]:
    """The venv's site directories, as its own Python names them, each once: ``purelib``
    (where pip installs) first."""
    out = subprocess.run(
        [str(python(venv)), "-c", _SITE_DIRS], check=True, capture_output=True, text=True
    )
    return [Path(p) for p in dict.fromkeys(json.loads(out.stdout))]


def read_marker(folder: Path, name: str) -> dict[str, object] | None:
    """What the ready marker ``name`` in ``folder`` says (``None``: no marker, or not JSON)."""
    try:
        data = json.loads((folder / name).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def is_ready(folder: Path, name: str, **expected: object) -> bool:
    """Whether ``folder`` holds the ready marker ``name``: with ``expected`` (e.g. the version
    installed), one that says those values; without, any."""
    if not expected:
        return (folder / name).exists()
    data = read_marker(folder, name)
    return data is not None and all(data.get(k) == v for k, v in expected.items())


def mark_ready(
    folder: Path, name: str, data: Mapping[str, object], started: float | None = None
) -> float:
    """Write the ready marker ``name`` in ``folder``: ``data`` as JSON, with ``install_s``, the
    seconds since ``started`` (a ``time.monotonic()``), when given. Returns those seconds (0
    without ``started``)."""
    seconds = 0.0 if started is None else time.monotonic() - started
    values = dict(data)
    if started is not None:
        values["install_s"] = round(seconds, 1)
    (folder / name).write_text(json.dumps(values) + "\n")
    return seconds


def ready_line(what: str, where: Path, seconds: float) -> str:
    """What ``install`` says at its end: ``WHAT ready in WHERE``, with the seconds it took when
    it had anything to do."""
    return f"{what} ready in {where}" + (f" ({seconds:.0f} s)" if seconds else "")


def run_in(venv: Path, script: str, *args: str, **kw: object) -> bool:
    """Run ``script args`` with the venv's Python (a step that imports the venv's packages),
    unless this process is that Python already. Returns whether it ran: ``False`` leaves the
    step to the caller, in this process."""
    if Path(sys.prefix).resolve() == venv.resolve():
        return False
    run_python(venv, script, *args, **kw)
    return True
