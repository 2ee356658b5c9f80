"""build_argv is pure: these tests only look at the list it returns.

`visible()` replays bwrap's rule (mounts apply in argv order; a later mount
covers earlier ones at and below its path) to say which mount a path ends up on.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from scvd.sandbox import build_argv

WS = Path("/srv/ws")


def argv(**kw):
    base = dict(bwrap="/usr/bin/bwrap", workspace=WS, hide=[], network=False)
    base.update(kw)
    return build_argv(["bash", "-lc", "echo hi"], **base)


def mounts(args: list[str]) -> list[tuple[str, str]]:
    """(option, destination) of each mount, in argv order, up to `--`."""
    out, i = [], 0
    end = args.index("--")
    while i < end:
        op = args[i]
        if op == "--ro-bind" and args[i + 1] == "/dev/null":
            out.append(("mask", args[i + 2]))
            i += 3
        elif op in ("--bind", "--ro-bind", "--ro-bind-try", "--bind-try"):
            out.append((op, args[i + 2]))
            i += 3
        elif op in ("--tmpfs", "--dev", "--proc"):
            out.append((op, args[i + 1]))
            i += 2
        else:
            i += 1
    return out


def ancestors(path: str) -> list[str]:
    parts = path.strip("/").split("/")
    return ["/" + "/".join(parts[:i]) for i in range(1, len(parts))]


def within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def visible(args: list[str], path: str) -> tuple[str, str]:
    """The mount that `path` is on once bwrap has applied every mount."""
    return [m for m in mounts(args) if within(path, m[1])][-1]


def test_base_flags_come_first_and_in_the_documented_order():
    a = argv()
    assert a[:11] == [
        "/usr/bin/bwrap", "--new-session", "--die-with-parent", "--unshare-user",
        "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--unshare-net", "--cap-drop", "ALL",
    ]
    assert mounts(a)[:3] == [("--ro-bind", "/"), ("--dev", "/dev"), ("--proc", "/proc")]


def test_ipc_is_unshared_with_or_without_the_network():
    """Without it a call saw the host's SysV shared memory segments, and could write a 0600 one."""
    assert "--unshare-ipc" in argv(network=False) and "--unshare-ipc" in argv(network=True)


def test_network_is_unshared_unless_asked_for():
    assert "--unshare-net" in argv(network=False)
    assert "--unshare-net" not in argv(network=True)


def test_workspace_is_bound_read_write_and_is_the_working_directory():
    a = argv()
    assert visible(a, "/srv/ws/src/main.py") == ("--bind", "/srv/ws")
    assert a[a.index("--chdir") + 1] == "/srv/ws"
    assert visible(a, "/etc/passwd") == ("--ro-bind", "/")


def test_chdir_can_name_a_directory_inside_the_workspace():
    a = argv(chdir=Path("/srv/ws/sub"))
    assert a[a.index("--chdir") + 1] == "/srv/ws/sub"


def test_inner_argv_follows_a_double_dash_verbatim():
    a = build_argv(["--version", "--bind", "/", "/"], bwrap="bwrap", workspace=WS, hide=[], network=True)
    assert a[a.index("--") + 1:] == ["--version", "--bind", "/", "/"]
    # the inner `--bind` is not a mount
    assert ("--bind", "/") not in mounts(a)


def test_an_approved_call_keeps_only_git_hooks_and_config_read_only():
    a = argv(approved=True, git=[WS / "child/.git"])
    assert visible(a, "/srv/ws/.git/hooks/pre-commit") == ("--ro-bind-try", "/srv/ws/.git/hooks")
    assert visible(a, "/srv/ws/.git/config") == ("--ro-bind-try", "/srv/ws/.git/config")
    assert visible(a, "/srv/ws/.git/HEAD") == ("--bind", "/srv/ws")  # git commit works
    assert visible(a, "/srv/ws/child/.git/config") == ("--bind", "/srv/ws")


