"""The suite's own daemons die with the pytest process that started them: a test that pytest-timeout
ends (os._exit, no teardown) left its daemon running, orphaned, for hours."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from conftest import ROOT


def test_a_daemon_whose_pytest_process_died_without_teardown_stops(tmp_path: Path) -> None:
    script = (f"import os, sys; sys.path[:0] = [{str(ROOT / 'tests')!r}, {str(ROOT)!r}]\n"
              "from conftest import start_daemon\n"
              f"d = start_daemon(__import__('pathlib').Path({str(tmp_path / 'home')!r}))\n"
              "print(d.proc.pid, flush=True)\n"
              "os._exit(1)  # as pytest-timeout's thread method ends a worker\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    pid = int(done.stdout.split()[0])
    while True:  # the test's timeout bounds the wait
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        try:  # reaped by init once it exits; a zombie of ours it is not
            with open(f"/proc/{pid}/stat") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] == "Z":
                    break
        except FileNotFoundError:
            break
        time.sleep(0.05)
    log = (tmp_path / "home-scvd.log").read_text()
    assert "stopping (SIGTERM)" in log, log
