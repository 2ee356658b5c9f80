"""`agents.import codex`: what is copied, what never is, and that no secret leaks."""

from __future__ import annotations

import json
import logging
import os
import stat
from pathlib import Path

import pytest

from scvd import paths as paths_mod
from scvd.adapters import service
from scvd.chat.provider import codex_settings
from scvd.errors import InternalError, InvalidRequest, ProviderFailure

API_KEY = "sk-proj-SECRETSECRETSECRET123"
REFRESH = "rt-REFRESHSECRET456"
BEARER = "bearer-SECRETBEARER789"
RELAY_CONFIG = f"""
model = "gpt-5.1-codex"
model_provider = "relay"
model_reasoning_effort = "high"
sandbox_mode = "workspace-write"
approval_policy = "never"

[model_providers.relay]
name = "relay"
base_url = "https://relay.example/v1"
wire_api = "responses"
experimental_bearer_token = "{BEARER}"

[model_providers.envy]
name = "envy"
base_url = "https://other.example/v1"
env_key = "OPENAI_API_KEY"

[projects."/home/me/src"]
trust_level = "trusted"
"""
CHATGPT_AUTH = {"OPENAI_API_KEY": None, "tokens": {"id_token": "x.y.z", "access_token": "a.b.c",
                                                   "refresh_token": REFRESH, "account_id": "acc"},
                "last_refresh": "2025-01-01T00:00:00Z"}


@pytest.fixture
def paths(tmp_path: Path) -> paths_mod.Paths:
    p = paths_mod.resolve({"SCV_HOME": str(tmp_path / "scv")})
    paths_mod.prepare(p)
    return p


@pytest.fixture
def source(tmp_path: Path) -> Path:
    src = tmp_path / "my-codex"
    src.mkdir()
    return src


def run_import(paths: paths_mod.Paths, source: Path | str | None, env: dict | None = None) -> dict:
    return service.import_setup("codex", None if source is None else str(source), paths=paths, env=env or {})


def dest(paths: paths_mod.Paths) -> Path:
    return paths.adapters_dir / "codex"


def test_relay_config_and_api_key_copied(paths, source, caplog) -> None:
    (source / "config.toml").write_text(RELAY_CONFIG)
    (source / "auth.json").write_text(json.dumps({"OPENAI_API_KEY": API_KEY}))
    with caplog.at_level(logging.DEBUG):
        out = run_import(paths, source)
    assert out["copied"] == ["config.toml", "auth.json"]
    assert out["report"]["model"] == "gpt-5.1-codex"
    assert out["report"]["model_provider"] == "relay"
    assert out["report"]["sandbox_mode"] == "workspace-write"
    assert out["report"]["approval_policy"] == "never"
    assert out["report"]["model_reasoning_effort"] == "high"
    assert out["report"]["auth"] == "api key"
    assert out["report"]["bearer_token"] == "present (not shown)"
    assert (dest(paths) / "config.toml").read_text() == RELAY_CONFIG
    assert json.loads((dest(paths) / "auth.json").read_text()) == {"OPENAI_API_KEY": API_KEY}
    for name in ("config.toml", "auth.json"):
        assert stat.S_IMODE((dest(paths) / name).stat().st_mode) == 0o600
    assert stat.S_IMODE(dest(paths).stat().st_mode) == 0o700
    assert not [p for p in dest(paths).iterdir() if p.name.endswith(".tmp")]
    shown = json.dumps(out) + caplog.text
    for secret in (API_KEY, BEARER):
        assert secret not in shown


def test_env_key_provider_flagged(paths, source) -> None:
    (source / "config.toml").write_text(RELAY_CONFIG)
    out = run_import(paths, source)
    flagged = [w for w in out["warnings"] if "env_key" in w]
    assert len(flagged) == 1 and "'envy'" in flagged[0] and "OPENAI_API_KEY" in flagged[0]
    assert "delegated agents get OPENAI_API_KEY only when adapters.codex.pass_env lists it" in flagged[0]


def test_chatgpt_signin_never_copied(paths, source, caplog) -> None:
    (source / "config.toml").write_text('model = "gpt-5"\n')
    (source / "auth.json").write_text(json.dumps(CHATGPT_AUTH))
    with caplog.at_level(logging.DEBUG):
        out = run_import(paths, source)
    assert out["copied"] == ["config.toml"]
    assert out["report"]["auth"] == "not copied (ChatGPT sign-in)"
    assert any("scvctl agents login codex" in w for w in out["warnings"])
    assert not (dest(paths) / "auth.json").exists()
    assert REFRESH not in json.dumps(out) + caplog.text


