"""An `agents import codex` SIGKILLed at each step of its commit: whoever uses the home next (a second
import, an agent run, a chat turn) never finds the old provider's key beside the new one's endpoint.

The import runs in a real child process that SIGKILLs itself just before its Nth change to the disk
(a rename, link, unlink or fsync), N = 1, 2, ... until one runs to its end.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from adapters_support import Harness, fake_bin, harness  # noqa: F401 - fixtures
from scvd import paths as paths_mod
from scvd.adapters import service
from scvd.chat.provider import ProviderFailure, codex_settings
from scvd.errors import Failed

ROOT = Path(__file__).resolve().parents[1]
OLD_KEY, NEW_KEY = "sk-AAAA-for-openai", "sk-BBBB-for-relay"
OPENAI = "https://api.openai.com/v1"
RELAY = "https://relay.example/v1"
RELAY_CONFIG = f"""
model_provider = "relay"
[model_providers.relay]
name = "relay"
base_url = "{RELAY}"
requires_openai_auth = true
"""  # takes auth.json's key, as codex does: an old one left beside it would go to the relay
KILLED_AT = """
import os, signal, sys
from pathlib import Path
from scvd.adapters.codex_import import import_codex

left = int(sys.argv[3])
def killing(real):
    def call(*args, **kwargs):
        global left
        left -= 1
        if left == 0:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*args, **kwargs)
    return call
for name in ("replace", "rename", "link", "unlink", "fsync"):
    setattr(os, name, killing(getattr(os, name)))
import_codex(Path(sys.argv[1]), Path(sys.argv[2]))
"""


def setup_dir(root: Path, name: str, config: str, key: str | None) -> Path:
    d = root / name
    d.mkdir()
    (d / "config.toml").write_text(config)
    if key:
        (d / "auth.json").write_text(json.dumps({"OPENAI_API_KEY": key}))
    return d


def import_killed_at(step: int, source: Path, home: Path) -> int:
    """The child's exit status: -SIGKILL when it reached its `step`th change, 0 when it finished first."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", KILLED_AT, str(source), str(home), str(step)], env=env,
                          capture_output=True, timeout=120).returncode


def held(home: Path) -> tuple[str, str | None]:
    """(where config.toml sends requests, the key in auth.json)."""
    config = (home / "config.toml").read_text()
    auth = home / "auth.json"
    return (RELAY if RELAY in config else OPENAI), (json.loads(auth.read_text())["OPENAI_API_KEY"]
                                                   if auth.exists() else None)


def leftovers(home: Path) -> list[str]:
    return sorted(p.name for p in home.iterdir() if p.name.startswith(".") and p.is_file())


def each_kill(paths: paths_mod.Paths, first: Path, second: Path) -> Iterator[int]:
    """Import `first` whole, then `second` killed at step 1, 2, ... (yields each step killed)."""
    home = paths.adapters_dir / "codex"
    for step in itertools.count(1):
        shutil.rmtree(home, ignore_errors=True)
        service.import_setup("codex", str(first), paths=paths, env={})
        status = import_killed_at(step, second, home)
        if status == 0:
            return
        assert status == -signal.SIGKILL, f"the import killed at step {step} failed otherwise ({status})"
        yield step


@pytest.fixture
def paths(tmp_path: Path) -> paths_mod.Paths:
    p = paths_mod.resolve({"SCV_HOME": str(tmp_path / "scv")})
    paths_mod.prepare(p)
    return p


def test_an_import_killed_at_any_step_then_imported_again_holds_the_new_setup_whole(paths, tmp_path) -> None:
    """The reviewer's case: killed between the relay's config.toml and the old auth.json's removal,
    the second import found the relay's endpoint in the home, so it kept the OpenAI key beside it."""
    openai = setup_dir(tmp_path, "openai", 'model = "gpt-5"\n', OLD_KEY)
    relay = setup_dir(tmp_path, "relay", RELAY_CONFIG, None)
    home = paths.adapters_dir / "codex"
    steps = []
    for step in each_kill(paths, openai, relay):
        out = service.import_setup("codex", str(relay), paths=paths, env={})
        assert held(home) == (RELAY, None), f"killed at step {step}: {out['warnings']}"
        assert leftovers(home) == [], f"killed at step {step}"
        steps.append(step)
    assert len(steps) >= 8, steps  # every step of the commit was killed, not the first only