def test_git_paths_are_bound_where_their_links_lead_and_not_at_all_when_that_is_outside():
    """bwrap follows a link where it binds: `.git -> ../..` bound the host's root over the sandbox."""
    links = {"/srv/ws/.git": "/", "/srv/ws/.git/hooks": "/srv/ws/.githooks", "/srv/ws/.git/config": "/home/u"}
    resolve = lambda p: links.get(p, p)  # noqa: E731
    unasked, approved = argv(resolve=resolve), argv(resolve=resolve, approved=True)
    assert visible(unasked, "/srv/ws/.git") == visible(approved, "/srv/ws/.git") == ("--bind", "/srv/ws")
    tried = {path for op, path in mounts(unasked) + mounts(approved) if op.endswith("-try")}
    assert not tried & {"/", "/home/u"}  # outside the workspace: read-only already, never bound again
    assert visible(approved, "/srv/ws/.githooks/pre-commit") == ("--ro-bind-try", "/srv/ws/.githooks")
    assert argv(resolve=lambda p: {"/srv/ws/.git": "/srv/ws/meta"}.get(p, p)).count("/srv/ws/meta") == 2


def test_an_unasked_call_gets_the_whole_git_dir_read_only_by_default():
    a = argv()
    for inside in ("/srv/ws/.git", "/srv/ws/.git/HEAD", "/srv/ws/.git/hooks/pre-commit", "/srv/ws/.git/config"):
        assert visible(a, inside) == ("--ro-bind-try", "/srv/ws/.git")
    assert visible(a, "/srv/ws/src/main.py") == ("--bind", "/srv/ws")


def test_a_child_projects_git_is_read_only_and_its_parent_cannot_be_renamed():
    a = argv(git=[WS / "app/.git", WS / "libs/core/.git"])
    assert visible(a, "/srv/ws/app/.git/config") == ("--ro-bind-try", "/srv/ws/app/.git")
    assert visible(a, "/srv/ws/libs/core/.git/hooks/x") == ("--ro-bind-try", "/srv/ws/libs/core/.git")
    # `mv app app2` would carry the mount away and let a planted copy take the old name
    for pinned in ("/srv/ws/app", "/srv/ws/libs", "/srv/ws/libs/core"):
        assert visible(a, pinned) == ("--bind-try", pinned)
    assert visible(a, "/srv/ws/app/src.py") == ("--bind-try", "/srv/ws/app")  # still writable


def test_a_worktree_git_file_and_the_dirs_it_points_to_are_read_only_where_writable():
    main = "/srv/ws/main/.git"
    a = argv(git=[WS / ".git", Path(main + "/worktrees/wt"), Path(main), Path("/elsewhere/.git")])
    assert visible(a, "/srv/ws/.git") == ("--ro-bind-try", "/srv/ws/.git")  # the file itself
    assert visible(a, main + "/worktrees/wt/HEAD") == ("--ro-bind-try", main)  # inside the common dir
    assert ("--ro-bind-try", main + "/worktrees/wt") not in mounts(a)
    assert ("--ro-bind-try", "/elsewhere/.git") not in mounts(a)  # already read-only under /
    assert visible(a, "/elsewhere/.git/config") == ("--ro-bind", "/")


def test_git_paths_that_are_hidden_or_read_only_stay_as_they_are():
    a = argv(hide=[WS / ".scv"], ro_binds=[WS / "tools"], git=[WS / ".scv/r/.git", WS / "tools/r/.git"])
    assert visible(a, "/srv/ws/.scv/r/.git/config") == ("--tmpfs", "/srv/ws/.scv")  # not shown again
    assert visible(a, "/srv/ws/tools/r/.git/config") == ("--ro-bind", "/srv/ws/tools")
    assert ("--bind-try", "/srv/ws/.scv") not in mounts(a)


def test_a_git_path_in_an_agent_home_is_guarded_like_one_in_the_workspace():
    home = Path("/h/scv/adapters/codex")
    a = argv(hide=[Path("/h/scv")], rw_binds=[home], git=[home / "repo/.git"])
    assert visible(a, str(home / "repo/.git/x")) == ("--ro-bind-try", str(home / "repo/.git"))
    assert visible(a, str(home / "repo")) == ("--bind-try", str(home / "repo"))