def test_chatgpt_with_an_api_key_beside_it_still_not_copied(paths, source) -> None:
    (source / "auth.json").write_text(json.dumps({**CHATGPT_AUTH, "OPENAI_API_KEY": API_KEY}))
    with pytest.raises(InvalidRequest, match="ChatGPT sign-in") as info:
        run_import(paths, source)
    assert API_KEY not in info.value.message
    assert not (dest(paths) / "auth.json").exists()


@pytest.mark.parametrize("bad_file,content", [
    ("config.toml", f'model = "gpt-5"\nbroken = [\nkey = "{API_KEY}"\n'),
    ("config.toml", b"\xff\xfe not utf-8"),
    ("auth.json", f'{{"OPENAI_API_KEY": "{API_KEY}",'),
    ("auth.json", json.dumps([API_KEY])),
])
def test_invalid_file_writes_nothing(paths, source, caplog, bad_file, content) -> None:
    (source / "config.toml").write_text('model = "gpt-5"\n')
    (source / "auth.json").write_text(json.dumps({"OPENAI_API_KEY": API_KEY}))
    target = source / bad_file
    target.write_bytes(content) if isinstance(content, bytes) else target.write_text(content)
    with caplog.at_level(logging.DEBUG), pytest.raises(InvalidRequest, match="nothing was written") as info:
        run_import(paths, source)
    assert not (dest(paths) / "config.toml").exists() and not (dest(paths) / "auth.json").exists()
    assert API_KEY not in info.value.message + caplog.text
    assert info.value.__cause__ is None  # the decoder's error (it holds the text) is not chained
    assert info.value.__context__ is None or info.value.__suppress_context__


def test_a_provider_that_is_no_table_is_refused_as_the_chat_refuses_it(paths, source) -> None:
    """`model_providers.relay = "x"` was imported (non-tables were dropped unseen), then the chat's
    first turn failed with an AttributeError."""
    (source / "config.toml").write_text('model_provider = "relay"\nmodel_providers.relay = "x"\n')
    with pytest.raises(InvalidRequest) as info:
        run_import(paths, source)
    assert info.value.message == (f"{source / 'config.toml'}: provider 'relay': its model_providers entry is not a "
                                  "table: write it as [model_providers.NAME] with its keys; fix it in your Codex "
                                  "config.toml and import again; nothing was written")
    assert not (dest(paths) / "config.toml").exists()


def test_codexs_own_local_provider_needs_no_sign_in(paths, source) -> None:
    """`agents status` said a setup for codex's ollama (no table, no key) was not signed in."""
    (source / "config.toml").write_text('model_provider = "ollama"\n')
    out = run_import(paths, source)
    assert (out["report"]["model_provider"], out["report"]["wire_api"]) == ("ollama", "responses")
    assert out["warnings"] == []
    from scvd.adapters import signin, spec

    assert signin.own_key(spec.get("codex"), dest(paths)) == "config.toml's provider 'ollama' uses no key"


def test_providers_the_config_does_not_use_now_are_checked_and_only_warned_of(paths, source) -> None:
    """Only the active provider was checked: a model_provider picking another later (an agent's
    `-c model_provider=`) failed on a setup the import had taken without a word. What codex stops at
    start on in any provider (a wire_api, an entry that is no table) is refused, not warned of."""
    (source / "config.toml").write_text(
        RELAY_CONFIG + '[model_providers.team]\nbase_url = "https://team.example/v1"\n'
        'http_headers = { "X Team" = "blue" }\n[model_providers.gone]\nbase_url = "team.example/v1"\n')
    out = run_import(paths, source)
    assert out["copied"] == ["config.toml"]
    unused, fix = "which this config does not use now", "fix it in your Codex config.toml and import again"
    assert [w for w in out["warnings"] if unused in w] == [
        f"provider 'team', {unused}: http_headers 'X Team' is not an HTTP header name (letters, digits and "
        f"!#$%&'*+-.^_`|~, no space or colon): codex leaves it out of its requests, and a chat turn with provider "
        f"codex fails on it; {fix}",
        f"provider 'gone', {unused}: base_url must start with http:// or https://, e.g. http://127.0.0.1:8080/v1; "
        f"a model_provider that picks it fails: {fix}"]