@pytest.mark.parametrize("relay_key", [None, NEW_KEY], ids=["relay-without-key", "relay-with-its-key"])
def test_an_agent_run_after_a_killed_import_sees_one_setup_whole(harness: Harness, tmp_path, monkeypatch,
                                                                relay_key) -> None:
    """Killed between the relay's config.toml and the old auth.json's removal (or replacement), an
    agent_codex run read the relay's config with the old OpenAI key beside it."""
    openai = setup_dir(tmp_path, "openai", 'model = "gpt-5"\n', OLD_KEY)
    relay = setup_dir(tmp_path, "relay", RELAY_CONFIG, relay_key)
    home = harness.paths.adapters_dir / "codex"
    monkeypatch.setenv("FAKE_AGENT_MODE", "read")
    monkeypatch.setenv("FAKE_AGENT_READ", str(home / "auth.json"))
    seen = set()
    for step in each_kill(harness.paths, openai, relay):
        result = harness.call("codex", prompt="go")  # the fake codex prints the auth.json it found
        endpoint, key = held(home)
        assert (OLD_KEY in result["output"]) == (key == OLD_KEY), f"killed at step {step}"
        assert (endpoint, key) in {(OPENAI, OLD_KEY), (RELAY, relay_key)}, f"killed at step {step}"
        assert leftovers(home) == [], f"killed at step {step}"
        seen.add((endpoint, key))
    assert seen == {(OPENAI, OLD_KEY), (RELAY, relay_key)}  # killed before its commit and after it


def test_a_chat_turn_after_a_killed_import_never_sends_the_old_key_to_the_new_endpoint(paths, tmp_path) -> None:
    openai = setup_dir(tmp_path, "openai", 'model = "gpt-5"\n', OLD_KEY)
    relay = setup_dir(tmp_path, "relay", RELAY_CONFIG, None)
    home = paths.adapters_dir / "codex"
    for step in each_kill(paths, openai, relay):
        try:
            settings = codex_settings(home, env={})
        except ProviderFailure as exc:  # the relay's config alone: it has no key
            assert exc.reason == "auth" and held(home) == (RELAY, None), f"killed at step {step}"
        else:
            assert (settings.base_url, settings.api_key) == (OPENAI, OLD_KEY), f"killed at step {step}"
        assert leftovers(home) == [], f"killed at step {step}"


def test_a_home_an_older_scvd_left_half_imported_is_mended_by_the_next_import(paths, tmp_path) -> None:
    """Killed midway, an scvd without the journal left the relay's config beside the OpenAI key, and
    the key's hard link `.auth.json.old`: the relay's import again removes that key, and the link."""
    openai = setup_dir(tmp_path, "openai", 'model = "gpt-5"\n', OLD_KEY)
    relay = setup_dir(tmp_path, "relay", RELAY_CONFIG, None)
    home = paths.adapters_dir / "codex"
    service.import_setup("codex", str(openai), paths=paths, env={})
    os.link(home / "auth.json", home / ".auth.json.old")
    (home / "config.toml").write_text(RELAY_CONFIG)
    out = service.import_setup("codex", str(relay), paths=paths, env={})
    assert held(home) == (RELAY, None) and leftovers(home) == []
    assert any("killed midway" in w for w in out["warnings"]), out["warnings"]
    assert any("was for an endpoint scvd cannot tell" in w and "was removed" in w for w in out["warnings"])


def left_the_old_way(paths: paths_mod.Paths, openai: Path, how: str) -> Path:
    """The OpenAI setup imported whole, then the relay's import killed after its first rename: by an scvd
    before the journal (the relay's config beside the OpenAI key, its kept and staged files), or by one
    whose journal cannot be read."""
    home = paths.adapters_dir / "codex"
    shutil.rmtree(home, ignore_errors=True)
    service.import_setup("codex", str(openai), paths=paths, env={})
    os.link(home / "config.toml", home / ".config.toml.old")
    (home / "config.toml").write_text(RELAY_CONFIG)
    if how == "older-scvd":
        (home / ".auth.json.x1y2z3.tmp").write_text(json.dumps({"OPENAI_API_KEY": NEW_KEY}))
    else:
        (home / ".scvd-import.undo").write_text('{"config.toml": tru')
    return home


