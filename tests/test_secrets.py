"""The secret store: keyring (a real file-backed backend from keyrings.alt), secrets.toml, environment.

No mocks: the keyring path uses keyrings.alt's PlaintextKeyring writing under a
temporary XDG_DATA_HOME, chosen the way a user chooses one (PYTHON_KEYRING_BACKEND
or keyringrc.cfg); the file path writes a real 0600 file.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import resource
import signal
import stat
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

from helpers import blocking_keyring, lockable_keyring
from scvd import errors
from scvd import secrets as secrets_mod
from scvd.secrets import SecretStore, detect_keyring
from scvd.secrets_file import parse_file, render_file

ROOT = Path(__file__).resolve().parents[1]
PLAINTEXT = "keyrings.alt.file.PlaintextKeyring"
NO_KEYRING = "keyring.backends.null.Keyring"
LOCKABLE = lockable_keyring.BACKEND  # a file-backed keyring a test can lock
TRICKY = 'tok "en"\\ with\nnewline\ttab \x7f and ünïcode 🔑'


@pytest.fixture
def xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Private XDG dirs, so neither the user's keyringrc.cfg nor their keyring is touched."""
    for name in ("XDG_CONFIG_HOME", "XDG_DATA_HOME"):
        d = tmp_path / name.lower()
        d.mkdir()
        monkeypatch.setenv(name, str(d))
    monkeypatch.delenv("PYTHON_KEYRING_BACKEND", raising=False)
    return tmp_path


def file_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, env: dict[str, str] | None = None) -> SecretStore:
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", NO_KEYRING)
    return SecretStore(tmp_path / "conf" / "secrets.toml", env=env or {})


def test_file_store_round_trip_is_0600_and_reread(xdg: Path, monkeypatch: pytest.MonkeyPatch):
    store = file_store(xdg, monkeypatch)
    assert store.keyring() is None
    entry = store.set("API_TOKEN", TRICKY)
    assert (entry.source, entry.where) == ("file", str(store.path))
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
    # a fresh store (another process, e.g. the daemon) reads the same value back
    again = SecretStore(store.path, env={})
    assert again.get("API_TOKEN") == TRICKY
    assert again.require("API_TOKEN") == TRICKY
    assert [(e.name, e.source) for e in again.list()] == [("API_TOKEN", "file")]
    assert again.delete("API_TOKEN") == ["file"]
    assert again.get("API_TOKEN") is None
    assert again.delete("API_TOKEN") == []


def test_a_copy_a_writer_killed_mid_write_left_is_gone_with_the_next_write(xdg: Path, monkeypatch: pytest.MonkeyPatch):
    store = file_store(xdg, monkeypatch)
    store.set("API_TOKEN", "rotated-away")
    left = store.path.with_name(f".{store.path.name}.99999.tmp")  # as a SIGKILL before its rename leaves it
    left.write_text('API_TOKEN = "rotated-away"\n')
    store.delete("API_TOKEN")
    assert not left.exists()
    assert [p.name for p in store.path.parent.iterdir() if "rotated-away" in p.read_text()] == []


def test_a_loosened_file_is_tightened_on_read(xdg: Path, monkeypatch: pytest.MonkeyPatch):
    store = file_store(xdg, monkeypatch)
    store.set("K", "v")
    os.chmod(store.path, 0o644)
    assert store.get("K") == "v"
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600


def test_lookup_order_file_then_environment(xdg: Path, monkeypatch: pytest.MonkeyPatch):
    store = file_store(xdg, monkeypatch, env={"FROM_ENV": "e", "BOTH": "env-loses"})
    store.set("BOTH", "file-wins")
    assert store.lookup("BOTH") == ("file-wins", "file")
    assert store.lookup("FROM_ENV") == ("e", "env")
    assert store.source("NOWHERE").source == "missing"
    listed = {e.name: e.source for e in store.list(also=["FROM_ENV", "NOWHERE"])}
    assert listed == {"BOTH": "file", "FROM_ENV": "env", "NOWHERE": "missing"}


def test_missing_key_is_credential_missing_naming_key_and_remedies(xdg: Path, monkeypatch: pytest.MonkeyPatch):
    store = file_store(xdg, monkeypatch)
    with pytest.raises(errors.CredentialMissing, match="GITHUB_TOKEN"):
        asyncio.run(store.require_async("GITHUB_TOKEN"))
    store.set("GITHUB_TOKEN", "t")
    assert asyncio.run(store.get_async("GITHUB_TOKEN")) == asyncio.run(store.require_async("GITHUB_TOKEN")) == "t"
    store.delete("GITHUB_TOKEN")
    with pytest.raises(errors.CredentialMissing) as info:
        store.require("GITHUB_TOKEN")
    assert info.value.kind == "credential_missing"
    assert "GITHUB_TOKEN" in info.value.message
    assert "scvctl secrets set GITHUB_TOKEN" in info.value.message
    assert "store_secret" in info.value.message


@pytest.mark.parametrize("key", ["", "1ABC", "A-B", "keyring", "A B", "x" * 129, "É"])
def test_bad_names_are_refused_with_the_rule(xdg: Path, monkeypatch: pytest.MonkeyPatch, key: str):
    store = file_store(xdg, monkeypatch)
    with pytest.raises(errors.InvalidRequest, match="letters, digits and _"):
        store.set(key, "v")