EMPTY_PROVIDER = {
    "top level": ('model_provider = ""\n', "model_provider is empty"),
    "no text": ('model_provider = ["relay"]\n', "model_provider is an array, not a provider's name"),
}


@pytest.mark.parametrize("config, said", EMPTY_PROVIDER.values(), ids=EMPTY_PROVIDER)
def test_a_model_provider_that_names_no_provider_is_refused_as_the_chat_refuses_it(paths, source, config, said):
    """`model_provider = ""` was imported as `openai` while the chat looked up a provider "" (and
    `["relay"]` failed its turn with a TypeError); codex itself stops at start on both."""
    (source / "config.toml").write_text(config)
    with pytest.raises(InvalidRequest) as info:
        run_import(paths, source)
    assert info.value.message.startswith(f"{source / 'config.toml'}: {said}")
    assert info.value.message.endswith("fix it in your Codex config.toml and import again; nothing was written")
    assert not (dest(paths) / "config.toml").exists()


@pytest.mark.timeout(10)
@pytest.mark.parametrize("odd", ["fifo", "directory"])
def test_a_fifo_or_directory_in_a_files_place_is_refused_at_once(paths, source, odd) -> None:
    # a FIFO opened for reading waits for a writer: the import (a daemon thread) would hang for good
    (source / "auth.json").write_text(json.dumps({"OPENAI_API_KEY": API_KEY}))
    os.mkfifo(source / "config.toml") if odd == "fifo" else (source / "config.toml").mkdir()
    kind = "a FIFO" if odd == "fifo" else "a directory"
    with pytest.raises(InvalidRequest, match=f"config.toml: it is {kind}, not a regular file; nothing was written"):
        run_import(paths, source)
    assert not (dest(paths) / "auth.json").exists()


@pytest.mark.timeout(10)
@pytest.mark.parametrize("where", ["auth.json", "config.toml"])
def test_a_fifo_a_codex_run_left_in_its_home_does_not_hang_the_import(paths, source, where) -> None:
    # the home's own files were read plainly: an agent run (its home is writable) could hang every import
    service.ensure_home(paths, "codex")
    os.mkfifo(dest(paths) / where)
    if where == "auth.json":
        (source / "config.toml").write_text('model = "gpt-5"\n')
    else:
        (source / "auth.json").write_text(json.dumps({"OPENAI_API_KEY": API_KEY}))
    run_import(paths, source)
    assert stat.S_ISREG((dest(paths) / ("config.toml" if where == "auth.json" else "auth.json")).stat().st_mode)


def test_reimport_replaces_config_and_keeps_existing_signin(paths, source) -> None:
    (source / "config.toml").write_text('model = "one"\n')
    (source / "auth.json").write_text(json.dumps({"OPENAI_API_KEY": API_KEY}))
    run_import(paths, source)
    (source / "config.toml").write_text('model = "two"\n')
    (source / "auth.json").unlink()
    out = run_import(paths, source)
    assert out["copied"] == ["config.toml"]
    assert (dest(paths) / "config.toml").read_text() == 'model = "two"\n'
    assert (dest(paths) / "auth.json").exists()
    assert any("already in scvd's codex home was kept" in w for w in out["warnings"])


def openai_then_relay(source: Path, tmp_path: Path) -> Path:
    """`source` set up with OpenAI and its key; returns a second setup for the relay, with its key."""
    (source / "config.toml").write_text('model = "gpt-5"\n')
    (source / "auth.json").write_text(json.dumps({"OPENAI_API_KEY": "sk-OLD-openai"}))
    relay = tmp_path / "relay-codex"
    relay.mkdir()
    (relay / "config.toml").write_text(RELAY_CONFIG)
    (relay / "auth.json").write_text(json.dumps({"OPENAI_API_KEY": API_KEY}))
    return relay


FULL = OSError(28, "No space left on device")


def fail_replace(monkeypatch, when, error: OSError) -> None:
    """os.replace(src, dst) raises `error` when `when(src, Path(dst))`: a full disk, a refused file."""
    real = os.replace

    def replace(src, dst):
        if when(str(src), Path(dst)):
            raise error
        return real(src, dst)

    monkeypatch.setattr(os, "replace", replace)


