"""Script tools on default paths (no SCV_HOME): seed 003's config dir and the data dir, a real daemon.

Seed 003 keeps a script tool in `~/.config/<app>/tools/script/<name>/`; scvd read only the data
dir's `tools/script/`, so a user who followed the seed got no tool and no error.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from harness import wait_until
from scvd import protocol as p

import daemon_forks
from conftest import DaemonProc
from test_script_tool_folder import link_tool, rewrite_is_asked_as_the_tools
from test_script_tools import NO_KEYRING, WORDS, approve, make_tool

pytestmark = pytest.mark.one_loop


def xdg_daemon(make_daemon, tmp_path: Path) -> tuple[DaemonProc, Path, Path]:
    """scvd on XDG folders of its own (no SCV_HOME); its config dir and data dir."""
    env = {"SCV_HOME": "", "XDG_CONFIG_HOME": str(tmp_path / "cfg"), "XDG_DATA_HOME": str(tmp_path / "data"),
           "XDG_STATE_HOME": str(tmp_path / "state"), "SCV_SOCKET": str(tmp_path / "scvd.sock"), **NO_KEYRING}
    config_dir, data_dir = tmp_path / "cfg" / "scv", tmp_path / "data" / "scv"
    return make_daemon(home=config_dir, env=env), config_dir, data_dir


def scvctl(d: DaemonProc, *args: str) -> subprocess.CompletedProcess:
    return daemon_forks.scvctl(list(args), d.env, timeout=60)


def test_a_tool_in_the_config_dir_as_seed_003_puts_it_loads_and_runs(make_daemon, tmp_path, workspace):
    seeds = make_tool(tmp_path / "cfg" / "scv", "words", WORDS)
    make_tool(tmp_path / "data" / "scv", "older", WORDS)  # where scvd read them first: still read
    d, _, _ = xdg_daemon(make_daemon, tmp_path)
    listing = scvctl(d, "tools")
    assert "script_words [process]" in listing.stdout and "script_older [process]" in listing.stdout, listing
    assert scvctl(d, "tools", "--errors").stdout == "no tool failed to load\n"
    with d.client() as c, d.client(name="owner") as owner:
        call_id = c.start_call(c.open_session(workspace), "script_words", {"text": "one two"})
        assert approve(owner, call_id).details["folder"] == str(seeds)
        done = c.wait_call(call_id)
    assert done.ok and done.result["words"] == 2, done


def test_one_name_in_both_dirs_is_a_load_error_naming_both_not_a_pick(make_daemon, tmp_path):
    seeds = make_tool(tmp_path / "cfg" / "scv", "words", WORDS)
    older = make_tool(tmp_path / "data" / "scv", "words", WORDS)
    d, _, _ = xdg_daemon(make_daemon, tmp_path)
    out = scvctl(d, "tools", "--errors")
    assert out.stdout.strip() == (f"script_words: {seeds / 'tool.json'}: rule 'name': the folder words is in both "
                                  f"{seeds} and {older}, so neither is loaded; keep one (remove or rename the "
                                  "other), then reload scvd"), out
    assert "script_words" not in scvctl(d, "tools").stdout
    with d.client() as c:  # the user removes one: the reload loads the other
        (older / "tool.json").unlink()
        (older / "run").unlink()
        older.rmdir()
        d.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: "script_words" in {t.name for t in c.request(p.ToolsList).tools},
                   what="script_words after SIGHUP")
        assert c.request(p.ToolsList).errors == []


def test_a_tool_folder_linked_into_the_config_dir_is_scvds_own_to_a_write(make_daemon, tmp_path, workspace):
    """The forged-run write: a workspace holding the folder a config-dir tool runs from is asked, as
    a loaded tool's folder (before, that tool was never loaded, and nothing guarded its folder)."""
    run = link_tool(tmp_path / "cfg" / "scv", workspace)
    d, _, _ = xdg_daemon(make_daemon, tmp_path)
    with d.client() as c, d.client(name="owner") as owner:
        rewrite_is_asked_as_the_tools(c, owner, c.open_session(workspace), run, workspace)
