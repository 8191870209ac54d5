"""Every path the command line prints for a person to use exists: the locustfile a master's
workers run, the results directory and its files a run names."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from streamslo.run.config import RunConfig
from streamslo.run.locust_cmd import LOCUSTFILE, locust_command, waiting_words


def test_the_master_names_the_locustfile_its_workers_run(tmp_path: Path) -> None:
    cfg = RunConfig(host="http://127.0.0.1:9", out=tmp_path, master=True, expect_workers=2)
    words = waiting_words(cfg)
    (path,) = re.findall(r"locust -f (\S+) --worker", words)
    assert Path(path) == LOCUSTFILE and Path(path).is_file(), words
    assert "--master-port" in words
    # the master runs that very file itself
    cmd = locust_command(cfg)
    assert cmd[cmd.index("-f") + 1] == str(LOCUSTFILE)
    assert shlex.join(cmd)