def test_a_failed_write_leaves_the_old_setup_whole(paths, source, tmp_path, monkeypatch) -> None:
    """The disk fills between the two files: the old config and key stay, never the new config with
    the old key (which would go to the new provider's base_url)."""
    relay = openai_then_relay(source, tmp_path)
    run_import(paths, source)
    fail_replace(monkeypatch, lambda src, dst: dst.name == "auth.json" and src.endswith(".tmp"), FULL)
    with pytest.raises(InternalError, match="No space left on device.*left as it was"):
        run_import(paths, relay)
    monkeypatch.undo()
    assert (dest(paths) / "config.toml").read_text() == 'model = "gpt-5"\n'
    assert "sk-OLD-openai" in (dest(paths) / "auth.json").read_text()
    assert not [p for p in dest(paths).iterdir() if p.name.endswith((".tmp", ".old"))]
    run_import(paths, relay)  # with room again it goes through
    assert API_KEY in (dest(paths) / "auth.json").read_text()


def test_an_import_that_committed_but_cannot_tidy_up_stands_and_the_next_one_tidies(
        paths, source, tmp_path, monkeypatch, caplog) -> None:
    """Only removing the old files' copies fails, after the new files are in: the import went through
    (not "left as it was"), and the next import removes those copies."""
    relay = openai_then_relay(source, tmp_path)
    run_import(paths, source)
    real_unlink = os.unlink

    def refused(path, *args, **kwargs):
        if str(path).endswith(".old") and os.path.lexists(path):
            raise PermissionError(13, "Permission denied", str(path))
        return real_unlink(path, *args, **kwargs)

    monkeypatch.setattr(os, "unlink", refused)
    with caplog.at_level(logging.WARNING, logger="scvd.adapters"):
        out = run_import(paths, relay)
    monkeypatch.undo()
    assert out["copied"] == ["config.toml", "auth.json"] and API_KEY in (dest(paths) / "auth.json").read_text()
    assert "old files' copies are left (Permission denied)" in caplog.text
    run_import(paths, relay)
    assert not [p for p in dest(paths).iterdir() if p.name.endswith(".old") or p.name.startswith(".scvd-import")]


def test_an_import_that_cannot_put_the_old_files_back_says_the_next_user_does(
        paths, source, tmp_path, monkeypatch) -> None:
    """The write fails and so does undoing it: the error says the old files come back with the
    home's next user, and they do."""
    relay = openai_then_relay(source, tmp_path)
    run_import(paths, source)
    fail_replace(monkeypatch, lambda src, dst: dst.name == "auth.json" and src.endswith((".tmp", ".old")), FULL)
    with pytest.raises(InternalError, match="putting its old files back failed too.*whoever uses the home next"):
        run_import(paths, relay)
    monkeypatch.undo()
    settings = codex_settings(dest(paths), env={})  # a chat turn: the next user
    assert "sk-OLD-openai" in settings.api_key and "relay.example" not in settings.base_url


def test_an_import_that_cannot_settle_a_killed_one_says_so(paths, source, tmp_path, monkeypatch) -> None:
    """An import killed midway left its journal and putting its old files back fails: the error
    names that step, not this import's write."""
    (source / "config.toml").write_text('model = "gpt-5"\n')
    run_import(paths, source)
    home = dest(paths)
    os.link(home / "config.toml", home / ".config.toml.old")
    (home / ".scvd-import.undo").write_text(json.dumps({"config.toml": True}))
    fail_replace(monkeypatch, lambda src, dst: src.endswith(".old"), PermissionError(13, "Permission denied"))
    with pytest.raises(InternalError, match="cannot put back what an import killed midway left.*Permission denied"):
        run_import(paths, source)


def test_a_new_provider_without_auth_json_removes_the_old_key(paths, source, tmp_path) -> None:
    relay = openai_then_relay(source, tmp_path)
    run_import(paths, source)
    (relay / "auth.json").unlink()
    (relay / "config.toml").write_text(RELAY_CONFIG.replace(f'experimental_bearer_token = "{BEARER}"', ""))
    out = run_import(paths, relay)
    assert out["copied"] == ["config.toml"] and not (dest(paths) / "auth.json").exists()
    removed = [w for w in out["warnings"] if "was removed" in w]
    assert len(removed) == 1 and "https://api.openai.com/v1" in removed[0]
    assert "provider 'relay' (https://relay.example/v1)" in removed[0]
    # chat sends no stale key either: a provider naming no key gets none, as in codex (a local server)
    settings = codex_settings(dest(paths), env={})
    assert (settings.api_key, settings.key_source) == ("unused", "") and BEARER not in repr(settings)


