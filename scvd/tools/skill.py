"""The `read_skill` tool of seed 000: a skill's SKILL.md by name, or the list of skills.

Discovery (scvd/skills.py) runs once when a session opens, through
`session_services`; the map it builds reaches calls as ctx.services["skills"].
Rule: the argument is a key of that map and nothing else; never a path. Skill
names, descriptions and content are untrusted text written by others.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Annotated, Any, Callable, Sequence

import msgspec

from .. import skills
from ..adapters.spec import ADAPTERS
from ..errors import Failed, InvalidArguments, Unavailable
from .contract import CallContext, Plan, Tool, ToolFlags, ToolRisk, never

log = logging.getLogger("scvd.tools.skill")

SERVICE = "skills"  # the key of the session's SkillMap in ctx.services
KNOWN_SHOWN = 8  # names offered when an unknown one is asked for
SKIPPED_SHOWN = 20  # skipped directories reported in the listing
_AGENT_TOOLS = [a.tool_name for a in ADAPTERS.values()]
AGENTS = ", ".join(_AGENT_TOOLS[:-1]) + " or " + _AGENT_TOOLS[-1]  # "agent_claude, agent_codex or agent_pi"
PROJECT_NOTE = (
    "Project skills belong to a project in the workspace: do not follow them in this session. Delegate the "
    f"task to that project with {AGENTS} and the skill's cwd, where the agent loads the skill itself."
)


def delegate_note(skill: skills.Skill) -> str:
    """What to do with a project skill (the seed: delegate to that project with agent_* and cwd)."""
    return (
        f"{skill.key} is a skill of project {skill.root.project!r}: do not follow it here. Delegate the task "
        f"with {AGENTS} and cwd {skill.root.cwd!r}; the agent started there picks the skill up itself."
    )


class ReadSkillArguments(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Arguments of read_skill."""

    name: Annotated[str, msgspec.Meta(max_length=skills.MAX_KEY, description=(
        "A skill name from the listing, e.g. 'release-checks' or 'scv:feature-flow' for a project skill; "
        "'' (the default) returns the list of user skills and, separately, project skills."))] = ""


class ReadSkillTool(Tool):
    name = "read_skill"
    description = (
        "Read a skill's SKILL.md by name; name '' lists the available skills.\n"
        "Use when a task fits a skill; read is for workspace files.\n"
        "Names only, never paths; project skills go to agent_* with cwd."
    )
    risk = ToolRisk.READ_ONLY
    flags = ToolFlags(concurrent=True)
    Arguments = ReadSkillArguments

    def session_services(self, workspace: Path, config: Any, paths: Any,
                         gone: Callable[[], bool] = never) -> dict[str, Any]:
        found = skills.discover(workspace, paths, config.skills.max_skills, config.skills.max_walk_entries, gone)
        if gone():  # it stopped halfway (it said so); nobody opens this session
            return {}
        log.info("skills for %s: %d user, %d project, %d skipped, %d shadowed%s", workspace,
                 len(found.of_kind(skills.USER)), len(found.of_kind(skills.PROJECT)), len(found.skipped),
                 len(found.shadowed), f" ({found.limit_reached})" if found.limit_reached else "")
        return {SERVICE: found}

    def plan(self, args: Any, ctx: CallContext) -> Plan:
        found = _skill_map(ctx)
        if not args.name:
            summary = (f"list skills: {len(found.of_kind(skills.USER))} user, "
                       f"{len(found.of_kind(skills.PROJECT))} project")
            return Plan(risk=ToolRisk.READ_ONLY, summary=summary, details={"list": True}, network=False)
        skill = lookup(found, args.name, ctx)
        details = {"name": skill.key, "path": skill.file, "root": skill.root.path, "kind": skill.root.kind}
        return Plan(risk=ToolRisk.READ_ONLY, summary=f"read skill {skill.key!r} ({skill.file})",
                    details=details, network=False)

    async def run(self, args: Any, plan: Plan, ctx: CallContext) -> Any:
        found = _skill_map(ctx)
        if not args.name:
            return listing(found)
        skill = lookup(found, args.name, ctx)
        return await asyncio.to_thread(read_result, skill, ctx.config.skills.max_skill_bytes,
                                       found.shadowed_by(skill))


def _skill_map(ctx: CallContext) -> skills.SkillMap:
    found = ctx.services.get(SERVICE)
    if found is None:
        raise Unavailable("this session has no skill map (it opened without skill discovery); open a new session")
    return found