REFUSED = "may hold a key for another endpoint"


@pytest.mark.parametrize("how", ["older-scvd", "unreadable-journal"])
def test_a_home_left_unsure_is_refused_by_agent_runs_and_chat_turns_until_an_import_settles_it(
        harness: Harness, tmp_path, monkeypatch, how) -> None:
    """Only an import looked for an older scvd's leftovers, and an unreadable journal was removed by the
    next user: an agent run or chat turn then sent the OpenAI key to the relay."""
    openai = setup_dir(tmp_path, "openai", 'model = "gpt-5"\n', OLD_KEY)
    relay = setup_dir(tmp_path, "relay", RELAY_CONFIG, NEW_KEY)
    home = left_the_old_way(harness.paths, openai, how)
    left = leftovers(home)
    monkeypatch.setenv("FAKE_AGENT_MODE", "read")
    monkeypatch.setenv("FAKE_AGENT_READ", str(home / "auth.json"))
    with pytest.raises(Failed, match=REFUSED) as refused:
        harness.call("codex", prompt="go")
    assert "run `scvctl agents import codex` again" in refused.value.message
    assert not harness.log.exists()  # the agent never ran
    with pytest.raises(ProviderFailure, match=REFUSED):
        codex_settings(home, env={})
    assert leftovers(home) == left  # kept for the import that settles it
    out = service.import_setup("codex", str(relay), paths=harness.paths, env={})
    assert any("killed midway" in w for w in out["warnings"]), out["warnings"]
    assert leftovers(home) == []
    settings = codex_settings(home, env={})
    assert (settings.base_url, settings.api_key) == (RELAY, NEW_KEY)
    assert NEW_KEY in harness.call("codex", prompt="go")["output"]


def test_a_home_left_unsure_still_lets_its_sign_in_be_removed(harness: Harness, tmp_path) -> None:
    """`scvctl agents logout codex` was refused with "import again": removing a key sends it nowhere,
    so a logout goes on; a login or status is still refused."""
    from scvd.config import Config

    openai = setup_dir(tmp_path, "openai", 'model = "gpt-5"\n', OLD_KEY)
    home = left_the_old_way(harness.paths, openai, "older-scvd")
    env = {"PATH": os.environ["PATH"]}
    launch = service.launch_spec("codex", "logout", [], config=Config(), paths=harness.paths, env=env, withheld=())
    assert launch.argv[1:] == ["logout"] and launch.env["CODEX_HOME"] == str(home)
    for action in ("login", "status"):
        with pytest.raises(Failed, match=REFUSED):
            service.launch_spec("codex", action, [], config=Config(), paths=harness.paths, env=env, withheld=())


def test_an_import_settling_an_unsure_home_killed_at_any_step_leaves_it_refused_or_whole(paths, tmp_path) -> None:
    """Once the import has removed the leftovers it settles, a kill before its commit must still leave the
    home refused: the relay's config is still there beside the OpenAI key."""
    openai = setup_dir(tmp_path, "openai", 'model = "gpt-5"\n', OLD_KEY)
    relay = setup_dir(tmp_path, "relay", RELAY_CONFIG, NEW_KEY)
    seen = set()
    for step in itertools.count(1):
        home = left_the_old_way(paths, openai, "older-scvd")
        status = import_killed_at(step, relay, home)
        assert status in (0, -signal.SIGKILL), f"the import killed at step {step} failed otherwise ({status})"
        try:
            settings = codex_settings(home, env={})
        except ProviderFailure as exc:
            assert REFUSED in exc.message, f"killed at step {step}"
            seen.add("refused")
        else:
            assert (settings.base_url, settings.api_key) == (RELAY, NEW_KEY), f"killed at step {step}"
            seen.add("relay")
        if status == 0:
            break
    assert seen == {"refused", "relay"} and step >= 8, (seen, step)


