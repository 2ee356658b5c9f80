"""read_skill over the socket: discovery at session.open, listing, reading, refusals, a swap after discovery."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness import RawConn, make_wrapped, wait_until  # noqa: F401 (fixture)
from test_lifecycle import hang_point, open_held, reached

from scvd import protocol as p


def make_skill(parent: Path, name: str, description: str = "Does a thing.", body: str = "Step one.\n") -> Path:
    d = parent / name
    d.mkdir(parents=True)
    (d / "SKILL.md").write_text(f"---\nname: {name}\ndescription: {description}\n---\n{body}")
    return d


@pytest.mark.one_loop
def test_tools_list_shows_read_skill(client):
    tools = {t.name: t for t in client.request(p.ToolsList).tools}
    tool = tools["read_skill"]
    assert tool.risk == "read_only" and tool.flags["concurrent"]
    assert tool.input_schema["properties"]["name"]["default"] == ""


@pytest.mark.one_loop
def test_list_read_and_refuse_over_the_socket(daemon, client, workspace: Path, tmp_path: Path):
    make_skill(daemon.home / "skills", "release-checks", "Checks a release.", "Run the suite.\n")
    make_skill(workspace / "scv" / ".agents" / "skills", "feature-flow", "Lands a change.")
    sid = client.open_session(workspace)  # discovery happens here

    listed = client.call(sid, "read_skill", {})
    assert listed.ok, listed.error
    assert listed.result["skills"] == [{"name": "release-checks", "description": "Checks a release."}]
    assert [s["name"] for s in listed.result["project_skills"]] == ["scv:feature-flow"]
    assert "agent_" in listed.result["project_note"]

    done = client.call(sid, "read_skill", {"name": "release-checks"})
    assert done.ok and "Run the suite." in done.result["content"] and not done.result["truncated"]
    project = client.call(sid, "read_skill", {"name": "scv:feature-flow"})
    assert project.ok and project.result["cwd"] == "scv" and "cwd 'scv'" in project.result["note"]

    unknown = client.call(sid, "read_skill", {"name": "nope"})
    assert unknown.error.kind == "invalid_arguments" and "release-checks" in unknown.error.message
    for bad in ({"name": "../x"}, {"name": str(daemon.home / "skills" / "release-checks")}, {"path": "/etc/passwd"}):
        refused = client.call(sid, "read_skill", bad)
        assert not refused.ok and refused.error.kind == "invalid_arguments", bad

    # a skill added after session.open is not in this session's map, but is in a new session's
    make_skill(daemon.home / "skills", "later")
    assert client.call(sid, "read_skill", {"name": "later"}).error.kind == "invalid_arguments"
    assert client.call(client.open_session(workspace), "read_skill", {"name": "later"}).ok


@pytest.mark.one_loop
def test_swap_after_discovery_refused(daemon, client, workspace: Path, tmp_path: Path):
    outside = tmp_path / "outside"
    make_skill(outside, "evil", body="OUTSIDE CONTENT\n")
    skill = make_skill(workspace / ".agents" / "skills", "local")
    sid = client.open_session(workspace)
    name = f"{workspace.name}:local"
    assert client.call(sid, "read_skill", {"name": name}).ok
    skill.rename(skill.parent / ".moved")
    os.symlink(outside / "evil", skill)
    done = client.call(sid, "read_skill", {"name": name})
    assert not done.ok and done.error.kind == "failed"
    assert "OUTSIDE" not in done.error.message and "changed since the session opened" in done.error.message


@pytest.mark.one_loop
def test_limits_come_from_config(make_daemon, tmp_path: Path, workspace: Path):
    home = tmp_path / "limited"
    for n in ("a", "b", "c"):
        make_skill(home / "skills", n, body="x" * 500)
    d = make_daemon("[skills]\nmax_skills = 2\nmax_skill_bytes = 100\n", home=home)
    with d.client(name="pytest") as client:
        sid = client.open_session(workspace)
        listed = client.call(sid, "read_skill", {}).result
        assert [s["name"] for s in listed["skills"]] == ["a", "b"] and "max_skills" in listed["limit_reached"]
        read = client.call(sid, "read_skill", {"name": "a"}).result
        assert read["truncated"] and len(read["content"].encode()) == 100


@pytest.mark.one_loop
def test_a_folder_name_that_is_not_utf8_is_shown_escaped_and_the_listing_answers(daemon, client, workspace):
    """A Latin-1 folder name (an old archive) in the workspace or the skill root: the listing's
    call never completed (its skipped entry could not be encoded), for every session there."""
    os.mkdir(bytes(workspace) + b"/caf\xe9")
    skill = make_skill(daemon.home / "skills", "plain")
    skill.rename(os.fsdecode(bytes(skill.parent) + b"/na\xefve"))  # a valid skill in such a folder
    sid = client.open_session(workspace)
    listed = client.call(sid, "read_skill", {})
    assert listed.ok, listed.error
    assert listed.result["skills"] == [{"name": "plain", "description": "Does a thing."}]
    assert {"dir": f"{workspace.resolve()}/caf\\xe9", "reason": "a project name with ':' or control characters"} \
        in listed.result["skipped"]
    done = client.call(sid, "read_skill", {"name": "plain"})
    assert done.ok and done.result["path"] == f"{(daemon.home / 'skills').resolve()}/na\\xefve/SKILL.md"


@pytest.mark.one_loop
def test_a_workspace_named_in_latin1_lists_names_that_read(daemon, client, tmp_path: Path):
    """A name's bytes that are not UTF-8 cannot cross a frame: the listed name came back as U+FFFD
    and reading it said `no skill named 'caf\ufffd:local'; known: caf\ufffd:local`."""
    real = os.fsdecode(os.fsencode(tmp_path) + b"/caf\xe9")
    make_skill(Path(real) / ".agents" / "skills", "local", body="Step local.\n")
    (tmp_path / "ws").symlink_to(real)  # a frame cannot carry the name itself
    sid = client.open_session(tmp_path / "ws")
    listed = client.call(sid, "read_skill", {})
    assert [s["name"] for s in listed.result["project_skills"]] == ["caf\\xe9:local"]
    done = client.call(sid, "read_skill", {"name": "caf\\xe9:local"})
    assert done.ok and "Step local." in done.result["content"], done.error


@pytest.mark.one_loop
def test_a_child_named_like_the_workspace_shows_its_shadowed_skill(daemon, client, tmp_path: Path):
    """Workspace app/ and child app/app/ both have a `deploy` skill, so both are `app:deploy`: the
    child's was reported only as a skipped directory, with no cwd to delegate it to."""
    ws = tmp_path / "app"
    make_skill(ws / "app" / ".agents" / "skills", "deploy", "Deploys the app package.")
    make_skill(ws / ".agents" / "skills", "deploy", "Deploys everything.")
    sid = client.open_session(ws)
    listed = client.call(sid, "read_skill", {}).result
    assert [(s["name"], s["cwd"]) for s in listed["project_skills"]] == [("app:deploy", ".")]
    assert [(s["name"], s["cwd"]) for s in listed["shadowed"]] == [("app:deploy", "app")]
    assert "is in cwd 'app'" in client.call(sid, "read_skill", {"name": "app:deploy"}).result["note"]
    assert "1 project, 0 skipped, 1 shadowed" in daemon.log()


