"""Skill discovery: the skill roots, SKILL.md front matter, the name -> canonical path map.

Pure discovery, no tool logic. `discover()` runs once when a session opens and
builds a `SkillMap`; `read()` opens a mapped skill again at call time. Rule: a
skill is only ever reached through that map, by the canonical path it had under
the root it was found in, and nothing here takes a path from a caller.

Roots, in this order (the order decides which skills fit under the limit):
  1. the user root `paths.skills_dir` ($SCV_HOME/skills): names as written;
  2. the workspace's own `.agents/skills` and `.claude/skills`: `<workspace name>:<name>`;
  3. the same two folders of each child project (a direct, non-hidden
     subdirectory of the workspace), in name order: `<child name>:<name>`.
Within a root, skill directories go in name order. Symlinks (child projects,
skill directories) come after the real directories, in name order too, so a link
to one never takes its name. When two valid skills get the
same key (a copy in both `.agents/skills` and `.claude/skills`, a child folder
named like the workspace) the first in this order is mapped and the other is
kept in `shadowed`, so the listing can say where it is: never by listing order.
A project root must resolve inside the workspace. A skill is a non-hidden
directory of a root whose canonical path stays under that root and that holds a
regular SKILL.md with `name` and `description` in its front matter.

Rule: one discovery is bounded whatever the trees hold (`Walk`): it reads at most
`max_walk_entries` directory entries in all (then stops, keeping what it found),
logs at most MAX_WARNINGS warnings (the rest counted in one line), and stops as
soon as `gone()` says nobody waits for its session any more.
"""

from __future__ import annotations

import codecs
import errno
import heapq
import itertools
import logging
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, TypeVar

from .errors import SkillError
from .paths import within
from .tools import containment

log = logging.getLogger("scvd.skills")

SKILL_FILE = "SKILL.md"
PROJECT_SKILL_DIRS = (".agents/skills", ".claude/skills")  # Codex's and Claude Code's places
USER, PROJECT = "user", "project"
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")  # Agent Skills names, a little more lenient
MAX_KEY = 255 + 1 + 64  # the longest map key: a project folder's name (NAME_MAX), ':', a skill name
HEAD_BYTES = 16 * 1024  # the front matter must close within this many bytes
MAX_DESCRIPTION = 1024  # the Agent Skills limit; longer ones are clipped
MAX_ENTRIES = 1024  # subdirectories looked at per root, and child projects per workspace: the first in name order
MAX_LISTED = 65536  # directory entries read to find them: a folder of a million is not read to its end
MAX_WARNINGS = 20  # warnings logged per discovery (as many as the listing shows skipped); the rest are counted
GONE_EVERY = 256  # entries read between two asks whether the session's client is gone (a poll(2) each)
OPEN_ROOT = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
OPEN_FILE = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY  # open_raw adds O_NOFOLLOW and O_CLOEXEC


@dataclass(frozen=True)
class Root:
    """A folder that holds skill directories, canonical, with its identity at discovery."""

    path: str  # realpath
    kind: str  # USER or PROJECT
    ident: tuple[int, int]  # (st_dev, st_ino): a root replaced since discovery is refused
    project: str | None = None  # the name before ':' of its skills
    cwd: str | None = None  # the project directory relative to the workspace ('.' for the workspace)
    shown: str = ""  # the path it was reached by (through any link), as the user knows it: for messages


@dataclass(frozen=True)
class Skill:
    """One mapped skill."""

    key: str  # the map key: `name`, or `project:name`
    name: str  # from the front matter
    description: str  # from the front matter: untrusted text
    dir: str  # canonical skill directory
    file: str  # canonical SKILL.md
    root: Root


@dataclass
class SkillMap:
    """What discovery found for one session."""

    skills: dict[str, Skill] = field(default_factory=dict)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (directory, reason)
    shadowed: list[Skill] = field(default_factory=list)  # valid, but its key was taken by an earlier one
    limit_reached: str = ""  # why discovery stopped before the end, as the listing says it

    def of_kind(self, kind: str) -> list[Skill]:
        return [s for s in self.skills.values() if s.root.kind == kind]

    def shadowed_by(self, skill: Skill) -> list[Skill]:
        return [s for s in self.shadowed if s.key == skill.key]


# --- front matter (pure) -----------------------------------------------------------


