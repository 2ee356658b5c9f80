"""scvd's environment's search paths without the entries a child reads against its working directory."""

from __future__ import annotations

from scvd.search_paths import (FALLBACK_PATH, Dropped, clean, clean_all, expand_home, from_store_problem, notes,
                               relative_bases, set_by, table_notes)


def test_empty_dot_and_relative_entries_leave_path_and_the_absolute_ones_stay_in_order():
    """`PATH=:/usr/bin` had a script tool's `#!/usr/bin/env python3` run the workspace's ./python3."""
    env, dropped = clean({"PATH": ":/usr/local/bin:.:bin:/usr/bin::./tools", "HOME": "/h"})
    assert env == {"PATH": "/usr/local/bin:/usr/bin", "HOME": "/h"}
    assert dropped == [Dropped("PATH", ("", ".", "bin", "", "./tools"), "/usr/local/bin:/usr/bin")]


def test_the_loaders_library_path_is_split_at_semicolons_too():
    """glibc splits LD_LIBRARY_PATH at `;` as well: `/opt/x;.` had bwrap load ./libcap.so.2."""
    assert clean({"LD_LIBRARY_PATH": "/opt/x/lib:"})[0]["LD_LIBRARY_PATH"] == "/opt/x/lib"
    assert clean({"LD_LIBRARY_PATH": "/opt/x;.;/opt/y"})[0]["LD_LIBRARY_PATH"] == "/opt/x:/opt/y"


def test_the_loaders_origin_entries_stay_as_it_reads_them_against_the_programs_folder():
    """ld.so expands `$ORIGIN` (`${ORIGIN}`) at an entry's start to the program's folder: `$ORIGIN/../lib`
    was dropped as relative. `$ORIGINAL`, `$LIB/x`, and `$ORIGIN` on PATH or PYTHONPATH are no such
    token: read against the working directory, they go."""
    given = {"PATH": "/bin", "LD_LIBRARY_PATH": "$ORIGIN/../lib:${ORIGIN}:$ORIGIN;$ORIGINAL/lib:$LIB/x",
             "LD_PRELOAD": "$ORIGIN/libfast.so", "LD_AUDIT": "${ORIGIN}/a.so", "PYTHONPATH": "$ORIGIN/py:/opt/py"}
    env, dropped = clean(given)
    assert env == {**given, "LD_LIBRARY_PATH": "$ORIGIN/../lib:${ORIGIN}:$ORIGIN", "PYTHONPATH": "/opt/py"}
    assert dropped == [Dropped("LD_LIBRARY_PATH", ("$ORIGINAL/lib", "$LIB/x"), "$ORIGIN/../lib:${ORIGIN}:$ORIGIN"),
                       Dropped("PYTHONPATH", ("$ORIGIN/py",), "/opt/py")]


def test_a_preloaded_librarys_bare_name_stays_a_relative_path_goes():
    """A name without a slash is looked up on the library path, not in the working directory."""
    env, dropped = clean({"PATH": "/bin", "LD_PRELOAD": "libfast.so ./evil.so /opt/x/libok.so", "LD_AUDIT": "lib/a.so"})
    assert env["LD_PRELOAD"] == "libfast.so:/opt/x/libok.so" and "LD_AUDIT" not in env
    assert [d.name for d in dropped] == ["LD_PRELOAD", "LD_AUDIT"]


def test_a_variable_left_with_nothing_is_unset_but_path_gets_the_fallback():
    """bash without PATH uses its own default, which ends in `.`: PATH is never left unset."""
    env, dropped = clean({"PATH": ".", "LD_LIBRARY_PATH": ":", "PYTHONPATH": "src"})
    assert env == {"PATH": FALLBACK_PATH}
    assert [(d.name, d.now) for d in dropped] == [("PATH", FALLBACK_PATH), ("LD_LIBRARY_PATH", None),
                                                  ("PYTHONPATH", None)]
    env, dropped = clean({})
    assert env == {"PATH": FALLBACK_PATH} and dropped == [Dropped("PATH", (), FALLBACK_PATH)]


def test_nothing_to_drop_leaves_every_value_as_it_was():
    given = {"PATH": "/usr/bin:/bin", "LD_PRELOAD": "liba.so libb.so", "NODE_PATH": "/opt/node", "OTHER": ":."}
    assert clean(given) == (given, [])


def test_the_log_says_what_was_dropped_what_is_left_and_what_to_do():
    line, = notes(clean({"PATH": ".:/usr/bin"})[1])
    assert line.startswith("dropped '.' from scvd's PATH (it is now '/usr/bin')")
    assert "name that directory by its absolute path" in line
    assert "unset" in notes(clean({"PATH": "/bin", "NODE_PATH": "lib"})[1])[0]
    assert "has no PATH" in notes(clean({})[1])[0]


def test_scvds_own_tilde_entry_is_dropped_with_how_a_unit_names_home():
    """A unit's `Environment=PATH=~/bin:...` is expanded by bash alone (not systemd, execvp, the loader,
    Python): scvd drops it, and says to write %h."""
    line, = notes(clean({"PATH": "~/bin:/usr/bin"})[1])
    assert line.endswith("instead; only bash expands a `~` there, and systemd does not: write %h for your home in a "
                         "unit's Environment= (docs/security.md)")