def test_a_loaded_tools_folder_stays_read_only_even_approved_and_hidden_where_it_was():
    """A script tool's folder is what scvd runs later (a read_only one unasked): no call rewrites it,
    and one inside scvd's hidden folders is not shown to every call."""
    tools = [WS / "mytools/leak", Path("/h/scv/tools/script/words")]
    for a in (argv(keep=tools, hide=[Path("/h/scv")]), argv(keep=tools, hide=[Path("/h/scv")], approved=True)):
        assert visible(a, "/srv/ws/mytools/leak/run") == ("--ro-bind-try", "/srv/ws/mytools/leak")
        assert visible(a, "/srv/ws/mytools") == ("--bind-try", "/srv/ws/mytools")  # `mv mytools x`: EBUSY
        assert visible(a, "/h/scv/tools/script/words/run") == ("--tmpfs", "/h/scv")


def test_a_loaded_tools_folder_that_is_a_repository_or_below_one_stays_read_only():
    """Guarded after the git metadata, the folder was under the repository's writable pins and left so."""
    leak = WS / "mytools/leak"
    for git in ([leak / ".git"], [WS / "mytools/.git"]):
        a = argv(keep=[leak], git=git)
        assert visible(a, "/srv/ws/mytools/leak/run") == ("--ro-bind-try", "/srv/ws/mytools/leak"), git


def test_proc_false_mounts_an_empty_tmpfs_instead():
    a = argv(proc=False)
    assert "--proc" not in a
    assert visible(a, "/proc/1/root") == ("--tmpfs", "/proc")


def test_hidden_dirs_get_a_tmpfs():
    a = argv(hide=[Path("/run/user/1000"), Path("/home/u/.local/state/scv")])
    assert visible(a, "/run/user/1000/scv/scvd.sock") == ("--tmpfs", "/run/user/1000")
    assert visible(a, "/home/u/.local/state/scv/audit.log") == ("--tmpfs", "/home/u/.local/state/scv")


def test_a_hidden_dir_containing_the_workspace_and_an_agent_home_does_not_hide_them():
    home = Path("/home/u/scv")
    a = argv(workspace=home / "ws", hide=[home, home / "run"], rw_binds=[home / "adapters/codex"])
    assert visible(a, "/home/u/scv/ws/file") == ("--bind", "/home/u/scv/ws")
    assert visible(a, "/home/u/scv/adapters/codex/auth.json") == ("--bind", "/home/u/scv/adapters/codex")
    assert visible(a, "/home/u/scv/adapters/claude/x") == ("--tmpfs", "/home/u/scv")
    assert visible(a, "/home/u/scv/run/scvd.sock") == ("--tmpfs", "/home/u/scv")
    assert visible(a, "/home/u/scv/ws/.git/hooks/x") == ("--ro-bind-try", "/home/u/scv/ws/.git")


def test_a_hidden_dir_inside_the_workspace_stays_hidden():
    a = argv(hide=[WS / ".scv"])
    assert visible(a, "/srv/ws/.scv/run/scvd.sock") == ("--tmpfs", "/srv/ws/.scv")
    assert visible(a, "/srv/ws/other") == ("--bind", "/srv/ws")


def test_a_hidden_dir_equal_to_the_workspace_leaves_the_workspace_visible():
    a = argv(hide=[WS])
    assert visible(a, "/srv/ws/x") == ("--bind", "/srv/ws")


def test_read_only_binds_win_over_read_write_at_the_same_path():
    a = argv(rw_binds=[Path("/opt/x")], ro_binds=[Path("/opt/x")])
    assert visible(a, "/opt/x/y") == ("--ro-bind", "/opt/x")


def test_a_nested_hidden_dir_is_not_mounted_twice_unless_a_bind_lies_between():
    a = argv(hide=[Path("/h"), Path("/h/run")])
    assert ("--tmpfs", "/h/run") not in mounts(a)
    b = argv(workspace=Path("/h/ws"), hide=[Path("/h"), Path("/h/ws/.scv")])
    assert ("--tmpfs", "/h/ws/.scv") in mounts(b)
    assert visible(b, "/h/ws/.scv/x") == ("--tmpfs", "/h/ws/.scv")