def test_a_broken_file_names_the_file_but_never_a_value(tmp_path: Path):
    path = tmp_path / "secrets.toml"
    with pytest.raises(errors.ConfigError) as info:
        parse_file(path, 'GOOD = "s3cr3t-value"\nBAD = 12\n')
    assert str(path) in info.value.message and "'BAD'" in info.value.message
    assert "s3cr3t" not in info.value.message
    with pytest.raises(errors.ConfigError, match="not valid TOML"):
        parse_file(path, 'X = "s3cr3t\n')


def test_a_value_typed_without_quotes_is_told_so_without_repeating_it(tmp_path: Path):
    path = tmp_path / "secrets.toml"
    with pytest.raises(errors.ConfigError) as info:
        parse_file(path, '# mine\n\nA = "x"\n\nGH_TOKEN = ghp_s3cr3t\n')
    assert info.value.message == (f'{path}: not valid TOML (Invalid value (at line 5, column 12)); the value of '
                                  'GH_TOKEN needs quotes: GH_TOKEN = "..."; fix or remove it')


def test_a_symlinked_file_is_refused_saying_why_and_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """It said "cannot read (Too many levels of symbolic links)", for every lookup (env-only keys too)."""
    store = file_store(tmp_path, monkeypatch, env={"ONLY_IN_ENV": "e"})
    real = tmp_path / "dotfiles" / "secrets.toml"
    real.parent.mkdir()
    real.write_text('[secrets]\nA = "1"\n')
    store.path.parent.mkdir(parents=True, exist_ok=True)
    store.path.symlink_to(real)
    with pytest.raises(errors.ConfigError) as refused:
        store.get("ONLY_IN_ENV")
    assert refused.value.message == (
        f"{store.path} is a symbolic link; secrets are read only from a regular file in place (0600, never "
        f"through a link another place decides): move the file there instead of linking it "
        f'(mv "$(readlink -f {store.path})" {store.path})')


def test_rendered_file_parses_back_exactly(tmp_path: Path):
    values = {"A": TRICKY, "B": "plain"}
    assert parse_file(tmp_path / "s", render_file(values, ["K1", "K2"])) == (values, ["K1", "K2"])


# --- the keyring path, with a real file-backed backend ----------------------------------


def in_keyring_file(xdg: Path, value: str) -> bool:
    """PlaintextKeyring keeps base64 of the value under [scv] in its own file."""
    text = (xdg / "xdg_data_home" / "python_keyring" / "keyring_pass.cfg").read_text()
    return "[scv]" in text and base64.b64encode(value.encode()).decode() in text


