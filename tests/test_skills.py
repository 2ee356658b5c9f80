"""Skill discovery (scvd/skills.py) and the read_skill tool, called directly on real directories."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest
from fs_support import backend, writer_left_waiting  # noqa: F401  (fixture: the openat2 resolver and the component walk)

from scvd import skills
from scvd.config import Config, SkillsConfig
from scvd.errors import Failed, InvalidArguments
from scvd.paths import Paths, resolve
from scvd.tools import build_registry
from scvd.tools.contract import CallContext, Plan, ToolRisk
from scvd.tools.skill import PROJECT_NOTE, ReadSkillTool

TOOL = ReadSkillTool()


def make_skill(parent: Path, dirname: str, name: str | None = None, description: str = "Does a thing.",
               body: str = "# Steps\n1. Do it.\n") -> Path:
    d = parent / dirname
    d.mkdir(parents=True, exist_ok=True)
    (d / "SKILL.md").write_text(f"---\nname: {name or dirname}\ndescription: {description}\n---\n{body}")
    return d


@dataclass
class Env:
    home: Path
    paths: Paths
    ws: Path
    outside: Path

    @property
    def user_root(self) -> Path:
        return self.paths.skills_dir

    def discover(self, max_skills: int = 64) -> skills.SkillMap:
        return skills.discover(self.ws, self.paths, max_skills, SkillsConfig().max_walk_entries)

    def ctx(self, max_skills: int = 64, max_skill_bytes: int = 64 * 1024) -> CallContext:
        config = Config(skills=SkillsConfig(max_skills=max_skills, max_skill_bytes=max_skill_bytes))
        fd = os.open(self.ws, os.O_RDONLY | os.O_DIRECTORY)
        services = TOOL.session_services(self.ws, config, self.paths)
        return CallContext(call_id="c1", session_id="s1", workspace=self.ws, workspace_fd=fd,
                           config=config, paths=self.paths, services=services)

    def call(self, ctx: CallContext, **raw: Any) -> Any:
        """decode -> plan -> run, as the pipeline does (minus approval)."""
        args = TOOL.decode(raw)
        return asyncio.run(TOOL.run(args, TOOL.plan(args, ctx), ctx))


@pytest.fixture
def env(tmp_path: Path) -> Env:
    home = tmp_path / "home"
    paths = resolve({"SCV_HOME": str(home)})
    paths.skills_dir.mkdir(parents=True)
    ws = tmp_path / "myws"
    ws.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("TOP SECRET\n")
    make_skill(outside, "evil", description="Outside the root.", body="OUTSIDE CONTENT\n")
    return Env(home=home, paths=paths, ws=ws, outside=outside)


# --- front matter ------------------------------------------------------------------


def test_front_matter_simple_pairs_quotes_and_folded_values() -> None:
    text = (
        "\ufeff---\n"
        "# a comment\n"
        "name: release-checks\n"
        "description: >\n"
        "  Checks a release\n"
        "  before tagging.\n"
        "title: 'It''s quoted'\n"
        'other: "say \\"hi\\""\n'
        "allowed-tools:\n"
        "  - Read\n"
        "---\n"
        "name: not-this\n"
    )
    meta = skills.parse_front_matter(text)
    assert meta["name"] == "release-checks"
    assert meta["description"] == "Checks a release before tagging."
    assert meta["title"] == "It's quoted"
    assert meta["other"] == 'say "hi"'
    assert meta["allowed-tools"] == "- Read"


def test_front_matter_lists_at_column_zero_and_trailing_comments() -> None:
    """`- Read` under `allowed-tools:` (YAML's usual list style) dropped the skill as "not 'key: value'",
    and a ` # comment` after a value became part of the description the model reads."""
    text = (
        "---\n"
        "name: review  # the folder's name too\n"
        "description: Reviews C# code, issue#1 style  # shown to the model\n"
        "allowed-tools:\n"
        "- Read\n"
        "- Grep  # read-only\n"
        "-\n"
        "quoted: 'a # b' # after\n"
        'double: "x \\" # y"\n'
        "block: |\n"
        "  # a heading, not a comment\n"
        "  line two\n"
        "---\n"
    )
    meta = skills.parse_front_matter(text)
    assert meta["name"] == "review"
    assert meta["description"] == "Reviews C# code, issue#1 style"
    assert meta["allowed-tools"] == "- Read - Grep -"
    assert meta["quoted"] == "a # b"
    assert meta["double"] == 'x " # y'
    assert meta["block"] == "# a heading, not a comment line two"


@pytest.mark.parametrize("text, reason", [
    ("name: x\ndescription: y\n", "does not start"),
    ("---\nname: x\ndescription: y\n", "not closed"),
    ("---\nname: x\nname: y\n---\n", "repeats"),
    ("---\njust words\n---\n", "not 'key: value'"),
    ("", "does not start"),
])
def test_front_matter_refusals(text: str, reason: str) -> None:
    with pytest.raises(skills.SkillError, match=reason):
        skills.parse_front_matter(text)


@pytest.mark.parametrize("meta, reason", [
    ({"description": "d"}, "no 'name'"),
    ({"name": "x"}, "no 'description'"),
    ({"name": "../x", "description": "d"}, "must be 1-64"),
    ({"name": "a:b", "description": "d"}, "must be 1-64"),
    ({"name": "x" * 65, "description": "d"}, "must be 1-64"),
])
def test_meta_refusals(meta: dict[str, str], reason: str) -> None:
    with pytest.raises(skills.SkillError, match=reason):
        skills.check_meta(meta)


def test_description_made_one_safe_line_and_clipped() -> None:
    name, desc = skills.check_meta({"name": "x", "description": "red \x1b[31m text\u202e  end"})
    assert (name, desc) == ("x", "red [31m text end")
    _, long = skills.check_meta({"name": "x", "description": "y" * 5000})
    assert len(long) == skills.MAX_DESCRIPTION and long.endswith("...")


# --- discovery ---------------------------------------------------------------------


def test_user_skills_map_names_to_canonical_paths(env: Env) -> None:
    a = make_skill(env.user_root, "alpha")
    make_skill(env.user_root, "beta-dir", name="beta")
    found = env.discover()
    assert sorted(found.skills) == ["alpha", "beta"]
    skill = found.skills["alpha"]
    assert skill.file == os.path.realpath(a / "SKILL.md")
    assert skill.root.kind == skills.USER and skill.root.path == os.path.realpath(env.user_root)
    assert found.skills["beta"].dir.endswith("beta-dir")
    assert not found.skipped and not found.limit_reached


def test_invalid_skill_dirs_skipped_with_a_logged_reason(env: Env, caplog: pytest.LogCaptureFixture) -> None:
    make_skill(env.user_root, "good")
    (env.user_root / "no-file").mkdir()
    (env.user_root / "no-front").mkdir()
    (env.user_root / "no-front" / "SKILL.md").write_text("# just markdown\n")
    make_skill(env.user_root, "no-desc", description="")
    (env.user_root / "binary").mkdir()
    (env.user_root / "binary" / "SKILL.md").write_bytes(b"---\nname: binary\ndescription: \xff\xfe\n---\n")
    (env.user_root / "a-fifo").mkdir()
    os.mkfifo(env.user_root / "a-fifo" / "SKILL.md")
    (env.user_root / "README.md").write_text("not a skill dir\n")
    make_skill(env.user_root, ".hidden")
    with caplog.at_level(logging.WARNING, logger="scvd.skills"):
        found = env.discover()
    assert list(found.skills) == ["good"]
    reasons = {Path(d).name: r for d, r in found.skipped}
    assert set(reasons) == {"no-file", "no-front", "no-desc", "binary", "a-fifo"}
    assert "no SKILL.md" in reasons["no-file"]
    assert "does not start" in reasons["no-front"]
    assert "no 'description'" in reasons["no-desc"]
    assert "not UTF-8" in reasons["binary"]
    assert "not a regular file" in reasons["a-fifo"]
    for name, reason in reasons.items():
        assert any(name in r.getMessage() and reason in r.getMessage() for r in caplog.records), name


@pytest.mark.timeout(30)
def test_a_fifo_skill_file_leaves_its_waiting_writer_alone(env: Env, backend: str) -> None:
    """Opening a FIFO lets a writer waiting in open() go on, and closing it right after kills that
    writer with SIGPIPE: neither discovery (at every session.open) nor a read may open one."""
    make_skill(env.user_root, "later")
    fifo = env.user_root / "a-fifo" / "SKILL.md"
    fifo.parent.mkdir()
    os.mkfifo(fifo)
    with writer_left_waiting(fifo):
        found = env.discover()
        assert "not a regular file" in dict(found.skipped)[str(fifo.parent)]
        (env.user_root / "later" / "SKILL.md").unlink()
        os.mkfifo(env.user_root / "later" / "SKILL.md")  # swapped in after discovery
        with pytest.raises(skills.SkillError, match="not a regular file"):
            skills.read(found.skills["later"], 1000)


def test_an_unreadable_skill_file_is_skipped_not_a_failed_session(env: Env) -> None:
    """A SKILL.md whose read fails (EIO: a failing disk, a network mount gone) raised out of
    discovery, so every session.open failed as an internal error while it was there."""
    make_skill(env.user_root, "good")
    bad = make_skill(env.user_root, "bad") / "SKILL.md"
    script = ("import sys; from scvd import skills; from scvd.paths import resolve; "
              "found = skills.discover(sys.argv[1], resolve({'SCV_HOME': sys.argv[2]}), 64, 10_000); "
              "print(list(found.skills), found.skipped)")
    # /proc/<pid>/mem is a regular file whose read at offset 0 fails with EIO
    done = subprocess.run(["bwrap", "--unshare-user", "--bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
                           "--bind", "/proc/self/mem", str(bad), sys.executable, "-c", script, str(env.ws),
                           str(env.home)], capture_output=True, text=True, cwd=Path(skills.__file__).parents[1])
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"['good'] [('{bad.parent}', 'cannot read its SKILL.md: Input/output error')]\n"


def test_a_skill_file_that_fails_to_read_at_call_time_says_so(env: Env) -> None:
    """EIO when read_skill reads a mapped skill ended the call as 'read_skill failed unexpectedly: OSError'."""
    make_skill(env.user_root, "good")
    bad = make_skill(env.user_root, "bad") / "SKILL.md"
    # mapped as discovery found it; its file then fails to read, as /proc/<pid>/mem does at offset 0
    script = textwrap.dedent("""
        import dataclasses, sys
        from scvd import errors, skills
        from scvd.paths import resolve
        from scvd.tools.skill import read_result
        found = skills.discover(sys.argv[1], resolve({'SCV_HOME': sys.argv[2]}), 64, 10_000)
        skill = dataclasses.replace(found.skills['good'], key='bad', file=sys.argv[3])
        try:
            read_result(skill, 1000)
        except errors.Failed as exc:
            print(exc.message, exc.hint, sep="\\n")
        """)
    done = subprocess.run(["bwrap", "--unshare-user", "--bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
                           "--bind", "/proc/self/mem", str(bad), sys.executable, "-c", script, str(env.ws),
                           str(env.home), str(bad)], capture_output=True, text=True, cwd=Path(skills.__file__).parents[1])
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["the file of skill 'bad' could not be read: Input/output error",
                                        f"check the disk or mount that holds {bad}, then call read_skill again"]


def test_max_skills_limits_discovery_user_root_first(env: Env, caplog: pytest.LogCaptureFixture) -> None:
    for n in ("a1", "a2", "a3"):
        make_skill(env.user_root, n)
    make_skill(env.ws / ".agents" / "skills", "p1")
    with caplog.at_level(logging.WARNING, logger="scvd.skills"):
        found = env.discover(max_skills=2)
    assert list(found.skills) == ["a1", "a2"] and found.limit_reached
    assert "max_skills (2) reached" in caplog.text
    assert list(env.discover(max_skills=4).skills) == ["a1", "a2", "a3", "myws:p1"]
    assert not env.discover(max_skills=4).limit_reached


def test_the_limit_is_reached_only_when_a_skill_is_left_out(env: Env, caplog: pytest.LogCaptureFixture) -> None:
    """A folder that is no skill after the last one that fits: the listing said skills were left out."""
    for n in ("a1", "a2"):
        make_skill(env.user_root, n)
    (env.user_root / "notes").mkdir()
    (env.ws / ".agents" / "skills" / "not-one").mkdir(parents=True)
    with caplog.at_level(logging.WARNING, logger="scvd.skills"):
        found = env.discover(max_skills=2)
    assert list(found.skills) == ["a1", "a2"] and not found.limit_reached
    assert "max_skills" not in caplog.text


def test_a_big_root_gives_its_first_skills_in_name_order(env: Env, monkeypatch: pytest.MonkeyPatch,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    """Only the first MAX_ENTRIES entries as the file system listed them were looked at, so which
    skills a big folder gave (and which of two of one name won) changed with the listing order."""
    monkeypatch.setattr(skills, "MAX_ENTRIES", 3)
    for i in (*range(5, 9), 0, 1, 2, 3, 4):  # neither creation order nor its reverse is name order
        make_skill(env.user_root, f"s{i}")
    (env.user_root / "a-file").write_text("")  # a file or a hidden folder takes no place
    make_skill(env.user_root, ".hidden")
    with caplog.at_level(logging.WARNING, logger="scvd.skills"):
        found = env.discover()
    assert list(found.skills) == ["s0", "s1", "s2"]
    assert "more than 3 subdirectories; only the first 3 in name order" in caplog.text


def test_only_the_front_matter_must_be_utf8(env: Env) -> None:
    """A cp1252 byte in the body dropped the skill when it came within the first 16 KiB, not after."""
    for dirname, body in (("near", b"Caf\xe9\n"), ("far", b"x" * 20_000 + b"Caf\xe9\n")):
        (env.user_root / dirname).mkdir(parents=True)
        (env.user_root / dirname / "SKILL.md").write_bytes(
            b"---\nname: " + dirname.encode() + b"\ndescription: Does a thing.\n---\n" + body)
    found = env.discover()
    assert list(found.skills) == ["far", "near"] and not found.skipped
    content, _, _ = skills.read(found.skills["near"], 64 * 1024)
    assert content.endswith("Caf\ufffd\n")


def test_project_skills_named_project_colon_name(env: Env) -> None:
    make_skill(env.ws / ".agents" / "skills", "ws-skill")
    make_skill(env.ws / "scv" / ".claude" / "skills", "feature-flow")
    make_skill(env.ws / "scv" / ".agents" / "skills", "release-checks")
    make_skill(env.ws / "other" / ".agents" / "skills", "feature-flow")  # same name, other project
    make_skill(env.ws / ".hidden" / ".agents" / "skills", "nope")  # hidden child: not a project
    make_skill(env.ws / "scv" / "deeper" / ".agents" / "skills", "nope2")  # grandchild: not a project
    make_skill(env.user_root, "feature-flow")  # a user skill of the same name stays separate
    found = env.discover()
    assert sorted(found.skills) == [
        "feature-flow", "myws:ws-skill", "other:feature-flow", "scv:feature-flow", "scv:release-checks"]
    ws_skill, scv = found.skills["myws:ws-skill"], found.skills["scv:feature-flow"]
    assert (ws_skill.root.kind, ws_skill.root.project, ws_skill.root.cwd) == (skills.PROJECT, "myws", ".")
    assert (scv.root.project, scv.root.cwd) == ("scv", "scv")
    assert scv.file == os.path.realpath(env.ws / "scv" / ".claude" / "skills" / "feature-flow" / "SKILL.md")
    assert not found.skipped


def test_a_name_taken_twice_maps_the_first_and_lists_the_other_as_shadowed(
        env: Env, caplog: pytest.LogCaptureFixture) -> None:
    """A copy in both .agents/skills and .claude/skills, or two folders of one root with the same
    name, was listed among the invalid `skipped` directories; the listing now says which one is
    mapped (.agents/skills first, then name order) and where the other is."""
    claude = make_skill(env.ws / ".claude" / "skills", "deploy", description="Claude's copy.")
    agents = make_skill(env.ws / ".agents" / "skills", "deploy", description="Codex's copy.")
    make_skill(env.user_root, "good")
    make_skill(env.user_root, "zz-dup", name="good", description="Left over.")  # after "good" in name order
    with caplog.at_level(logging.INFO, logger="scvd"):
        ctx = env.ctx()
    assert "0 skipped, 2 shadowed" in caplog.text and "shadowed: its name 'myws:deploy' is taken" in caplog.text
    result = env.call(ctx)
    assert [s["description"] for s in result["project_skills"]] == ["Codex's copy."] and "skipped" not in result
    assert result["shadowed"] == [
        {"name": "good", "description": "Left over.", "dir": os.path.realpath(env.user_root / "zz-dup"),
         "by": os.path.realpath(env.user_root / "good")},
        {"name": "myws:deploy", "description": "Claude's copy.", "dir": os.path.realpath(claude),
         "by": os.path.realpath(agents), "cwd": "."}]
    read = env.call(ctx, name="myws:deploy")
    assert read["path"] == os.path.realpath(agents / "SKILL.md") and read["shadowed"][0]["cwd"] == "."
    assert "Another skill" not in read["note"]  # same cwd: the agent started there finds its own copy


def test_a_child_named_like_the_workspace_keeps_its_skill_and_cwd_visible(env: Env, tmp_path: Path) -> None:
    """Workspace app/ and its child app/app/ both give `app:deploy`: the child's was only a skipped
    directory, so a model asked for the child project's deploy delegated to cwd '.'. The workspace's
    is mapped; the child's is listed as shadowed with cwd 'app', and reading the name says so."""
    env.ws = tmp_path / "app"
    make_skill(env.ws / "app" / ".agents" / "skills", "deploy", description="Deploys the app package.")
    make_skill(env.ws / ".agents" / "skills", "deploy", description="Deploys everything.")
    make_skill(env.user_root, "deploy", description="Mine.")  # a user name has no ':': never a clash
    ctx = env.ctx()
    result = env.call(ctx)
    assert result["skills"] == [{"name": "deploy", "description": "Mine."}]
    assert [(s["name"], s["cwd"]) for s in result["project_skills"]] == [("app:deploy", ".")]
    [shadow] = result["shadowed"]
    assert (shadow["name"], shadow["cwd"]) == ("app:deploy", "app") and "app package" in shadow["description"]
    note = env.call(ctx, name="app:deploy")["note"]
    assert "cwd '.'" in note and "Another skill named app:deploy is in cwd 'app'" in note


def test_claude_skills_linked_to_agents_skills_mapped_once(env: Env) -> None:
    make_skill(env.ws / "proj" / ".agents" / "skills", "one")
    (env.ws / "proj" / ".claude").mkdir()
    (env.ws / "proj" / ".claude" / "skills").symlink_to("../.agents/skills")
    found = env.discover()
    assert list(found.skills) == ["proj:one"] and not found.skipped


def test_a_claude_skill_linked_to_an_agents_skill_is_not_listed_as_skipped(env: Env,
                                                                            caplog: pytest.LogCaptureFixture) -> None:
    """A link per skill (not the whole folder) was "skipped: it resolves to ..., not inside its skill root",
    with a warning at every session open, though the skill was mapped through .agents/skills."""
    make_skill(env.ws / ".agents" / "skills", "one")
    (env.ws / ".claude" / "skills").mkdir(parents=True)
    (env.ws / ".claude" / "skills" / "one").symlink_to("../../.agents/skills/one")
    with caplog.at_level(logging.WARNING, logger="scvd"):
        found = env.discover()
    assert list(found.skills) == ["myws:one"] and found.skipped == [] and not caplog.records


def test_a_symlink_never_takes_the_name_of_the_directory_it_points_to(env: Env) -> None:
    """A child project linked as `a -> zproj` was found first, so zproj's skill was `a:deploy` with cwd
    'a'; a link to a skill folder sorting first likewise won a name clash for that folder. Real
    directories now go first: the skill is `zproj:deploy`, and the links change nothing."""
    make_skill(env.ws / "zproj" / ".agents" / "skills", "deploy")
    (env.ws / "a").symlink_to("zproj")
    make_skill(env.user_root, "m", name="x", description="Real.")
    make_skill(env.user_root, "zz", name="x", description="Linked.")
    (env.user_root / "a-link").symlink_to("zz")
    found = env.discover()
    assert [(k, s.root.cwd) for k, s in found.skills.items()] == [("x", None), ("zproj:deploy", "zproj")]
    assert found.skills["x"].description == "Real." and [s.description for s in found.shadowed] == ["Linked."]
    assert not found.skipped


def test_a_skipped_directory_is_named_as_the_workspace_shows_it(env: Env) -> None:
    """A project's .agents/skills linked to a shared folder listed its broken skill under the shared
    folder's path, which nothing in the project showed; now the path through the link, with the
    target in the reason."""
    make_skill(env.ws / ".shared", "ok")
    (env.ws / ".shared" / "broken").mkdir()
    (env.ws / "proj" / ".agents").mkdir(parents=True)
    (env.ws / "proj" / ".agents" / "skills").symlink_to("../../.shared")
    found = env.discover()
    ws = os.path.realpath(env.ws)
    assert list(found.skills) == ["proj:ok"]
    assert found.skipped == [(f"{ws}/proj/.agents/skills/broken",
                              f"no SKILL.md in it; it resolves to {ws}/.shared/broken")]


def test_symlink_inside_its_root_is_mapped_by_canonical_path(env: Env) -> None:
    real = make_skill(env.user_root / "store", "kept")  # store/ has no SKILL.md itself: skipped
    (env.user_root / "alias").symlink_to(real)
    found = env.discover()
    assert found.skills["kept"].dir == os.path.realpath(real)


def test_symlinks_out_of_a_root_refused_at_discovery(env: Env) -> None:
    (env.user_root / "evil").symlink_to(env.outside / "evil")
    proj_root = env.ws / ".agents" / "skills"
    proj_root.mkdir(parents=True)
    (proj_root / "evil").symlink_to(env.outside / "evil")
    file_link = proj_root / "file-link"
    file_link.mkdir()
    (file_link / "SKILL.md").symlink_to(env.outside / "evil" / "SKILL.md")
    (env.ws / "linked-root" / ".agents").mkdir(parents=True)
    (env.ws / "linked-root" / ".agents" / "skills").symlink_to(env.outside)  # a project root pointing out
    (env.ws / "linked-child").symlink_to(env.outside / "evil" / "..")  # a child project pointing out
    (env.outside / ".agents").mkdir()
    (env.outside / ".agents" / "skills").symlink_to(env.outside)
    found = env.discover()
    assert found.skills == {}
    reasons = [r for _, r in found.skipped]
    assert sum("not inside its skill root" in r for r in reasons) == 2
    assert any("outside the skill directory" in r for r in reasons)
    assert sum("outside the workspace" in r for r in reasons) == 2


def test_hard_linked_skill_file_refused(env: Env) -> None:
    d = env.user_root / "hard"
    d.mkdir()
    os.link(env.outside / "evil" / "SKILL.md", d / "SKILL.md")
    found = env.discover()
    assert found.skills == {} and "hard links" in found.skipped[0][1]


# --- reading at call time: revalidation ------------------------------------------------


def test_skill_dir_swapped_for_symlink_after_discovery_refused(env: Env) -> None:
    d = make_skill(env.user_root, "swap", body="ORIGINAL\n")
    ctx = env.ctx()
    assert "ORIGINAL" in env.call(ctx, name="swap")["content"]
    d.rename(env.user_root / ".old")
    d.symlink_to(env.outside / "evil")
    with pytest.raises(Failed, match="changed since the session opened") as exc:
        env.call(ctx, name="swap")
    assert "OUTSIDE" not in str(exc.value)


def test_skill_file_swapped_for_symlink_or_hard_link_refused(env: Env, backend: str) -> None:
    d = make_skill(env.user_root, "fileswap")
    found = env.discover()
    (d / "SKILL.md").unlink()
    (d / "SKILL.md").symlink_to(env.outside / "secret.txt")
    with pytest.raises(skills.SkillError, match="changed since"):
        skills.read(found.skills["fileswap"], 1000)
    (d / "SKILL.md").unlink()
    os.link(env.outside / "secret.txt", d / "SKILL.md")
    with pytest.raises(skills.SkillError, match="hard links"):
        skills.read(found.skills["fileswap"], 1000)


def test_open_walk_refuses_a_symlinked_component_on_its_own(env: Env, backend: str) -> None:
    """The O_NOFOLLOW walk holds even if the realpath check ran before a swap (the race)."""
    d = make_skill(env.ws / "p" / ".agents" / "skills", "race")
    skill = env.discover().skills["p:race"]
    skills.revalidate(skill)
    d.rename(d.parent / ".gone")
    d.symlink_to(env.outside / "evil")
    with pytest.raises(skills.SkillError, match="symlink"):
        skills.open_skill_file(skill.file, skill.root)


def test_replaced_root_refused(env: Env) -> None:
    make_skill(env.user_root, "r")
    skill = env.discover().skills["r"]
    env.user_root.rename(env.home / "skills-old")
    make_skill(env.user_root, "r", body="NEW ROOT\n")
    with pytest.raises(skills.SkillError, match="replaced since the session opened"):
        skills.read(skill, 1000)


# --- the tool --------------------------------------------------------------------------


def test_read_returns_content_with_metadata(env: Env) -> None:
    make_skill(env.user_root, "release-checks", body="Run the tests.\n")
    ctx = env.ctx()
    result = env.call(ctx, name="release-checks")
    assert result["name"] == "release-checks" and not result["truncated"]
    assert result["content"].startswith("---\nname: release-checks\n") and "Run the tests." in result["content"]
    assert result["path"] == os.path.realpath(env.user_root / "release-checks" / "SKILL.md")
    assert result["total_bytes"] == len(result["content"].encode())
    assert "project" not in result and "note" not in result


def test_project_skill_read_carries_the_delegation_note(env: Env) -> None:
    make_skill(env.ws / "scv" / ".agents" / "skills", "feature-flow")
    result = env.call(env.ctx(), name="scv:feature-flow")
    assert (result["project"], result["cwd"]) == ("scv", "scv")
    assert "agent_codex" in result["note"] and "cwd 'scv'" in result["note"]


def test_truncated_at_max_skill_bytes_on_a_character_boundary(env: Env) -> None:
    make_skill(env.user_root, "big", body="é" * 400)
    size = (env.user_root / "big" / "SKILL.md").stat().st_size
    result = env.call(env.ctx(max_skill_bytes=100), name="big")
    raw = result["content"].encode()
    assert result["truncated"] and result["total_bytes"] == size
    assert 99 <= len(raw) <= 100 and "\ufffd" not in result["content"]
    exact = env.call(env.ctx(max_skill_bytes=size), name="big")
    assert not exact["truncated"] and len(exact["content"].encode()) == size


def test_unknown_name_lists_known_names(env: Env) -> None:
    for n in ("one", "two"):
        make_skill(env.user_root, n)
    with pytest.raises(InvalidArguments, match=r"no skill named 'three'; known: one, two"):
        env.call(env.ctx(), name="three")


def test_unknown_name_with_no_skills_says_where_to_put_them(env: Env) -> None:
    with pytest.raises(InvalidArguments, match="no skills were found") as exc:
        env.call(env.ctx(), name="x")
    assert str(env.paths.skills_dir) in str(exc.value)


@pytest.mark.parametrize("name", ["../x", "../evil", "/etc/passwd", "evil/SKILL.md", ".hidden", "~/x", "a\\b"])
def test_paths_are_never_accepted(env: Env, name: str) -> None:
    make_skill(env.user_root, "x")
    (env.user_root / "evil").symlink_to(env.outside / "evil")
    with pytest.raises(InvalidArguments, match="never a path"):
        env.call(env.ctx(), name=name)


def test_a_listed_name_that_starts_like_a_path_is_read(env: Env, tmp_path: Path) -> None:
    """A workspace called .dotfiles or a project called ~backup: every listed name reads."""
    env.ws = tmp_path / ".dotfiles"
    make_skill(env.ws / ".agents" / "skills", "sync", body="SYNC BODY\n")
    make_skill(env.ws / "~backup" / ".agents" / "skills", "restore", body="RESTORE BODY\n")
    ctx = env.ctx()
    listed = [s["name"] for s in env.call(ctx)["project_skills"]]
    assert sorted(listed) == [".dotfiles:sync", "~backup:restore"]
    assert "SYNC BODY" in env.call(ctx, name=".dotfiles:sync")["content"]
    assert "RESTORE BODY" in env.call(ctx, name="~backup:restore")["content"]
    with pytest.raises(InvalidArguments, match="never a path"):
        env.call(ctx, name=".dotfiles:nope")


def test_the_longest_listed_name_is_read(env: Env) -> None:
    """A project folder of 255 characters and a skill name of 64: listed, and read by that name
    (read_skill refused names over 200 characters)."""
    project, name = "p" * 255, "s" * 64
    make_skill(env.ws / project / ".agents" / "skills", name, body="LONG BODY\n")
    ctx = env.ctx()
    [listed] = [s["name"] for s in env.call(ctx)["project_skills"]]
    assert listed == f"{project}:{name}"
    assert "LONG BODY" in env.call(ctx, name=listed)["content"]


def test_a_path_to_a_real_skill_is_not_a_name(env: Env) -> None:
    d = make_skill(env.user_root, "x")
    with pytest.raises(InvalidArguments, match="never a path"):
        env.call(env.ctx(), name=str(d / "SKILL.md"))
    with pytest.raises(InvalidArguments, match="path"):
        TOOL.decode({"path": str(d)})


def test_listing_separates_user_and_project_skills(env: Env) -> None:
    make_skill(env.user_root, "mine", description="My own.")
    make_skill(env.ws / "scv" / ".agents" / "skills", "feature-flow", description="Lands a change.")
    make_skill(env.user_root, "broken", description="")
    ctx = env.ctx()
    plan = TOOL.plan(TOOL.decode({}), ctx)
    assert plan.risk is ToolRisk.READ_ONLY and "1 user, 1 project" in plan.summary
    result = env.call(ctx)
    assert result["skills"] == [{"name": "mine", "description": "My own."}]
    assert result["project_skills"] == [
        {"name": "scv:feature-flow", "description": "Lands a change.", "project": "scv", "cwd": "scv"}]
    assert result["project_note"] == PROJECT_NOTE and "cwd" in PROJECT_NOTE
    assert result["skipped"][0]["dir"].endswith("broken")
    assert "limit_reached" not in result
    assert "limit_reached" in env.call(env.ctx(max_skills=1))
    msgspec.json.encode(result)


def test_listing_without_project_skills_has_no_note(env: Env) -> None:
    result = env.call(env.ctx())
    assert result == {"skills": [], "project_skills": []}


def test_registered_read_only_and_concurrent() -> None:
    tool = build_registry(Config(), None).get("read_skill")
    assert isinstance(tool, ReadSkillTool)
    assert tool.risk is ToolRisk.READ_ONLY and tool.flags.concurrent
    assert tool.input_schema()["properties"]["name"]["default"] == ""


def test_plan_is_read_only_and_run_rechecks(env: Env) -> None:
    d = make_skill(env.user_root, "p")
    ctx = env.ctx()
    args = TOOL.decode({"name": "p"})
    plan = TOOL.plan(args, ctx)
    assert plan.risk is ToolRisk.READ_ONLY and plan.details["path"] == str(d.resolve() / "SKILL.md")
    (d / "SKILL.md").unlink()
    (d / "SKILL.md").symlink_to(env.outside / "secret.txt")
    # the recheck's words, not the open's (it refuses the symlink too, and passed with no recheck)
    with pytest.raises(Failed, match="skill 'p' changed since the session opened: .* a symlink was swapped in"):
        asyncio.run(TOOL.run(args, Plan(risk=ToolRisk.READ_ONLY, summary=""), ctx))
