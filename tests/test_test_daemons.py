"""The suite's own daemons die with the pytest process that started them: a test that pytest-timeout
ends (os._exit, no teardown) left its daemon running, orphaned, for hours. Started by Popen
(conftest.dying_with_pytest) and forked (tests/daemon_forks.py: the fork server ends with the
worker's socket, its daemons with it)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT


@pytest.mark.parametrize("fork", [True, False], ids=["forked", "popen"])
def test_a_daemon_whose_pytest_process_died_without_teardown_stops(tmp_path: Path, fork: bool) -> None:
    script = (f"import os, sys; sys.path[:0] = [{str(ROOT / 'tests')!r}, {str(ROOT)!r}]\n"
              "from conftest import start_daemon\n"
              f"d = start_daemon(__import__('pathlib').Path({str(tmp_path / 'home')!r}), fork={fork})\n"
              f"assert type(d.proc).__name__ == {'ForkedProc' if fork else 'Popen'!r}, type(d.proc)\n"
              "print(d.proc.pid, flush=True)\n"
              "os._exit(1)  # as pytest-timeout's thread method ends a worker\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, PYTHONPATH=str(ROOT), SCVD_TESTS_FORK="1"))
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


@pytest.mark.parametrize("fork", [True, False], ids=["forked", "popen"])
def test_a_start_in_a_missing_folder_raises_in_the_test_as_popen_does(tmp_path: Path, fork: bool,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from conftest import start_daemon

    monkeypatch.setenv("SCVD_TESTS_FORK", "1")
    with pytest.raises(FileNotFoundError) as raised:
        start_daemon(tmp_path / "home", cwd=tmp_path / "gone", fork=fork)
    assert raised.value.errno == 2 and "gone" in str(raised.value)


def test_a_forked_daemons_exit_status_reaches_the_test(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import signal

    from conftest import start_daemon

    monkeypatch.setenv("SCVD_TESTS_FORK", "1")
    d = start_daemon(tmp_path / "home")
    assert type(d.proc).__name__ == "ForkedProc" and d.proc.poll() is None
    d.proc.send_signal(signal.SIGKILL)
    assert d.proc.wait(15) == -signal.SIGKILL
    bad = start_daemon(tmp_path / "bad", "[server\n", wait=False)  # a config error: scvd's own exit status
    assert bad.proc.wait(15) == 2 and "configuration error" in bad.log()  # EXIT_CONFIG