def test_nothing_above_a_hidden_dir_or_masked_socket_inside_the_workspace_can_be_renamed():
    """`mv sub x; mkdir -p sub/scv` gave the host a planted SCV_HOME (its config.toml starts MCP
    servers unsandboxed), and a socket of the call's own took the masked one's name."""
    a = argv(hide=[WS / "sub/scv"], mask=[WS / "run/dir/scvd.sock"])
    for pinned in ("/srv/ws/sub", "/srv/ws/run", "/srv/ws/run/dir"):
        assert visible(a, pinned) == ("--bind-try", pinned)
    assert visible(a, "/srv/ws/sub/scv/config.toml") == ("--tmpfs", "/srv/ws/sub/scv")
    assert visible(a, "/srv/ws/run/dir/scvd.sock") == ("mask", "/srv/ws/run/dir/scvd.sock")
    assert ("--bind-try", "/srv") not in mounts(a)  # above the workspace: read-only already


def test_a_masked_file_gets_dev_null_over_it():
    a = argv(mask=[Path("/tmp/scvd.sock")])
    assert a[a.index("/tmp/scvd.sock") - 2:a.index("/tmp/scvd.sock") + 1] == ["--ro-bind", "/dev/null", "/tmp/scvd.sock"]
    assert visible(a, "/tmp/other") == ("--ro-bind", "/")


def test_a_masked_file_inside_the_workspace_stays_masked_and_one_under_a_hide_is_dropped():
    a = argv(mask=[WS / "scvd.sock", Path("/h/s.sock")], hide=[Path("/h")])
    assert visible(a, "/srv/ws/scvd.sock") == ("mask", "/srv/ws/scvd.sock")
    assert ("mask", "/h/s.sock") not in mounts(a)


def test_paths_are_normalised_and_duplicates_dropped():
    a = argv(workspace=Path("/srv//ws/"), hide=[Path("/h/"), Path("/h")])
    assert mounts(a).count(("--tmpfs", "/h")) == 1
    assert ("--bind", "/srv/ws") in mounts(a)


def test_relative_paths_are_refused():
    with pytest.raises(ValueError, match="absolute"):
        argv(workspace=Path("ws"))
    with pytest.raises(ValueError, match="absolute"):
        argv(hide=[Path("run")])


def test_build_argv_needs_no_existing_paths():
    a = argv(workspace=Path("/no/such/ws"), hide=[Path("/no/such/run")], rw_binds=[Path("/no/home")])
    assert ("--bind", "/no/such/ws") in mounts(a)


# small trees of paths, so that hides, binds and the workspace overlap often
segment = st.sampled_from(["a", "b", "ws", ".git", "hooks"])
tree_path = st.lists(segment, min_size=1, max_size=4).map(lambda parts: "/" + "/".join(parts))


WRITABLE = ("--bind", "--bind-try")


@settings(max_examples=400, deadline=None)
@given(ws=tree_path, hide=st.lists(tree_path, max_size=4), rw=st.lists(tree_path, max_size=3),
       ro=st.lists(tree_path, max_size=2), mask=st.lists(tree_path, max_size=2),
       approved=st.booleans(), found=st.lists(tree_path, max_size=3))
# found once: a pin above a guarded path, inside another guarded path, left that one writable
@example(ws="/a", hide=[], rw=["/a/.git/.git"], ro=[], mask=[], approved=False, found=["/a", "/a/.git/.git"])
def test_every_bind_stays_visible_and_every_other_hidden_path_stays_hidden(ws, hide, rw, ro, mask,
                                                                          approved, found):
    a = build_argv(["true"], bwrap="bwrap", workspace=Path(ws), hide=[Path(h) for h in hide],
                   network=False, rw_binds=[Path(p) for p in rw], ro_binds=[Path(p) for p in ro],
                   mask=[Path(m) for m in mask], approved=approved, git=[Path(g) for g in found])
    # a mask is a file: nothing lies below it
    assume(not any(p != m and within(p, m) for m in mask for p in [ws, *hide, *rw, *ro, *found]))
    for m in mask:
        assert visible(a, m)[0] in ("mask", "--tmpfs")
    git = {ws + "/.git/hooks", ws + "/.git/config"} if approved else {ws + "/.git", *found}
    covered = git | set(mask)
    if not approved:  # no git path is writable (but a bind given inside it), nor can one be moved
        for g in git:
            op, at = visible(a, g + "/zz")
            assert op not in WRITABLE or (at != g and within(at, g)), (g, op, at)
            if visible(a, g) == ("--ro-bind-try", g):  # guarded: nothing above it inside a bind can move
                for d in ancestors(g):
                    op, at = visible(a, d)
                    assert op not in WRITABLE or at == d, (g, d, op, at)
    for p in set(ro) - covered:
        assert visible(a, p) == ("--ro-bind", p)
    for p in {ws, *rw} - set(ro) - covered:
        assert visible(a, p) == ("--bind", p)
    for h in set(hide) - {ws, *rw, *ro} - covered:
        assert visible(a, h)[0] == "--tmpfs"
    for h in [m for op, m in mounts(a) if op in ("--tmpfs", "mask")]:  # nothing above can move
        for d in ancestors(h):
            op, at = visible(a, d)
            assert op not in WRITABLE or at == d, (h, d, op, at)
    for g in git:
        assert visible(a, g + "/x")[0] in ("--ro-bind-try", "--ro-bind", "--tmpfs", "mask")