# --- bounded discovery: a huge tree, a client that hangs up, the threads it runs on ----------------


def junk(parent: Path, count: int) -> None:
    """`count` directories that are no skill (no SKILL.md): each one a skipped-skill warning."""
    for i in range(count):
        (parent / f"junk-{i:04d}").mkdir(parents=True)


def skill_warnings(log: str) -> list[str]:
    return [line for line in log.splitlines() if " WARNING " in line and "scvd.skills" in line]


@pytest.mark.one_loop
def test_a_huge_tree_is_walked_up_to_the_cap_keeping_the_skills_found(make_daemon, tmp_path: Path, workspace: Path):
    """409,600 directories under the skill paths took 45 s per session.open: every one was looked at."""
    home = tmp_path / "capped"
    make_skill(home / "skills", "alpha")
    make_skill(workspace / ".agents" / "skills", "deploy")
    junk(workspace / ".agents" / "skills", 50)
    for child in range(10):  # each child project's skill root: 100 more directories
        junk(workspace / f"proj{child}" / ".agents" / "skills", 100)
    d = make_daemon("[skills]\nmax_walk_entries = 500\n", home=home)
    with d.client(name="pytest") as client:
        listed = client.call(client.open_session(workspace), "read_skill", {}).result
    assert [s["name"] for s in listed["skills"]] == ["alpha"]
    assert [s["name"] for s in listed["project_skills"]] == [f"{workspace.name}:deploy"]
    assert listed["limit_reached"] == ("discovery stopped after reading 500 directory entries "
                                       "(skills.max_walk_entries); skills past them are not mapped")
    warnings = skill_warnings(d.log())
    assert [w for w in warnings if "max_walk_entries" in w] == [
        w for w in warnings if "skills.max_walk_entries (500) reached" in w
        and "the 2 skills found so far are mapped" in w and "raise skills.max_walk_entries" in w]
    assert len([w for w in warnings if "max_walk_entries" in w]) == 1
    assert len(listed["skipped"]) == 20 and "proj4" not in str(listed["skipped"])