def test_default_source_is_codex_home_then_dot_codex(paths, source, tmp_path) -> None:
    (source / "config.toml").write_text('model = "from-codex-home"\n')
    run_import(paths, None, env={"CODEX_HOME": str(source), "HOME": "/nonexistent"})
    assert "from-codex-home" in (dest(paths) / "config.toml").read_text()
    user = tmp_path / "user"
    (user / ".codex").mkdir(parents=True)
    (user / ".codex" / "config.toml").write_text('model = "from-dot-codex"\n')
    run_import(paths, None, env={"HOME": str(user)})
    assert "from-dot-codex" in (dest(paths) / "config.toml").read_text()


@pytest.mark.parametrize("where", ["relative", "missing", "empty", "itself"])
def test_bad_sources_refused(paths, source, tmp_path, where) -> None:
    arg = {"relative": "my-codex", "missing": str(tmp_path / "nope"), "empty": str(source),
           "itself": str(dest(paths))}[where]
    with pytest.raises(InvalidRequest):
        run_import(paths, arg)


def test_only_codex_imports(paths, source) -> None:
    with pytest.raises(InvalidRequest, match="scvctl agents login claude"):
        service.import_setup("claude", str(source), paths=paths, env={})
    with pytest.raises(InvalidRequest, match="no agent"):
        service.import_setup("gemini", str(source), paths=paths, env={})


def test_files_are_read_through_symlinks_but_written_plain(paths, source, tmp_path) -> None:
    real = tmp_path / "dotfiles" / "codex.toml"
    real.parent.mkdir()
    real.write_text('model = "linked"\n')
    (source / "config.toml").symlink_to(real)
    run_import(paths, source)
    copied = dest(paths) / "config.toml"
    assert not copied.is_symlink() and copied.read_text() == 'model = "linked"\n'
    assert os.stat(real).st_mode & 0o777 != 0 and real.read_text() == 'model = "linked"\n'


PROFILE_RELAY = """
model = "gpt-5"
profile = "work"
[profiles.work]
model = "relay-model"
model_provider = "relay"
[model_providers.relay]
name = "relay"
base_url = "https://relay.example/v1"
requires_openai_auth = true
"""


def test_a_key_an_older_scvd_imported_beside_a_profile_is_not_kept_for_openai(paths, source) -> None:
    """An older scvd imported `profile = "work"`, whose provider codex ran then: the relay's key beside it
    must not stay for an OpenAI config now that the profile line is read by no one (the top level says openai)."""
    service.ensure_home(paths, "codex")
    (dest(paths) / "config.toml").write_text(PROFILE_RELAY)
    (dest(paths) / "auth.json").write_text(json.dumps({"OPENAI_API_KEY": API_KEY}))
    (source / "config.toml").write_text('model = "gpt-5"\n')
    out = run_import(paths, source)
    assert not (dest(paths) / "auth.json").exists()
    said = ("the API key in the auth.json already in scvd's codex home was for an endpoint scvd cannot tell; the "
            "imported config sends requests to provider 'openai'")
    assert any(w.startswith(said) for w in out["warnings"]), out["warnings"]


def test_a_new_key_without_a_config_removes_an_old_config_that_sends_it_elsewhere(paths, source, tmp_path) -> None:
    (source / "config.toml").write_text(RELAY_CONFIG)
    run_import(paths, source)
    bare = tmp_path / "key-only"
    bare.mkdir()
    (bare / "auth.json").write_text(json.dumps({"OPENAI_API_KEY": API_KEY}))
    out = run_import(paths, bare)
    assert out["copied"] == ["auth.json"] and not (dest(paths) / "config.toml").exists()
    removed = [w for w in out["warnings"] if "config.toml was removed" in w]
    assert len(removed) == 1 and "provider 'relay' (https://relay.example/v1)" in removed[0], out["warnings"]
    (bare / "auth.json").write_text(json.dumps({"OPENAI_API_KEY": "sk-second"}))
    (dest(paths) / "config.toml").write_text('model = "gpt-5"\n')  # OpenAI's own: kept, and said so
    out = run_import(paths, bare)
    assert (dest(paths) / "config.toml").exists()
    assert "the config.toml already in scvd's codex home was kept" in out["warnings"]