PAUSED_READER = """
import sys
from pathlib import Path
from scvd.chat import provider

real = provider.read_config
def pausing(home):  # between the turn's read of config.toml and of auth.json
    config = real(home)
    print("read", flush=True)
    sys.stdin.readline()
    return config
provider.read_config = pausing
settings = provider.codex_settings(Path(sys.argv[1]), env={})
print(settings.base_url, settings.api_key, flush=True)
"""
TELLS_ITS_WAIT = """
import fcntl
real_flock, told = fcntl.flock, []
def flock(fd, how):  # says `waiting` the first time a lock is held by another
    try:
        return real_flock(fd, how)
    except BlockingIOError:
        if not told:
            print("waiting", flush=True)
            told.append(True)
        raise
fcntl.flock = flock
"""
WAITING_IMPORT = TELLS_ITS_WAIT + """
import sys
from pathlib import Path
from scvd.adapters.codex_import import import_codex
import_codex(Path(sys.argv[1]), Path(sys.argv[2]))
print("imported", flush=True)
"""
WAITING_READER = TELLS_ITS_WAIT + PAUSED_READER


def test_an_import_waits_for_a_chat_turn_reading_the_setup_so_its_key_and_endpoint_are_one_imports(
        paths, tmp_path) -> None:
    """A turn read config.toml and auth.json without the import lock: an import between its two reads
    paired the OpenAI endpoint with the relay's key (1 turn in ~7,000 while importing in a loop)."""
    openai = setup_dir(tmp_path, "openai", 'model = "gpt-5"\n', OLD_KEY)
    relay = setup_dir(tmp_path, "relay", RELAY_CONFIG, NEW_KEY)
    service.import_setup("codex", str(openai), paths=paths, env={})
    home = paths.adapters_dir / "codex"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    reader = subprocess.Popen([sys.executable, "-c", PAUSED_READER, str(home)], env=env, text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    importer = None
    try:
        assert reader.stdout.readline() == "read\n"
        importer = subprocess.Popen([sys.executable, "-c", WAITING_IMPORT, str(relay), str(home)], env=env,
                                    text=True, stdout=subprocess.PIPE)
        assert importer.stdout.readline() == "waiting\n"  # for the turn's lock, not done already
        assert held(home) == (OPENAI, OLD_KEY)
        turn = reader.communicate("\n", timeout=60)[0]
        assert turn.split() == [OPENAI, OLD_KEY]
        assert importer.communicate(timeout=60)[0] == "imported\n" and importer.returncode == 0
        assert held(home) == (RELAY, NEW_KEY)
    finally:
        for child in (reader, importer):
            if child is not None and child.poll() is None:
                child.kill()
                child.wait()


def test_an_import_waiting_for_a_reader_goes_before_the_readers_that_come_after_it(paths, tmp_path) -> None:
    """flock prefers no one: a turn (or agent launch) that came while an import waited for another's read
    took the shared lock at once, so overlapping readers kept the import waiting past its 10 s."""
    openai = setup_dir(tmp_path, "openai", 'model = "gpt-5"\n', OLD_KEY)
    relay = setup_dir(tmp_path, "relay", RELAY_CONFIG, NEW_KEY)
    service.import_setup("codex", str(openai), paths=paths, env={})
    home = paths.adapters_dir / "codex"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    children: list[subprocess.Popen] = []

    def start(script: str, *args: Path, stdin: int | None = subprocess.PIPE) -> subprocess.Popen:
        children.append(subprocess.Popen([sys.executable, "-c", script, *map(str, args)], env=env, text=True,
                                         stdin=stdin, stdout=subprocess.PIPE))
        return children[-1]

    try:
        first = start(PAUSED_READER, home)
        assert first.stdout.readline() == "read\n"  # it holds the lock shared
        importer = start(WAITING_IMPORT, relay, home, stdin=subprocess.DEVNULL)
        assert importer.stdout.readline() == "waiting\n"  # for the first reader
        second = start(WAITING_READER, home)
        assert second.stdout.readline() == "waiting\n"  # behind the import, not in beside the first
        assert first.communicate("\n", timeout=60)[0].split() == [OPENAI, OLD_KEY]
        assert importer.communicate(timeout=60)[0] == "imported\n" and importer.returncode == 0
        assert second.stdout.readline() == "read\n"
        assert second.communicate("\n", timeout=60)[0].split() == [RELAY, NEW_KEY]  # the import went first
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