@pytest.mark.one_loop
def test_warnings_of_one_discovery_are_capped_and_the_rest_counted(daemon, client, workspace: Path):
    """Each directory that is no skill logged a warning: 409,600 of them wrote 50 MB of log per open."""
    make_skill(daemon.home / "skills", "alpha")
    junk(daemon.home / "skills", 70)
    listed = client.call(client.open_session(workspace), "read_skill", {}).result
    assert [s["name"] for s in listed["skills"]] == ["alpha"] and len(listed["skipped"]) == 20
    warnings = skill_warnings(daemon.log())
    assert len([w for w in warnings if " skipped: no SKILL.md in it" in w]) == 20
    assert [w.split(" WARNING ")[1] for w in warnings if "not logged" in w] == [
        f"scvd.skills: 50 more skill discovery warnings for {workspace.resolve()} were not logged (the first 20 were)"]
    assert "70 skipped" in daemon.log()  # the session's summary line still counts them all


def test_a_walk_stops_when_its_client_hangs_up_and_other_opens_go_on(make_wrapped, tmp_path: Path, workspace: Path):
    """A walk ran to its end for a client long gone: six of them held every other session.open for 516 s."""
    huge = tmp_path / "huge"
    make_skill(huge / ".agents" / "skills", "deploy")
    junk(huge / ".agents" / "skills", 300)
    with hang_point(tmp_path / "hang") as hang:
        d = make_wrapped(env={"HARNESS_HANG_SKILL_LOAD_WHILE": str(hang)})
        with open_held(d, huge, hang, "the walk to look at its first skill directory"):
            with d.client(name="other") as other:  # no skill directory to look at: its walk does not wait
                assert other.open_session(workspace)
        hang.unlink()  # the walk goes on, and finds its client gone
    wait_until(lambda: f"skill discovery for {huge.resolve()} stopped: nobody waits for its session" in d.log(),
               what="the walk to stop")
    log = d.log()
    assert f"skills for {huge.resolve()}" not in log  # it never finished
    with d.client(name="after") as after:
        assert after.request(p.Status).sessions == 0  # no session was made for the client that left


def test_walks_run_on_their_own_threads_not_those_of_every_other_wait(make_wrapped, tmp_path: Path, workspace: Path):
    """The walks ran in asyncio's default pool: as many slow ones as it has threads (cpu count + 4)
    held whatever else waited there, here a read_skill call of a session opened before them."""
    make_skill(tmp_path / "home" / "skills", "alpha", body="Alpha steps.\n")
    hang = tmp_path / "hang"
    d = make_wrapped(home=tmp_path / "home", env={"HARNESS_HANG_SKILL_LOAD_WHILE": str(hang)})
    walks: list[RawConn] = []
    try:
        with d.client(name="pytest") as client:
            sid = client.open_session(workspace)  # before the hang: alpha is mapped
            with hang_point(hang):
                for n in range(min(32, (os.cpu_count() or 1) + 4)):  # the default pool's size
                    walks.append(RawConn(d.socket))
                    walks[-1].hello()
                    walks[-1].send({"type": "session.open", "id": n, "workspace": str(workspace)})
                reached(hang, "the walks to wait")
                done = client.call(sid, "read_skill", {"name": "alpha"})
                assert done.ok and "Alpha steps." in done.result["content"], done.error
            for n, conn in enumerate(walks):  # and each walk ends once the hang is over
                answer = conn.frame()
                assert isinstance(answer, p.SessionOpened) and answer.id == n, answer
    finally:
        for conn in walks:
            conn.close()