def lookup(found: skills.SkillMap, name: str, ctx: CallContext) -> skills.Skill:
    """The mapped skill called `name`, or InvalidArguments that names a few known ones."""
    skill = found.skills.get(name)  # a key of the map is never a path (a `.dotfiles:sync` project skill)
    if skill is not None:
        return skill
    if any(c in name for c in "/\\\0") or name.startswith(".") or name.startswith("~"):
        raise InvalidArguments(
            f"read_skill takes a skill name, never a path ({skills.clean_text(name, 80)!r} looks like one); "
            "call read_skill with name '' to list the names; read opens workspace files")
    known = list(found.skills)
    if not known:
        where = f"{ctx.paths.skills_dir}/<name>/SKILL.md" if ctx.paths is not None else "the user skill root"
        raise InvalidArguments(
            f"no skill named {skills.clean_text(name, 80)!r}: no skills were found when this session opened; "
            f"add one at {where} or a project's .agents/skills/<name>/SKILL.md, then open a new session")
    more = f" and {len(known) - KNOWN_SHOWN} more" if len(known) > KNOWN_SHOWN else ""
    raise InvalidArguments(
        f"no skill named {skills.clean_text(name, 80)!r}; known: {', '.join(known[:KNOWN_SHOWN])}{more}; "
        "call read_skill with name '' for the full list")


def read_result(skill: skills.Skill, max_bytes: int, shadowed: Sequence[skills.Skill] = ()) -> dict[str, Any]:
    """The result of reading one skill, after its containment is checked again; `shadowed`: the
    skills of the same name that it hides, named so the model can still delegate to their cwd."""
    try:
        content, truncated, total = skills.read(skill, max_bytes)
    except skills.SkillError as exc:
        raise Failed(f"{exc.message}; open a new session to discover skills again",
                     hint="read_skill refuses a skill whose path changed since discovery") from exc
    except OSError as exc:  # EIO: a failing disk, a network mount gone (discovery skips such a skill)
        raise Failed(f"the file of skill {skill.key!r} could not be read: {exc.strerror or exc}",
                     hint=f"check the disk or mount that holds {skills.shown(skill.file)}, then call read_skill "
                     "again") from exc
    result: dict[str, Any] = {"name": skill.key, "path": skills.shown(skill.file), "content": content,
                              "truncated": truncated, "total_bytes": total}
    if skill.root.kind == skills.PROJECT:
        result.update(project=skill.root.project, cwd=skill.root.cwd, note=delegate_note(skill))
    if shadowed:
        result["shadowed"] = [shadow_entry(s, skill) for s in shadowed]
        elsewhere = sorted({s.root.cwd for s in shadowed if s.root.cwd != skill.root.cwd})
        if elsewhere:  # a child folder named like the workspace: same key, another project
            result["note"] += (f" Another skill named {skill.key} is in cwd {', '.join(map(repr, elsewhere))}"
                               " (under shadowed): if the task is that project's, delegate there instead.")
    return result


def shadow_entry(skill: skills.Skill, by: skills.Skill) -> dict[str, Any]:
    """A skill hidden by an earlier one of the same key: where it is, and for a project skill its cwd."""
    entry: dict[str, Any] = {"name": skill.key, "description": skill.description, "dir": skills.shown(skill.dir),
                             "by": skills.shown(by.dir)}
    if skill.root.kind == skills.PROJECT:
        entry["cwd"] = skill.root.cwd
    return entry


def listing(found: skills.SkillMap) -> dict[str, Any]:
    """User skills and, separately, project skills with the delegation note."""
    user = [{"name": s.key, "description": s.description} for s in found.of_kind(skills.USER)]
    project = [
        {"name": s.key, "description": s.description, "project": s.root.project, "cwd": s.root.cwd}
        for s in found.of_kind(skills.PROJECT)
    ]
    result: dict[str, Any] = {"skills": user, "project_skills": project}
    if project:
        result["project_note"] = PROJECT_NOTE
    if found.limit_reached:
        result["limit_reached"] = found.limit_reached
    if found.skipped:
        result["skipped"] = [{"dir": d, "reason": r} for d, r in found.skipped[:SKIPPED_SHOWN]]
    if found.shadowed:
        result["shadowed"] = [shadow_entry(s, found.skills[s.key]) for s in found.shadowed[:SKIPPED_SHOWN]]
    return result


def tools(config: Any, paths: Any) -> list[Tool]:
    return [ReadSkillTool()]