def test_a_relative_xdg_base_directory_is_unset_an_absolute_or_empty_one_stays():
    """git takes a relative XDG_CONFIG_HOME from its working directory, a session's workspace: the
    `git/config` an unasked call wrote there set a pager git ran. The XDG spec calls one invalid."""
    env = {"XDG_CONFIG_HOME": "rel", "XDG_DATA_HOME": "/h/.local/share", "XDG_STATE_HOME": "",
           "XDG_CACHE_HOME": "./cache", "XDG_RUNTIME_DIR": "run/user/1000"}
    dropped = relative_bases(env)
    assert dropped == [Dropped("XDG_CONFIG_HOME", ("rel",), None), Dropped("XDG_CACHE_HOME", ("./cache",), None),
                       Dropped("XDG_RUNTIME_DIR", ("run/user/1000",), None)]
    assert notes(dropped)[0].startswith("dropped 'rel' from scvd's XDG_CONFIG_HOME (it is now unset): ")


def test_clean_all_unsets_a_relative_xdg_base_as_well():
    """What a stdio MCP server's `env` is cleaned to at each start, as scvd's own is at its start."""
    env, dropped = clean_all({"PATH": "/bin:.", "XDG_CONFIG_HOME": "rel", "XDG_DATA_HOME": "/d"})
    assert env == {"PATH": "/bin", "XDG_DATA_HOME": "/d"}
    assert dropped == [Dropped("PATH", (".",), "/bin"), Dropped("XDG_CONFIG_HOME", ("rel",), None)]


def test_a_configured_table_is_judged_by_the_variables_it_sets_only():
    """A table without PATH gives the server scvd's own (cleaned already): no fallback to warn of; an
    empty PATH in it is bash's working directory, and gets the fallback."""
    assert set_by({"TOKEN": "x", "MODE": "."}, "/home/me") == []
    assert set_by({"LD_LIBRARY_PATH": "lib:/opt/lib"}, "/h") == [Dropped("LD_LIBRARY_PATH", ("lib",), "/opt/lib")]
    assert set_by({"PATH": ""}, "/home/me") == [Dropped("PATH", (), FALLBACK_PATH)]


def test_a_configured_tables_warning_names_its_key_and_the_absolute_path_meant():
    """`LD_LIBRARY_PATH = "lib"` with `cwd = "/srv/fs"` meant /srv/fs/lib: the warning says to write that.
    `$HOME/lib` was told `e.g. '/srv/fs/$HOME/lib'`, and LD_PRELOAD, a list of files, "the directory's"."""
    def note(table: dict[str, str], cwd: str | None = "/srv/fs") -> str:
        line, = table_notes("mcp.servers.fs.env", set_by(table, "/home/me"), cwd)
        return line

    line = note({"LD_LIBRARY_PATH": "./lib:"})
    assert line.startswith("mcp.servers.fs.env.LD_LIBRARY_PATH: dropped './lib', '' (it is now unset): the server ")
    assert line.endswith("write the directory's absolute path instead, e.g. '/srv/fs/lib' (docs/security.md)")
    assert ", e.g." not in note({"PATH": "/bin:bin"}, None)  # its own cwd: no help
    assert note({"NODE_PATH": "$HOME/lib:/opt/n"}).endswith(
        "write the directory's absolute path instead; scvd expands no variable in env, so write out the path that "
        "'$HOME/lib' names (docs/security.md)")
    assert note({"PATH": "~bob/bin:${X}/bin:bin"}).endswith(  # neither meant a path in cwd
        "instead, e.g. '/srv/fs/bin'; scvd expands no variable in env, so write out the path that '${X}/bin' names "
        "(docs/security.md)")
    assert note({"LD_PRELOAD": "lib/libfoo.so"}).endswith(
        "write the file's absolute path instead, e.g. '/srv/fs/lib/libfoo.so' (docs/security.md)")
    assert note({"LD_LIBRARY_PATH": "$LIB/x"}).endswith("e.g. '/srv/fs/$LIB/x' (docs/security.md)")  # the loader's
    assert table_notes("k", set_by({"PATH": ""}, "/h"))[0].startswith(f"k.PATH is empty, which bash reads as its "
                                                                     f"working directory: the server gets "
                                                                     f"PATH={FALLBACK_PATH!r}")


def test_a_configured_tables_leading_tilde_is_scvds_home_as_in_its_cwd_and_warns_of_nothing():
    """`env = {PATH = "~/bin:/usr/bin"}` served a bash-run server (bash expands it), then was dropped with
    `e.g. '/root/srv/~/bin'`: a `~` or `~/` entry is scvd's HOME, as a configured cwd's is."""
    table = {"PATH": "~/bin:/usr/bin", "LD_PRELOAD": "~/lib/a.so libb.so", "XDG_CONFIG_HOME": "~/.config",
             "NODE_PATH": "~", "PYTHONPATH": "~bob/py:$HOME/py", "MODE": "~/x"}
    assert expand_home(table, "/home/me/") == {
        "PATH": "/home/me/bin:/usr/bin", "LD_PRELOAD": "/home/me/lib/a.so:libb.so",
        "XDG_CONFIG_HOME": "/home/me/.config", "NODE_PATH": "/home/me", "PYTHONPATH": "~bob/py:$HOME/py", "MODE": "~/x"}
    assert set_by(table, "/home/me") == [Dropped("PYTHONPATH", ("~bob/py", "$HOME/py"), None)]
    assert set_by({"PATH": "~/bin"}, "rel") == [Dropped("PATH", ("rel/bin",), FALLBACK_PATH)]  # a relative HOME


def test_a_search_path_cannot_come_from_the_secret_store_any_other_name_can():
    assert from_store_problem("NODE_PATH", "the script").startswith("NODE_PATH is a search path, no secret")
    assert from_store_problem("XDG_CONFIG_HOME", "the server") is not None
    assert from_store_problem("GITHUB_TOKEN", "the server") is None
