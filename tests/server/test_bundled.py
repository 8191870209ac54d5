"""How the bundled server fails to start: a missing ``server`` extra is bad input that names
the extra; a server that crashes at start is an internal error with its log, not bad input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from streamslo.errors import BadInputError, ServerExtraMissing, StreamSLOError
from streamslo.server.bundled import BundledServer, ServerStartError
from streamslo.server.deps import SERVER_MODULES, missing_server_modules
from tests.server.conftest import ROOT

# Hides torch from the import system, as on an install without the extra.
_NO_TORCH = "import sys; sys.modules['torch'] = None; "


def test_serve_without_the_extra_names_it() -> None:
    code = _NO_TORCH + "from streamslo.cli import main; sys.exit(main(['serve', '--port', '0']))"
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2, proc.stderr
    assert "pip install 'streamslo[server]'" in proc.stderr and "torch" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_bundled_server_without_the_extra_names_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setitem(sys.modules, "uvicorn_worker", None)
    assert missing_server_modules() == ["torch", "uvicorn_worker"]
    with pytest.raises(ServerExtraMissing, match=r"pip install 'streamslo\[server\]'") as err:
        BundledServer(["--mode", "fixed"], tmp_path / "server.log")
    assert isinstance(err.value, BadInputError)
    assert not (tmp_path / "server.log").exists()  # nothing was started


def test_every_extra_module_is_found_here() -> None:
    assert missing_server_modules() == [], SERVER_MODULES


def test_a_server_that_crashes_at_start_is_an_internal_error(tmp_path: Path) -> None:
    bad = tmp_path / "not-a-checkpoint.pt"
    bad.write_text("this is not a state dict")
    server = BundledServer(["--mode", "fixed", "--checkpoint", str(bad)], tmp_path / "server.log")
    try:
        with pytest.raises(ServerStartError) as err:
            server.wait_ready(timeout=60)
    finally:
        server.stop()
    assert isinstance(err.value, StreamSLOError) and not isinstance(err.value, BadInputError)
    assert "exited with" in str(err.value) and "Traceback" in str(err.value)  # the log's tail