@pytest.mark.parametrize(("tmpdir", "made"), [
    ("/tmp/user/1000", True),  # libpam-tmpdir's, in an offline call's private /tmp
    ("/tmp/user/1000/", True),
    ("/tmp", False),  # the tmpfs itself is there
    (str(WS / "tmp"), False),  # the workspace is bound: it is there as it is
    ("/var/cache/tmp", False),  # nothing hides it
    ("relative/tmp", False),
    (None, False),
])
def test_a_tmpdir_that_the_sandbox_empties_is_made(tmpdir, made):
    a = build_argv(["true"], bwrap="bwrap", workspace=WS, hide=[Path("/tmp")], network=False, tmpdir=tmpdir)
    assert (["--dir", "/tmp/user/1000"] == a[a.index("--dir"):a.index("--dir") + 2]) if made else "--dir" not in a
    if made:
        assert a.index("--tmpfs") < a.index("--dir") < a.index("--chdir")  # inside the fresh tmpfs


SCRATCH = Path("/var/tmp")
OFFLINE = [Path("/tmp"), SCRATCH, Path("/run")]


@pytest.mark.parametrize(("hide", "tmpdir", "rw", "private"), [
    (OFFLINE, None, [], False),  # offline: /tmp is a private tmpfs already
    ([], None, [], True),  # online: the host's /tmp is read-only
    ([], str(WS / "tmp"), [], False),  # in the workspace: writable as it is
    ([], "/home/me/tmp", [], True),  # a TMPDIR nothing makes writable
    (OFFLINE, "/home/me/tmp", [], True),  # offline too
    ([], "/agent/home/tmp", [Path("/agent/home")], False),  # in an agent home
    ([], "/var/tmp/me", [], True),  # made in the fresh /var/tmp: TMPDIR stays
])
def test_a_read_only_temp_directory_is_replaced_by_a_private_one(hide, tmpdir, rw, private):
    """mktemp, Node and compilers need a writable TMPDIR (else /tmp); where it would be read-only,
    /var/tmp becomes a private tmpfs, and the child's TMPDIR unless TMPDIR is made inside it."""
    a = build_argv(["true"], bwrap="bwrap", workspace=WS, hide=hide, network=not hide, tmpdir=tmpdir,
                   rw_binds=rw, scratch=SCRATCH)
    setenv = a[a.index("--setenv"):a.index("--setenv") + 3] if "--setenv" in a else None
    if not private:
        assert setenv is None
        assert (("--tmpfs", "/var/tmp") in zip(a, a[1:])) == (SCRATCH in hide)  # only the offline one
        return
    assert ("--tmpfs", "/var/tmp") in zip(a, a[1:])
    if tmpdir == "/var/tmp/me":
        assert setenv is None and ["--dir", "/var/tmp/me"] == a[a.index("--dir"):a.index("--dir") + 2]
    else:
        assert setenv == ["--setenv", "TMPDIR", "/var/tmp"]
    assert a.index("--tmpfs") < a.index("--bind")  # a workspace below /var/tmp would be bound back over it


def test_without_a_scratch_directory_nothing_is_changed():
    a = build_argv(["true"], bwrap="bwrap", workspace=WS, hide=[], network=True)
    assert "--setenv" not in a and "/var/tmp" not in a