def parse_front_matter(text: str) -> dict[str, str]:
    """The `key: value` pairs between the leading `---` lines of a SKILL.md.

    Deliberately not a YAML parser (no dependency, nothing executable): one
    `key: value` per line, surrounding quotes removed, indented lines and list
    items (`- x`, indented or not) continue the previous value (folded with
    spaces, as `>` would), comments (`#` lines, ` # ...` after a value outside
    quotes) dropped except inside a `|` or `>` block. Lists and nested maps
    arrive as flat text, which is enough for `name` and `description`. Raises
    SkillError when there is no closed front matter.
    """
    lines = text.removeprefix("\ufeff").splitlines()
    if not lines or lines[0].rstrip() != "---":
        raise SkillError("SKILL.md does not start with a '---' front matter line")
    pairs: dict[str, list[str]] = {}
    key = None
    block = False  # the value is a `|` or `>` block: a `#` in its lines is text
    for line in lines[1:]:
        if line.rstrip() == "---":
            return {k: _unquote(" ".join(v).strip()) for k, v in pairs.items()}
        if not line.strip():
            continue
        if line[0] in " \t" or line.startswith("- ") or line.rstrip() == "-":  # `- Read` under `allowed-tools:`
            part = line.strip() if block else _uncomment(line.strip())
            if key is not None and part:
                pairs[key].append(part)
            continue
        if line.startswith("#"):
            continue
        key, sep, value = line.partition(":")
        key = key.strip()
        if not sep or not key:
            raise SkillError(f"front matter line {line[:60]!r} is not 'key: value'")
        if key in pairs:
            raise SkillError(f"front matter repeats the key {key!r}")
        value = _uncomment(value.strip())
        block = value in (">", "|", ">-", "|-", ">+", "|+")
        pairs[key] = [] if block else [value]
    raise SkillError(f"front matter is not closed by a '---' line within the first {HEAD_BYTES} bytes")


def _uncomment(text: str) -> str:
    """`text` without a YAML comment: `#` at its start or after a blank, outside quotes."""
    if text.startswith("#"):
        return ""
    if text[:1] in ("'", '"'):  # a quoted scalar: only what follows its closing quote can be a comment
        quote, i = text[0], 1
        while i < len(text):
            if quote == '"' and text[i] == "\\":
                i += 2
            elif text[i] == quote and quote == "'" and text[i + 1:i + 2] == "'":
                i += 2
            elif text[i] == quote:
                rest = text[i + 1:].strip()
                return text[:i + 1] if rest.startswith("#") else text
            else:
                i += 1
        return text
    comment = _COMMENT.search(text)
    return text[:comment.start()].rstrip() if comment else text


_COMMENT = re.compile(r"[ \t]#")


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1].replace('\\"', '"').replace("\\\\", "\\")
    if len(value) >= 2 and value[0] == value[-1] == "'":
        return value[1:-1].replace("''", "'")
    return value


def check_meta(meta: dict[str, str]) -> tuple[str, str]:
    """(name, description) of valid front matter; the description made one clean line."""
    name, description = meta.get("name", ""), meta.get("description", "")
    if not name:
        raise SkillError("front matter has no 'name'")
    if not NAME_RE.match(name):
        raise SkillError(f"name {name[:80]!r} must be 1-64 letters, digits, '.', '_' or '-'")
    if not description:
        raise SkillError("front matter has no 'description'")
    return name, clean_text(description, MAX_DESCRIPTION)


def clean_text(text: str, limit: int) -> str:
    """One line with control characters (ANSI escapes, bidi overrides) turned into spaces, clipped."""
    flat = "".join(c if c.isprintable() else " " for c in text)
    flat = " ".join(flat.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def project_key(project: str, name: str) -> str:
    return f"{project}:{name}"


# --- opening without following symlinks ------------------------------------------


def open_skill_file(skill_file: str, root: Root) -> int:
    """An fd of `skill_file` (canonical) opened beneath `root` without following a symlink.

    The root must still be the directory found at discovery (same dev/ino); below
    it the file is opened by `containment.open_raw`, the resolver the file tools
    use, which follows no symlink at any component, so a directory swapped for a
    symlink after discovery cannot redirect the read.
    """
    parts = Path(os.path.relpath(skill_file, root.path)).parts
    if not parts or parts[0] == "..":
        raise SkillError(f"{skill_file} is not under its root {root.path}")
    try:
        root_fd = os.open(root.path, OPEN_ROOT)
    except OSError as exc:
        raise _open_error(root.path, exc) from exc
    try:
        st = os.fstat(root_fd)
        if (st.st_dev, st.st_ino) != root.ident:
            raise SkillError(f"skill root {root.path} was replaced since the session opened")
        file_fd = containment.open_leaf(root_fd, parts, skill_file, OPEN_FILE, check=_check_regular)
    except OSError as exc:
        raise _open_error(skill_file, exc) from exc
    finally:
        os.close(root_fd)
    try:
        _check_regular(os.fstat(file_fd), skill_file)
    except BaseException:
        os.close(file_fd)
        raise
    return file_fd


def _open_error(shown: str, exc: OSError) -> SkillError:
    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK, errno.EXDEV):
        return SkillError(f"{shown}: a path component is a symlink or not a directory")
    return SkillError(f"{shown}: {exc.strerror}")