def test_keyring_chosen_by_environment_holds_the_value_and_the_file_only_the_name(
        xdg: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", PLAINTEXT)
    store = SecretStore(xdg / "conf" / "secrets.toml", env={})
    assert type(store.keyring()).__name__ == "PlaintextKeyring"
    store.set("API_TOKEN", "s3cr3t-in-keyring")
    assert store.lookup("API_TOKEN") == ("s3cr3t-in-keyring", "keyring")
    # the value went to the keyring's own file; secrets.toml keeps only the name, for listing
    assert in_keyring_file(xdg, "s3cr3t-in-keyring")
    text = store.path.read_text()
    assert "API_TOKEN" in text and "s3cr3t" not in text
    assert [(e.name, e.source) for e in store.list()] == [("API_TOKEN", "keyring")]
    assert store.delete("API_TOKEN") == ["keyring"]
    assert store.get("API_TOKEN") is None
    assert "API_TOKEN" not in store.path.read_text()


def test_a_key_stored_in_a_keyring_this_process_cannot_use_says_so_not_that_it_is_unset(
        xdg: Path, monkeypatch: pytest.MonkeyPatch):
    """`scvctl secrets set` in a desktop session stores into its keyring; scvd, run without it, said
    "not set: store it with scvctl secrets set", which stored it into that keyring again."""
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", PLAINTEXT)
    SecretStore(xdg / "conf" / "secrets.toml", env={}).set("GH_TOKEN", "in-the-desktop-keyring")
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", NO_KEYRING)  # scvd's environment: no keyring
    store = SecretStore(xdg / "conf" / "secrets.toml", env={})
    with pytest.raises(errors.CredentialMissing) as missing:
        store.require("GH_TOKEN")
    assert missing.value.message.startswith(
        f"the secret GH_TOKEN was stored in an OS keyring ({store.path} lists it), which this process cannot "
        "use (the configured keyring backend keyring.backends.null.Keyring stores nothing)"), missing.value.message
    assert missing.value.hint == "PYTHON_KEYRING_BACKEND=keyring.backends.null.Keyring scvctl secrets set GH_TOKEN"
    (entry,) = store.list()
    assert entry.source == "missing" and entry.where.startswith("not set here: stored in a keyring this process")
    store.set("GH_TOKEN", "now-in-the-file")  # what the hint (or store_secret inside scvd) does
    assert store.lookup("GH_TOKEN") == ("now-in-the-file", "file")


def test_a_value_set_where_the_keyring_is_out_of_reach_wins_and_its_delete_waits_for_the_keyring(
        xdg: Path, monkeypatch: pytest.MonkeyPatch):
    """`scvctl secrets set` over ssh (no keyring) wrote the file, scvd (with the keyring) went on reading the
    old value there, and a delete from there dropped only the name: the old value stayed in effect, unlisted."""
    path = xdg / "conf" / "secrets.toml"
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", PLAINTEXT)
    daemon = SecretStore(path, env={})
    daemon.set("API_TOKEN", "old-in-keyring")
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", NO_KEYRING)
    over_ssh = SecretStore(path, env={})
    assert over_ssh.set("API_TOKEN", "rotated").source == "file"
    assert daemon.lookup("API_TOKEN") == ("rotated", "file")
    with pytest.raises(errors.Unavailable) as refused:
        over_ssh.delete("API_TOKEN")
    assert refused.value.message.startswith(
        f"API_TOKEN is held in an OS keyring ({path} lists it), which this process cannot use (the configured "
        "keyring backend keyring.backends.null.Keyring stores nothing); nothing was deleted: delete it where "
        "that keyring is (`scvctl secrets delete API_TOKEN` in your desktop session"), refused.value.message
    assert daemon.lookup("API_TOKEN") == ("rotated", "file")
    assert sorted(daemon.delete("API_TOKEN")) == ["file", "keyring"]
    assert daemon.get("API_TOKEN") is None and "API_TOKEN" not in path.read_text()


def test_a_value_stored_in_the_keyring_beats_scvds_environment_variable_of_that_name(
        xdg: Path, monkeypatch: pytest.MonkeyPatch):
    """Seed 003's order: keyring, secrets file, then the environment. A stale token in scvd's
    environment (a drop-in's Environment=) must not shadow the one a person just stored, or
    store_secret's heal would never take."""
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", PLAINTEXT)
    store = SecretStore(xdg / "conf" / "secrets.toml", env={"GH_TOKEN": "stale-from-env"})
    assert store.lookup("GH_TOKEN") == ("stale-from-env", "env")
    store.set("GH_TOKEN", "fresh-in-keyring")
    assert store.lookup("GH_TOKEN") == ("fresh-in-keyring", "keyring")
    assert [(e.name, e.source) for e in store.list()] == [("GH_TOKEN", "keyring")]
    store.delete("GH_TOKEN")
    assert store.lookup("GH_TOKEN") == ("stale-from-env", "env")


def test_a_broken_secrets_toml_does_not_hide_what_the_keyring_holds(xdg: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", PLAINTEXT)
    store = SecretStore(xdg / "conf" / "secrets.toml", env={"ONLY_IN_ENV": "e"})
    store.set("API_TOKEN", "in-keyring")
    store.path.write_text("BROKEN = 12\n" + store.path.read_text())  # a hand edit gone wrong
    assert store.lookup("API_TOKEN") == ("in-keyring", "keyring")
    with pytest.raises(errors.ConfigError, match="'BROKEN'"):  # elsewhere the file's error says what to fix
        store.lookup("ONLY_IN_ENV")


def test_setting_into_the_keyring_drops_the_file_copy(
        xdg: Path, monkeypatch: pytest.MonkeyPatch):
    path = xdg / "conf" / "secrets.toml"
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", NO_KEYRING)
    SecretStore(path, env={}).set("K", "old-file-value")
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", PLAINTEXT)
    store = SecretStore(path, env={})
    assert store.lookup("K") == ("old-file-value", "file")
    store.set("K", "new-keyring-value")
    assert store.lookup("K") == ("new-keyring-value", "keyring")
    assert "old-file-value" not in path.read_text()


def test_keyring_chosen_in_keyringrc_is_used(xdg: Path):
    cfg = xdg / "xdg_config_home" / "python_keyring"
    cfg.mkdir(parents=True)
    (cfg / "keyringrc.cfg").write_text(f"[backend]\ndefault-keyring={PLAINTEXT}\n")
    backend, why = detect_keyring()
    assert type(backend).__name__ == "PlaintextKeyring", why
    assert "chosen in the keyring configuration" in why


def test_the_null_keyring_means_none(xdg: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", NO_KEYRING)
    backend, why = detect_keyring()
    assert backend is None and "stores nothing" in why


ELSEWHERE_BACKEND = '''
from keyrings.alt.file import PlaintextKeyring

class Elsewhere(PlaintextKeyring):
    """keyrings.alt's plain-text file, kept where no documented setting of keyring puts it."""

    file_path = {path!r}
'''


def test_a_file_backed_keyring_kept_where_scvd_does_not_look_is_warned_of(
        xdg: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture):
    """scvd's read rule and sandbox know keyring's data folder and KEYRING_PROPERTY_FILE_PATH, not a
    backend's own place: the first use of such a store says so, where it kept silent."""
    (tmp_path / "elsewhere_keyring.py").write_text(ELSEWHERE_BACKEND.format(path=str(tmp_path / "vault.cfg")))
    monkeypatch.syspath_prepend(str(tmp_path))
    for backend, warned in ((PLAINTEXT, False), ("elsewhere_keyring.Elsewhere", True)):
        monkeypatch.setenv("PYTHON_KEYRING_BACKEND", backend)
        caplog.clear()
        with caplog.at_level("WARNING", logger="scvd.keyring_files"):
            SecretStore(tmp_path / "conf" / "secrets.toml", env={}).set("API_TOKEN", "tok")
        assert (f"keeps secrets in {tmp_path / 'vault.cfg'}, which scvd does not know" in caplog.text) is warned
    assert (tmp_path / "vault.cfg").is_file()  # where the value went


HANGING_BACKEND = '''
import time
from keyring.backend import KeyringBackend
from keyring.compat import properties

class Hanging(KeyringBackend):
    """Not usable here (its priority says so), and would hang if anyone called it."""

    @properties.classproperty
    def priority(cls):
        raise RuntimeError("no session bus")

    def get_password(self, service, username):
        time.sleep(3600)

    def set_password(self, service, username, password):
        time.sleep(3600)

    def delete_password(self, service, username):
        time.sleep(3600)
'''


def test_an_unusable_backend_is_judged_by_priority_never_called(xdg: Path, tmp_path: Path):
    """A backend whose priority says "not here" is skipped without calling it (it would hang)."""
    (tmp_path / "hanging_keyring.py").write_text(HANGING_BACKEND)
    env = {k: v for k, v in os.environ.items() if k != "PYTHON_KEYRING_BACKEND"}
    env.update(PYTHON_KEYRING_BACKEND="hanging_keyring.Hanging", PYTHONPATH=f"{tmp_path}:{ROOT}",
               XDG_CONFIG_HOME=str(xdg / "xdg_config_home"), XDG_DATA_HOME=str(xdg / "xdg_data_home"))
    code = ("from pathlib import Path; from scvd.secrets import SecretStore\n"
            f"s = SecretStore(Path({str(tmp_path / 's.toml')!r}), env={{}})\n"
            "print(s.keyring_status()); s.set('K', 'v'); print(s.lookup('K')[1])")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    status, source = out.stdout.splitlines()
    assert "not usable" in status and "no session bus" in status
    assert source == "file"


# --- scvctl secrets -----------------------------------------------------------------------


def scvctl(home: Path, xdg: Path, *args: str, input: str | None = None, backend: str = NO_KEYRING,
           preexec_fn: Callable[[], None] | None = None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCV")}
    env.update(SCV_HOME=str(home), PYTHONPATH=f"{ROOT}:{ROOT / 'tests'}", PYTHON_KEYRING_BACKEND=backend,
               XDG_CONFIG_HOME=str(xdg / "xdg_config_home"), XDG_DATA_HOME=str(xdg / "xdg_data_home"),
               LOCKABLE_KEYRING=str(xdg / "lockable.json"), PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run([sys.executable, "-m", "scvctl", *args], env=env, input=input,
                          capture_output=True, text=True, timeout=60, preexec_fn=preexec_fn)


def files_of_at_most_100_bytes() -> None:
    """A write past 100 bytes fails with EFBIG, for root too: the keyring's small JSON file fits,
    secrets.toml does not."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # else the process is killed rather than told
    resource.setrlimit(resource.RLIMIT_FSIZE, (100, 100))


HAND_EDITED = """\
# tokens for the deploy scripts; rotate every 90 days (ask ops)
GITHUB_TOKEN = "ghp-old"   # the bot account, not mine

# PEM key for the staging box
STAGING_KEY = \"\"\"
-----BEGIN KEY-----
abc
-----END KEY-----
\"\"\"
OLD_TOKEN = 'gone-soon'
"""


def test_scvctl_secrets_set_and_delete_keep_a_hand_edited_files_comments(xdg: Path):
    """docs/configuration.md: secrets.toml is plain TOML you may edit by hand. Any set or delete
    rewrote the whole file, so the person's comments and layout were lost."""
    home = xdg / "home"
    home.mkdir(mode=0o700)
    path = home / "secrets.toml"
    path.write_text(HAND_EDITED)
    path.chmod(0o600)
    assert scvctl(home, xdg, "secrets", "set", "GITHUB_TOKEN", input="ghp-new\n").returncode == 0
    assert scvctl(home, xdg, "secrets", "set", "NEW_TOKEN", input="fresh\n").returncode == 0
    assert scvctl(home, xdg, "secrets", "delete", "OLD_TOKEN").returncode == 0
    text = path.read_text()
    for kept in ("# tokens for the deploy scripts; rotate every 90 days (ask ops)\n", "# PEM key for the staging box\n",
                 'GITHUB_TOKEN = "ghp-new"  # the bot account, not mine\n',
                 '\"\"\"\n-----BEGIN KEY-----\nabc\n-----END KEY-----\n\"\"\"\n'):
        assert kept in text, text
    assert "OLD_TOKEN" not in text and "ghp-old" not in text
    assert text.index("GITHUB_TOKEN") < text.index("STAGING_KEY") < text.index("NEW_TOKEN"), text
    store = SecretStore(path, env={})
    assert [store.get(k) for k in ("GITHUB_TOKEN", "NEW_TOKEN", "STAGING_KEY")] == [
        "ghp-new", "fresh", "-----BEGIN KEY-----\nabc\n-----END KEY-----\n"]


def test_a_set_syncs_the_directory_after_its_rename(xdg: Path, monkeypatch: pytest.MonkeyPatch):
    """The rename of the new secrets.toml was not made durable: a power loss could bring back the old
    file (a rotated-out token) or none. The directory is fsynced as the write tool does."""
    store = file_store(xdg, monkeypatch)
    synced: list[int] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            synced.append(st.st_ino)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    store.set("API_TOKEN", "v1")
    assert synced == [store.path.parent.stat().st_ino]


def test_scvctl_secrets_set_from_stdin_list_delete(xdg: Path):
    home = xdg / "home"
    out = scvctl(home, xdg, "secrets", "set", "API_TOKEN", input="s3cr3t-from-stdin\n")
    assert out.returncode == 0, out.stderr
    assert "stored API_TOKEN in the file" in out.stdout and "s3cr3t" not in out.stdout + out.stderr
    secrets_file = home / "secrets.toml"
    assert stat.S_IMODE(secrets_file.stat().st_mode) == 0o600
    assert SecretStore(secrets_file, env={}).get("API_TOKEN") == "s3cr3t-from-stdin"  # one newline dropped

    listed = scvctl(home, xdg, "secrets", "list")
    assert listed.returncode == 0
    assert listed.stdout.split()[:2] == ["API_TOKEN", "file"]
    assert "s3cr3t" not in listed.stdout

    gone = scvctl(home, xdg, "secrets", "delete", "API_TOKEN")
    assert gone.returncode == 0 and "deleted API_TOKEN from the file" in gone.stdout
    scvctl(home, xdg, "secrets", "set", "API_TOKEN", input="again")
    gone = scvctl(home, xdg, "secrets", "delete", "API_TOKEN", "--json")
    assert gone.returncode == 0 and json.loads(gone.stdout) == {"name": "API_TOKEN", "deleted_from": ["file"]}
    again = scvctl(home, xdg, "secrets", "delete", "API_TOKEN")
    assert again.returncode == 1  # the name is wrong or already gone: say where the right one is
    assert again.stderr == "scvctl: API_TOKEN is not stored; `scvctl secrets list` shows the names that are\n"
    assert "no secrets stored" in scvctl(home, xdg, "secrets").stdout


@pytest.mark.parametrize("where", ["nowhere", "env"])
def test_scvctl_secrets_delete_of_a_name_not_stored_says_so_after_scvctl(
        xdg: Path, monkeypatch: pytest.MonkeyPatch, where: str):
    """configuration.md promises `scvctl:` before scvctl secrets' errors; these two lines came bare."""
    if where == "env":
        monkeypatch.setenv("NOPE", "from-the-shell")
    out = scvctl(xdg / "home", xdg, "secrets", "delete", "NOPE")
    assert (out.returncode, out.stdout) == (1, "")
    assert out.stderr == ("scvctl: NOPE is not stored; it comes from the environment, which scvctl cannot change\n"
                          if where == "env" else
                          "scvctl: NOPE is not stored; `scvctl secrets list` shows the names that are\n")


def test_scvctl_secrets_set_of_binary_or_oversized_input_says_what_to_store(xdg: Path):
    """A file piped in whole said only "a secret's value cannot hold a NUL character" (a binary one) or
    "is limited to 65536 characters": not that nothing was stored, nor what to give instead."""
    home = xdg / "home"
    out = scvctl(home, xdg, "secrets", "set", "CERT", input="\x7fELF\x00\x01")
    # no daemon involved: said without a wire code (`invalid_request:`)
    assert (out.returncode, out.stderr) == (1, "scvctl: a secret's value cannot hold a NUL character "
                                               "(binary data?): store it as text, e.g. its base64; nothing was stored\n")
    out = scvctl(home, xdg, "secrets", "set", "CERT", input="x" * 70_000)
    assert (out.returncode, out.stderr) == (1, "scvctl: a secret's value is limited to 65536 characters, "
                                               "this one has 70,000; nothing was stored (is it the right file?)\n")
    assert "no secrets stored" in scvctl(home, xdg, "secrets").stdout


@pytest.mark.parametrize("command", [["set", "API_TOKEN"], ["list"], ["delete", "API_TOKEN"]])
def test_scvctl_secrets_on_a_broken_secrets_toml_names_that_file_not_the_config(xdg: Path, command):
    """`config: .../secrets.toml: not valid TOML`: `config:` sent the person to config.toml."""
    home = xdg / "home"
    home.mkdir()
    (home / "secrets.toml").write_text("x = [\n")
    (home / "secrets.toml").chmod(0o600)
    out = scvctl(home, xdg, "secrets", *command, input="s3cr3t\n")
    assert (out.returncode, out.stderr) == (1, f"scvctl: {home / 'secrets.toml'}: not valid TOML (Invalid value "
                                               "(at end of document: line 2, column 1)); fix or remove it\n")


def test_scvctl_secrets_on_a_secrets_toml_nested_too_deeply_names_that_file(xdg: Path):
    """tomllib's RecursionError went uncaught: scvctl printed a traceback of ~200 KB."""
    home = xdg / "home"
    home.mkdir()
    (home / "secrets.toml").write_text("x = " + "[" * 1000 + "]" * 1000 + "\n")
    (home / "secrets.toml").chmod(0o600)
    out = scvctl(home, xdg, "secrets", "list")
    assert (out.returncode, out.stderr) == (1, f"scvctl: {home / 'secrets.toml'}: not valid TOML (arrays or inline "
                                               "tables nested too deeply to read); fix or remove it\n")


def test_scvctl_secrets_list_shows_keys_script_tools_declare_even_when_missing(xdg: Path):
    home = xdg / "home"
    folder = home / "tools" / "script" / "gh"
    folder.mkdir(parents=True)
    (folder / "tool.json").write_text('{"description": "x", "secrets": ["GH_TOKEN", "GH_HOST"]}')
    (folder / "run").write_text("#!/bin/sh\n")
    (folder / "run").chmod(0o700)
    scvctl(home, xdg, "secrets", "set", "GH_TOKEN", input="t")
    rows = [line.split()[:2] for line in scvctl(home, xdg, "secrets", "list").stdout.splitlines()]
    assert rows == [["GH_HOST", "missing"], ["GH_TOKEN", "file"]]


def test_scvctl_secrets_list_shows_keys_config_toml_names_even_when_missing(xdg: Path):
    """An MCP server's {secret = KEY} and a provider's api_key_secret are listed, set or not."""
    home = xdg / "home"
    home.mkdir()
    (home / "config.toml").write_text(
        '[mcp.servers.gh]\nurl = "https://mcp.example.com/mcp"\nheaders = {Authorization = {secret = "GH_MCP"}}\n'
        '[mcp.servers.fs]\ncommand = "/bin/cat"\nenv = {FS_KEY = {secret = "FS_KEY"}, PLAIN = "x"}\n'
        '[providers.p]\nmodel = "m"\napi_key_secret = "P_KEY"\n')
    scvctl(home, xdg, "secrets", "set", "FS_KEY", input="t")
    out = scvctl(home, xdg, "secrets", "list")
    assert out.returncode == 0, out.stderr
    rows = [line.split()[:2] for line in out.stdout.splitlines()]
    assert rows == [["FS_KEY", "file"], ["GH_MCP", "missing"], ["P_KEY", "missing"]]

    (home / "config.toml").write_text('[mcp.servers.fs]\ncommand = "/bin/cat"\nenv = {A = {secret = "bad-name"}}\n')
    out = scvctl(home, xdg, "secrets", "list")
    assert out.returncode == 0 and [line.split()[:2] for line in out.stdout.splitlines()] == [["FS_KEY", "file"]]
    assert "config.toml's secret names are not listed" in out.stderr and "'bad-name' is not valid" in out.stderr


def test_scvctl_secrets_set_into_a_keyring(xdg: Path):
    home = xdg / "home"
    out = scvctl(home, xdg, "secrets", "set", "API_TOKEN", input="s3cr3t", backend=PLAINTEXT)
    assert out.returncode == 0, out.stderr
    assert "stored API_TOKEN in the keyring" in out.stdout
    assert in_keyring_file(xdg, "s3cr3t")
    assert "s3cr3t" not in (home / "secrets.toml").read_text()
    listed = scvctl(home, xdg, "--json", "secrets", "list", backend=PLAINTEXT)
    assert '"source":"keyring"' in listed.stdout


def test_a_fifo_in_place_of_secrets_toml_is_refused_not_waited_on(xdg: Path):
    """Reading it waited for a writer, for good: `scvctl secrets list` hung, and in scvd every lookup."""
    home = xdg / "home"
    home.mkdir(mode=0o700)
    os.mkfifo(home / "secrets.toml", 0o600)
    out = scvctl(home, xdg, "secrets", "list")
    assert out.returncode == 1
    assert out.stderr.strip() == (f"scvctl: {home / 'secrets.toml'} is not a regular file; secrets are read only "
                                  "from one: remove it (`scvctl secrets set KEY` writes a new one)"), out.stderr


def test_scvctl_secrets_set_where_the_config_dir_cannot_be_made_says_so_without_a_traceback(xdg: Path):
    (xdg / "afile").write_text("not a directory\n")
    home = xdg / "afile" / "home"
    for args in (("set", "API_TOKEN"), ("delete", "API_TOKEN")):
        out = scvctl(home, xdg, "secrets", *args, input="s3cr3t")
        assert out.returncode == 1 and out.stderr.strip() == (
            f"scvctl: {home / 'secrets.toml'}: cannot write (Not a directory on {home}); nothing was changed: "
            "make that a directory you can write, or set SCV_HOME"), out.stderr


def test_scvctl_secrets_set_that_cannot_write_secrets_toml_stores_nothing_and_says_so(xdg: Path):
    """The value went into the keyring, then secrets.toml's write failed: the value was in effect
    while `list` did not show it."""
    home, kr = xdg / "home", xdg / "lockable.json"
    out = scvctl(home, xdg, "secrets", "set", "API_TOKEN", input="s3cr3t", backend=LOCKABLE,
                 preexec_fn=files_of_at_most_100_bytes)
    assert out.returncode == 1
    assert out.stderr.strip() == (f"scvctl: {home / 'secrets.toml'}: cannot write (File too large); API_TOKEN was "
                                  "not stored, nothing changed: fix that and set it again"), out.stderr
    assert not kr.exists() or "s3cr3t" not in kr.read_text()
    assert scvctl(home, xdg, "secrets", "list", backend=LOCKABLE).stdout.startswith("no secrets stored")
    # a keyring that refuses leaves the file as it was: the copy there stays, no name is added
    assert scvctl(home, xdg, "secrets", "set", "API_TOKEN", input="in-file").returncode == 0
    before = (home / "secrets.toml").read_text()
    lockable_keyring.lock(kr)
    out = scvctl(home, xdg, "secrets", "set", "API_TOKEN", input="new", backend=LOCKABLE)
    assert out.returncode == 1 and "could not store API_TOKEN (KeyringLocked)" in out.stderr
    assert (home / "secrets.toml").read_text() == before


def test_scvctl_secrets_set_drops_the_whitespace_around_a_pasted_value_and_says_so(xdg: Path):
    """A token pasted with a space or a second line break was stored with it: every call got a 401."""
    home = xdg / "home"
    out = scvctl(home, xdg, "secrets", "set", "GH_TOKEN", input=" tok-123\t\n\n")
    assert out.returncode == 0 and out.stdout.endswith("; the spaces or line breaks around the value were dropped\n")
    assert SecretStore(home / "secrets.toml", env={}).get("GH_TOKEN") == "tok-123"
    blank = scvctl(home, xdg, "secrets", "set", "GH_TOKEN", input="  \n")
    assert blank.returncode == 2 and "no value given for GH_TOKEN" in blank.stderr
    echoed = scvctl(home, xdg, "secrets", "set", "GH_TOKEN", input="tok-456\n")  # `echo tok | ...`: no news
    assert echoed.returncode == 0 and "dropped" not in echoed.stdout


def test_a_key_of_several_lines_is_stored_whole_with_its_last_line_break(xdg: Path):
    """Stripping took a PEM or OpenSSH key's last line break, which OpenSSH refuses a key without."""
    home = xdg / "home"
    pem = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjE=\n-----END OPENSSH PRIVATE KEY-----\n"
    out = scvctl(home, xdg, "secrets", "set", "DEPLOY_KEY", input=pem)
    assert out.returncode == 0 and "dropped" not in out.stdout, out.stdout
    assert SecretStore(home / "secrets.toml", env={}).get("DEPLOY_KEY") == pem
    SecretStore(home / "secrets.toml", env={}).set("OTHER_KEY", pem)  # as secret.provide stores it
    assert SecretStore(home / "secrets.toml", env={}).get("OTHER_KEY") == pem


def test_scvctl_secrets_set_refuses_an_empty_value_and_a_bad_name(xdg: Path):
    home = xdg / "home"
    empty = scvctl(home, xdg, "secrets", "set", "API_TOKEN", input="")
    assert empty.returncode == 2 and "no value given for API_TOKEN" in empty.stderr
    bad = scvctl(home, xdg, "secrets", "set", "not-a-name", input="v")
    assert bad.returncode == 2 and "letters, digits and _" in bad.stderr
    assert not (home / "secrets.toml").exists()
    # delete says the same, the same way (it was `invalid_request: ...`, exit 1, as if scvd refused it)
    bad = scvctl(home, xdg, "secrets", "delete", "not-a-name")
    assert bad.returncode == 2 and bad.stderr.startswith("usage: ") and "letters, digits and _" in bad.stderr


def test_scvctl_secrets_delete_with_the_keyring_locked_refuses_and_keeps_the_name(xdg: Path):
    """Deleting while locked used to drop the name from secrets.toml and leave the value in the keyring."""
    home, kr = xdg / "home", xdg / "lockable.json"
    assert scvctl(home, xdg, "secrets", "set", "GH_TOKEN", input="tok-123", backend=LOCKABLE).returncode == 0
    lockable_keyring.lock(kr)
    out = scvctl(home, xdg, "secrets", "delete", "GH_TOKEN", backend=LOCKABLE)
    assert out.returncode == 1
    assert out.stderr.startswith("scvctl: the keyring helpers.lockable_keyring.Keyring could not read "
                                 "GH_TOKEN (KeyringLocked): unlock it"), out.stderr
    assert "GH_TOKEN" in (home / "secrets.toml").read_text()
    lockable_keyring.lock(kr, False)
    assert scvctl(home, xdg, "secrets", "list", backend=LOCKABLE).stdout.split()[:2] == ["GH_TOKEN", "keyring"]
    gone = scvctl(home, xdg, "secrets", "delete", "GH_TOKEN", backend=LOCKABLE)
    assert gone.returncode == 0 and "deleted GH_TOKEN from the keyring" in gone.stdout
    assert "tok-123" not in kr.read_text()


def test_a_secrets_toml_not_in_utf8_says_a_fix_that_works(xdg: Path):
    """It said to set that secret again with `scvctl secrets set`, which reads the file first and failed alike."""
    home = xdg / "home"
    home.mkdir(exist_ok=True)
    (home / "secrets.toml").write_bytes('# keys\nGH_TOKEN = "p\u00e4ss"\n'.encode("latin-1"))
    (home / "secrets.toml").chmod(0o600)
    again = scvctl(home, xdg, "secrets", "set", "GH_TOKEN", input="pass")
    assert (again.returncode, again.stderr) == (1, f"scvctl: {home / 'secrets.toml'}: not UTF-8 text at line 2; save "
                                                   "it as UTF-8 in an editor (until then `scvctl secrets` cannot "
                                                   "change it either)\n")


def test_scvctl_secrets_list_with_the_keyring_locked_still_lists_every_name(xdg: Path):
    """It printed one `unavailable:` line and no list, even of the names secrets.toml holds."""
    home, kr = xdg / "home", xdg / "lockable.json"
    assert scvctl(home, xdg, "secrets", "set", "GH_TOKEN", input="tok-123", backend=LOCKABLE).returncode == 0
    assert scvctl(home, xdg, "secrets", "set", "API_TOKEN", input="in-file").returncode == 0
    lockable_keyring.lock(kr)
    out = scvctl(home, xdg, "secrets", "list", backend=LOCKABLE)
    assert out.returncode == 1
    assert [line.split()[:2] for line in out.stdout.splitlines()] == [["API_TOKEN", "file"], ["GH_TOKEN", "unknown"]]
    assert "could not read GH_TOKEN (KeyringLocked): unlock it to see whether it is set" in out.stdout
    # that one line: a log line for the same key before it (`... could not read GH_TOKEN (KeyringLocked);
    # trying the environment`) said it again, in the daemon's words
    assert out.stderr == ("scvctl: the keyring could not be read (locked?): unlock it, then list again to "
                          "see whether it holds GH_TOKEN\n")
    listed = scvctl(home, xdg, "--json", "secrets", "list", backend=LOCKABLE)
    assert listed.returncode == 1 and [e["source"] for e in json.loads(listed.stdout)] == ["file", "unknown"]


def test_scvctl_secrets_delete_of_a_name_whose_keyring_entry_is_gone_says_it_dropped_the_name(xdg: Path):
    """Removed in the keyring's own app, it was listed `missing`; delete dropped it from the list and
    said "GH_TOKEN is not stored" (exit 1)."""
    home, kr = xdg / "home", xdg / "lockable.json"
    assert scvctl(home, xdg, "secrets", "set", "GH_TOKEN", input="tok-123", backend=LOCKABLE).returncode == 0
    kr.write_text("{}")
    gone = scvctl(home, xdg, "secrets", "delete", "GH_TOKEN", backend=LOCKABLE)
    assert (gone.returncode, gone.stdout) == (0, f"deleted GH_TOKEN from the names {home / 'secrets.toml'} lists "
                                                 "(the keyring no longer held its value)\n"), gone.stderr
    assert "no secrets stored" in scvctl(home, xdg, "secrets", backend=LOCKABLE).stdout


def test_a_locked_keyring_is_passed_over_but_a_key_found_nowhere_else_is_unavailable(
        xdg: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", LOCKABLE)
    monkeypatch.setenv("LOCKABLE_KEYRING", str(xdg / "lockable.json"))
    store = SecretStore(xdg / "conf" / "secrets.toml", env={"FROM_ENV": "e"})
    store.set("IN_KEYRING", "k")
    lockable_keyring.lock(xdg / "lockable.json")
    assert store.lookup("FROM_ENV") == ("e", "env")
    with pytest.raises(errors.Unavailable, match=r"could not read IN_KEYRING \(KeyringLocked\): unlock it"):
        store.require("IN_KEYRING")
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", NO_KEYRING)  # no keyring at all: not set here, and why
    with pytest.raises(errors.CredentialMissing, match="the secret IN_KEYRING was stored in an OS keyring"):
        SecretStore(store.path, env={}).require("IN_KEYRING")


def test_get_async_shares_one_lookup_per_key_and_a_caller_giving_up_leaves_it_to_the_others(tmp_path: Path):
    """A keyring that hangs held a new thread for every call that gave up on it."""
    import threading

    release, calls = threading.Event(), []

    class Hanging(SecretStore):
        def get(self, key: str) -> str | None:
            calls.append(key)
            release.wait(10)
            return f"value of {key}"

    store = Hanging(tmp_path / "secrets.toml", env={})

    async def main() -> tuple[str | None, str | None]:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.05):
                await store.get_async("K")  # gives up; the lookup goes on
        waiting = asyncio.ensure_future(store.get_async("K"))
        other = asyncio.ensure_future(store.get_async("OTHER"))
        await asyncio.sleep(0.05)
        release.set()
        return await waiting, await other

    assert asyncio.run(main()) == ("value of K", "value of OTHER")
    assert calls == ["K", "OTHER"]  # the second K waited on the first lookup
    assert store._looking == {}


def test_a_hung_keyring_holds_no_secret_thread_and_later_secrets_go_on(xdg: Path, monkeypatch: pytest.MonkeyPatch):
    """Each key looked up in a keyring that hangs held one of the store's threads until it answered:
    as many keys as threads, and every later secret (one in secrets.toml too) waited behind them for good."""
    monkeypatch.setattr(secrets_mod, "KEYRING_SECONDS", 0.2, raising=False)
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", blocking_keyring.BACKEND)
    blocking_keyring.release.clear()
    blocking_keyring.asked.clear()
    path = xdg / "conf" / "secrets.toml"
    path.parent.mkdir()
    path.write_text('IN_FILE = "from-file"\n')
    path.chmod(0o600)
    store = SecretStore(path, env={"IN_ENV": "from-env"})
    hung = [f"KEY_{i}" for i in range(secrets_mod.THREADS)]

    async def main() -> tuple[list[object], str | None, str | None]:
        async with asyncio.timeout(30):  # a safety net: these waited for good
            looked = await asyncio.gather(*(store.get_async(k) for k in hung), return_exceptions=True)
            return looked, await store.get_async("IN_FILE"), await store.get_async("IN_ENV")

    try:
        looked, in_file, in_env = asyncio.run(main())
        assert (in_file, in_env) == ("from-file", "from-env")
        for key, refused in zip(hung, looked):
            assert isinstance(refused, errors.Unavailable) and refused.message.startswith(
                f"the keyring {blocking_keyring.BACKEND} could not read {key} (no answer within 0.2 s): unlock it"
            ), refused
        with pytest.raises(errors.Unavailable, match=r"could not store NEW \(an earlier call has had no answer"):
            store.set("NEW", "v")  # refused at once: no thread more for the hung keyring, and nothing changed
        assert sorted(blocking_keyring.asked) == sorted(f"read {key}" for key in hung)
        assert parse_file(path, path.read_text()) == ({"IN_FILE": "from-file"}, [])
    finally:
        blocking_keyring.release.set()


def test_a_set_the_keyring_never_answers_fails_and_keeps_the_name_listed(xdg: Path, monkeypatch: pytest.MonkeyPatch):
    """It held secrets.toml's lock until the keyring answered: `scvctl secrets set` hung without a word,
    and so did every other set and delete. Listed, because the keyring may store it yet."""
    monkeypatch.setattr(secrets_mod, "KEYRING_SECONDS", 0.2, raising=False)
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", blocking_keyring.BACKEND)
    blocking_keyring.release.clear()
    path = xdg / "conf" / "secrets.toml"
    try:
        for store in (SecretStore(path, env={}), SecretStore(path, env={})):  # as scvctl, then scvd
            with pytest.raises(errors.Unavailable, match=r"could not store API_TOKEN \(no answer within 0.2 s\)"):
                store.set("API_TOKEN", "s3cr3t")
        assert parse_file(path, path.read_text()) == ({}, ["API_TOKEN"])
    finally:
        blocking_keyring.release.set()