def test_a_new_config_with_its_own_bearer_token_is_not_told_to_add_one(paths, source, tmp_path) -> None:
    relay = openai_then_relay(source, tmp_path)
    run_import(paths, source)
    (relay / "auth.json").unlink()  # RELAY_CONFIG's relay has experimental_bearer_token
    out = run_import(paths, relay)
    removed = [w for w in out["warnings"] if "was removed" in w]
    assert len(removed) == 1 and removed[0].endswith(
        "the imported config brings its own key (experimental_bearer_token)"), removed
    assert BEARER not in json.dumps(out)


def test_what_an_import_that_died_left_is_swept(paths, source) -> None:
    """A SIGKILL or power loss after staging left `.auth.json.<random>.tmp`, a copy of a key: the
    next import removes it (and nothing else of the home)."""
    (source / "config.toml").write_text('model = "gpt-5"\n')
    (source / "auth.json").write_text(json.dumps({"OPENAI_API_KEY": API_KEY}))
    run_import(paths, source)
    left = dest(paths) / ".auth.json.k3x9q1.tmp"
    left.write_text(json.dumps({"OPENAI_API_KEY": "sk-LEFT-BEHIND"}))
    codex_own = dest(paths) / "sessions.tmp"  # a name of codex's own, not one an import stages
    codex_own.write_text("kept")
    run_import(paths, source)
    assert not left.exists()
    assert codex_own.read_text() == "kept"


def test_imports_take_their_turn(paths, source, tmp_path) -> None:
    """Two imports at once (the daemon's and another, or two scvctls) would mix their files: the
    second waits until the first is done."""
    import fcntl
    import threading

    relay = openai_then_relay(source, tmp_path)
    run_import(paths, source)
    held = os.open(dest(paths), os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(held, fcntl.LOCK_EX)  # an import in progress elsewhere
    done: list[dict] = []
    second = threading.Thread(target=lambda: done.append(run_import(paths, relay)))
    try:
        second.start()
        second.join(0.5)
        assert not done and "sk-OLD-openai" in (dest(paths) / "auth.json").read_text()
    finally:
        os.close(held)
    second.join(30)
    assert done and API_KEY in (dest(paths) / "auth.json").read_text()


def test_an_import_held_up_for_good_is_refused_not_waited_on(paths, source, tmp_path, monkeypatch) -> None:
    """The other import was stopped with Ctrl-Z: the next one says so after a while instead of
    holding its worker thread (and its client) for good."""
    import fcntl

    from scvd.adapters import import_files

    relay = openai_then_relay(source, tmp_path)
    run_import(paths, source)
    monkeypatch.setattr(import_files, "LOCK_WAIT_SECONDS", 0.2)
    held = os.open(dest(paths), os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(held, fcntl.LOCK_EX)
    try:
        with pytest.raises(InvalidRequest, match=r"has held scvd's codex home .* for 0.2 s.*then import again$"):
            run_import(paths, relay)
        with pytest.raises(ProviderFailure, match=r"has held scvd's codex home .* for 0.2 s.*then retry$"):
            codex_settings(dest(paths), env={})  # a chat turn waits there too: it retries, imports nothing
    finally:
        os.close(held)
    assert "sk-OLD-openai" in (dest(paths) / "auth.json").read_text()


def test_a_home_that_cannot_be_locked_says_so_not_that_an_import_was_killed(paths, source, monkeypatch) -> None:
    """A file system without flock (ENOLCK): a chat turn and an agent run were told an import killed
    midway could not be put back, with none killed."""
    import errno
    import fcntl

    from scvd.adapters import homes
    from scvd.errors import Failed

    (source / "config.toml").write_text('model = "gpt-5"\n')
    run_import(paths, source)

    def no_locks(fd, how):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    with pytest.raises(ProviderFailure, match=r"^cannot lock or open scvd's codex home .*\(No locks available\)"):
        codex_settings(dest(paths), env={})
    with pytest.raises(Failed, match=r"^cannot lock or open scvd's codex home .*\(No locks available\)"):
        homes.ensure_home(paths, "codex")