def _check_regular(st: os.stat_result, shown: str) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise SkillError(f"{shown} is not a regular file")
    if st.st_nlink > 1:  # its other name may be anywhere, e.g. a secret outside the root
        raise SkillError(f"{shown} has {st.st_nlink} hard links; make it a plain copy")


def read_bytes(fd: int, limit: int) -> bytes:
    """Up to `limit` bytes from fd, however short the reads."""
    chunks: list[bytes] = []
    left = limit
    while left > 0:
        buf = os.read(fd, min(left, 1 << 16))
        if not buf:
            break
        chunks.append(buf)
        left -= len(buf)
    return b"".join(chunks)


# --- discovery ------------------------------------------------------------------


class _Stopped(Exception):
    """Discovery ends here: its entries are used up (`spent`), or nobody waits for its session."""

    def __init__(self, spent: bool) -> None:
        super().__init__()
        self.spent = spent


T = TypeVar("T")


class Walk:
    """One discovery's state and bounds: what it found, the entries it may still read, the
    warnings it may still log, and `gone`, asked every GONE_EVERY entries and at each skill."""

    def __init__(self, max_entries: int, gone: Callable[[], bool]) -> None:
        self.found = SkillMap()
        self.seen: set[str] = set()  # canonical skill dirs: .claude/skills is often a link to .agents/skills
        self.max_entries, self.left = max_entries, max_entries
        self.gone = gone
        self.warned = self.unlogged = 0

    def counted(self, entries: Iterable[T]) -> Iterator[T]:
        """`entries`, each one taken from the walk's budget; _Stopped once it is spent or `gone()`."""
        for entry in entries:
            if self.left <= 0:
                raise _Stopped(spent=True)
            self.left -= 1
            if self.left % GONE_EVERY == 0:
                self.check()
            yield entry

    def check(self) -> None:
        if self.gone():
            raise _Stopped(spent=False)

    def warn(self, message: str, *args: Any) -> None:
        if self.warned < MAX_WARNINGS:
            self.warned += 1
            log.warning(message, *args)
        else:
            self.unlogged += 1


def discover(workspace: str | os.PathLike[str], paths: Any, max_skills: int, max_entries: int,
             gone: Callable[[], bool] = lambda: False) -> SkillMap:
    """The skill map of a session on `workspace`; never raises for a bad skill or root. Past
    `max_entries` directory entries read it stops, keeping the skills found so far."""
    walk = Walk(max_entries, gone)
    found = walk.found
    try:
        _walk(walk, workspace, paths, max_skills)
    except _Stopped as stop:
        if not stop.spent:  # nobody reads this map
            log.info("skill discovery for %s stopped: nobody waits for its session (the client hung up, or scvd"
                     " is stopping)", shown(str(workspace)))
        else:
            found.limit_reached = (f"discovery stopped after reading {max_entries} directory entries "
                                   "(skills.max_walk_entries); skills past them are not mapped")
            log.warning("skills.max_walk_entries (%d) reached for %s: discovery stopped there and the %d skills "
                        "found so far are mapped; move big folders out of the skill roots and the workspace's "
                        "top level, or raise skills.max_walk_entries", max_entries, shown(str(workspace)),
                        len(found.skills))
    if walk.unlogged:
        log.warning("%d more skill discovery warnings for %s were not logged (the first %d were)",
                    walk.unlogged, shown(str(workspace)), MAX_WARNINGS)
    return found


def _walk(walk: Walk, workspace: str | os.PathLike[str], paths: Any, max_skills: int) -> None:
    found = walk.found
    walk.check()  # it may have waited for a thread while its client left
    for root in roots(workspace, paths, walk):
        for name in _entries(root, walk):
            walk.check()  # a skill costs a dozen system calls: asked at each
            skill = _candidate(walk, root, name)
            if skill is None:
                continue
            if len(found.skills) >= max_skills:  # a skill left out: only now is the limit news
                found.limit_reached = f"only the first {max_skills} skills are mapped (skills.max_skills)"
                log.warning("skills.max_skills (%d) reached; %s and later skills are not mapped",
                            max_skills, shown(os.path.join(root.shown, name)))
                return
            walk.seen.add(skill.dir)
            found.skills[skill.key] = skill


