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


@pytest.mark.parametrize("args, given", [(["--help"], None), (["status"], None), (["secrets", "set", "K"], "v\n")],
                         ids=["help", "no-daemon", "stdin"])
def test_a_forked_scvctl_prints_and_exits_as_the_one_python_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 args: list[str], given: str | None) -> None:
    import daemon_forks
    from conftest import base_env

    monkeypatch.setenv("SCVD_TESTS_FORK", "1")
    env = base_env(tmp_path / "home", PYTHON_KEYRING_BACKEND="keyring.backends.null.Keyring")
    forked = daemon_forks.scvctl(args, env, input=given, timeout=60)
    if given is not None:  # the first run stored it: the second would say it replaced it
        (tmp_path / "home").mkdir(exist_ok=True)
        for stored in (tmp_path / "home").rglob("secrets.toml"):
            stored.unlink()
    started = subprocess.run([sys.executable, "-m", "scvctl", *args], env=env, input=given,
                             stdin=None if given is not None else subprocess.DEVNULL, capture_output=True,
                             text=True, timeout=60)
    assert (forked.returncode, forked.stdout, forked.stderr) == (started.returncode, started.stdout, started.stderr)
    assert forked.stdout or forked.stderr


def test_a_forked_run_past_its_timeout_is_killed_and_raises_as_subprocess_run(tmp_path: Path) -> None:
    import daemon_forks

    with pytest.raises(subprocess.TimeoutExpired):
        daemon_forks.run("timeit", ["-n", "1", "import time; time.sleep(30)"], daemon_forks.server_env(), timeout=1)