def roots(workspace: str | os.PathLike[str], paths: Any, walk: Walk) -> Iterator[Root]:
    """The user root, then the workspace's and its child projects' skill roots that exist: one at
    a time, so the workspace is listed for child projects only once its own roots are walked."""
    ws = os.path.realpath(workspace)
    done: set[str] = set()
    for path, kind, project, cwd in _root_candidates(ws, paths, walk):
        root = _resolve_root(path, kind, project, cwd, ws, walk)
        if root is not None and root.path not in done:
            done.add(root.path)
            yield root


def _root_candidates(ws: str, paths: Any, walk: Walk) -> Iterator[tuple[str, str, str | None, str | None]]:
    if paths is not None:
        yield str(paths.skills_dir), USER, None, None
    for project, cwd in projects(ws, walk):
        for d in PROJECT_SKILL_DIRS:
            yield os.path.normpath(os.path.join(ws, cwd, d)), PROJECT, project, cwd


def projects(ws: str, walk: Walk) -> Iterator[tuple[str, str]]:
    """(project name, cwd): the workspace itself as its own name, then each child directory."""
    yield shown(os.path.basename(ws)) or "workspace", "."  # a Latin-1 name: its keys must fit a frame
    try:
        names = subdirs(ws, walk)
    except OSError as exc:
        _skip(walk, ws, f"cannot list the workspace for child projects: {exc.strerror}")
        return
    for name in names:
        if ":" in name or not name.isprintable():
            _skip(walk, os.path.join(ws, name), "a project name with ':' or control characters")
        else:
            yield name, name


def _resolve_root(path: str, kind: str, project: str | None, cwd: str | None, ws: str,
                  walk: Walk) -> Root | None:
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
    except OSError:
        return None  # no such root: the common case, nothing to say
    if not stat.S_ISDIR(st.st_mode):
        _skip(walk, path, "not a directory")
        return None
    if kind == PROJECT and not within(real, ws):
        _skip(walk, path, f"it resolves to {real}, outside the workspace")
        return None
    return Root(path=real, kind=kind, ident=(st.st_dev, st.st_ino), project=project, cwd=cwd, shown=path)


def _entries(root: Root, walk: Walk) -> list[str]:
    """The names of a root's skill directory candidates, in `subdirs` order."""
    try:
        return subdirs(root.path, walk)
    except OSError as exc:
        _skip(walk, root.shown, f"cannot list the skill root: {exc.strerror}")
        return []


def subdirs(path: str, walk: Walk) -> list[str]:
    """The names of `path`'s non-hidden subdirectories, the first MAX_ENTRIES in name order: which
    ones never depends on the order the file system lists them in. Symlinks to directories come
    after all real ones, so a link never takes the name (a project's, a clash's) of what it points to.

    At most MAX_LISTED entries are read, and only MAX_ENTRIES + 1 names are kept while reading;
    each entry read counts against the walk's.
    """
    with os.scandir(path) as it:
        listed = walk.counted(itertools.islice(it, MAX_LISTED))
        first = heapq.nsmallest(MAX_ENTRIES + 1, ((e.is_symlink(), e.name) for e in listed
                                                  if not e.name.startswith(".") and e.is_dir()))
        cut_short = next(it, None) is not None
    if cut_short:
        walk.warn("%s has more than %d entries; only that many are read (which ones depends on the file"
                  " system) and the first %d subdirectories in name order among them looked at for skills",
                  shown(path), MAX_LISTED, MAX_ENTRIES)
    elif len(first) > MAX_ENTRIES:
        walk.warn("%s has more than %d subdirectories; only the first %d in name order are looked at"
                  " for skills", shown(path), MAX_ENTRIES, MAX_ENTRIES)
    return [name for _, name in first[:MAX_ENTRIES]]


def _candidate(walk: Walk, root: Root, name: str) -> Skill | None:
    """The skill in directory `name` of `root` when it is one and new, else None (the reason is in
    `skipped`, under the path the user reached it by: a linked root's target means nothing to them)."""
    found, seen = walk.found, walk.seen
    skill_dir = os.path.join(root.path, name)
    try:
        skill = load_skill(root, skill_dir)
    except SkillError as exc:
        real, where = os.path.realpath(skill_dir), os.path.join(root.shown, name)
        if real in seen:  # `.claude/skills/x` linked to `.agents/skills/x`
            log.debug("skill %s is a link to one already mapped", where)
        else:
            _skip(walk, where, exc.message if real == where or real in exc.message
                  else f"{exc.message}; it resolves to {real}")
        return None
    if skill.dir in seen:
        log.debug("skill %s already mapped through another root folder", skill.dir)
        return None
    if skill.key in found.skills:
        walk.warn("skill %s shadowed: its name %r is taken by %s, found first; rename one to map both",
                  shown(skill.dir), skill.key, shown(found.skills[skill.key].dir))
        found.shadowed.append(skill)
        seen.add(skill.dir)  # a link to it from a later root is the same skill, reported once
        return None
    return skill


def load_skill(root: Root, skill_dir: str) -> Skill:
    """A Skill for one directory of `root`, or SkillError saying why it is not one."""
    real_dir = os.path.realpath(skill_dir)
    if not within(real_dir, root.path) or real_dir == root.path:
        raise SkillError(f"it resolves to {real_dir}, not inside its skill root {root.path}")
    real_file = os.path.realpath(os.path.join(real_dir, SKILL_FILE))
    if not within(real_file, real_dir):
        raise SkillError(f"its {SKILL_FILE} resolves to {real_file}, outside the skill directory")
    if not os.path.lexists(real_file):
        raise SkillError(f"no {SKILL_FILE} in it")
    fd = open_skill_file(real_file, root)
    try:
        head = read_bytes(fd, HEAD_BYTES)
    except OSError as exc:  # one unreadable file (a failing disk or network mount) must not fail session.open
        raise SkillError(f"cannot read its {SKILL_FILE}: {exc.strerror}") from exc
    finally:
        os.close(fd)
    name, description = check_meta(parse_front_matter(_head_text(head)))
    key = project_key(root.project, name) if root.kind == PROJECT and root.project else name
    return Skill(key=key, name=name, description=description, dir=real_dir, file=real_file, root=root)


def _head_text(head: bytes) -> str:
    """The front matter of a SKILL.md's first bytes as text: only it must be UTF-8 (a stray Latin-1
    byte in the body below is read as U+FFFD, as read() does, wherever it sits)."""
    lines = head.splitlines(keepends=True)
    end = next((sum(map(len, lines[:i + 1])) for i, line in enumerate(lines[1:], 1) if line.rstrip() == b"---"),
               None)
    front = head if end is None else head[:end]
    try:
        return front.decode("utf-8")
    except UnicodeDecodeError as exc:
        if end is not None or exc.reason != "unexpected end of data" or len(head) < HEAD_BYTES:
            raise SkillError(f"the front matter of {SKILL_FILE} is not UTF-8 text") from exc
        return head[: exc.start].decode("utf-8")  # only our byte limit cut a character in two


def _skip(walk: Walk, where: str, reason: str) -> None:
    where, reason = shown(where), shown(reason)
    walk.warn("skill %s skipped: %s", where, reason)
    walk.found.skipped.append((where, reason))


def shown(path: str) -> str:
    """`path` as text: a name's bytes that are not UTF-8 (a Latin-1 folder) as `\\xe9`, so it can
    be found, where they would otherwise be lone surrogates that no frame can carry."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return path


# --- reading at call time ----------------------------------------------------------


def revalidate(skill: Skill) -> None:
    """Refuse a mapped skill whose canonical SKILL.md no longer resolves to itself under its root."""
    root_now = os.path.realpath(skill.root.path)
    file_now = os.path.realpath(skill.file)
    if root_now != skill.root.path or file_now != skill.file or not within(file_now, skill.root.path):
        raise SkillError(
            f"skill {skill.key!r} changed since the session opened: {skill.file} now resolves to {file_now}"
            f" (root {skill.root.path} -> {root_now}); a symlink was swapped in"
        )


def read(skill: Skill, max_bytes: int) -> tuple[str, bool, int]:
    """(content, truncated, total_bytes) of a mapped skill's SKILL.md, at most `max_bytes` of it."""
    revalidate(skill)
    fd = open_skill_file(skill.file, skill.root)
    try:
        total = os.fstat(fd).st_size
        data = read_bytes(fd, max_bytes + 1)
    finally:
        os.close(fd)
    truncated = len(data) > max_bytes
    # not final when truncated: a character the byte limit cut in two is held back, not replaced
    content = codecs.getincrementaldecoder("utf-8")("replace").decode(data[:max_bytes], final=not truncated)
    return content, truncated, total
