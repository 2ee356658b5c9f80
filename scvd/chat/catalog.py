"""The tools a conversation offers the model, and the loop's own two: find_tools and ask_user.

Seed 003's lazy schemas: the model gets full schemas only for a fixed core
(find_tools, ask_user) and for tools this conversation already loaded; every
other tool appears by name in the instructions. find_tools answers from the
catalog here, with no call through the pipeline: it only reads the tool list.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any, Callable, Container, Iterable, Literal

import msgspec

from ..mcp.spec import PREFIX as MCP_PREFIX
from ..tools.contract import inline_schema, object_root
from .items import ToolSpec

FIND_TOOLS = "find_tools"
ASK_USER = "ask_user"
SEARCH_LIMIT = 8  # schemas one search loads at most; the rest stay names
# tools one answer describes, best first, and the characters of their descriptions (an MCP server's
# may be 4 KiB each): past either, matches are counted, so that an answer over many MCP servers is no
# output chat.context_tokens drops whole
FOUND_LIMIT = 40
FOUND_CHARS = 32_000
STORE_SECRET = "store_secret"
# seed 003: the system prompt keeps one short line on credentials; the tool's description has the rest
CREDENTIALS = (f"Credentials (API keys, tokens) live in scvd's secret store, not in the environment: on a "
               f"missing key, a 401, a 403 or an expired token, load {STORE_SECRET} with {FIND_TOOLS} "
               f"(query {STORE_SECRET!r}) and call it with the key's "
               "name (the person enters the value, which never reaches you), then call the failed tool again.")


class FindToolsArgs(msgspec.Struct, forbid_unknown_fields=True):
    query: Annotated[str, msgspec.Meta(
        description="Words to match in tool names and descriptions; omit to get all, e.g. 'write file'")] = ""
    mode: Annotated[Literal["list", "search"], msgspec.Meta(
        description="search (the default) loads the schemas of the best matches; list only names tools, e.g. list")] = "search"
    include_system: Annotated[bool, msgspec.Meta(
        description="Also show internal bookkeeping tools when true, e.g. true to find store_secret")] = False


class AskUserArgs(msgspec.Struct, forbid_unknown_fields=True):
    question: Annotated[str, msgspec.Meta(
        description="The question for the person, e.g. 'Which branch should I deploy?'")]


CORE = (
    ToolSpec(FIND_TOOLS, "Find tools by name or purpose and load their schemas.\n"
             "Use when a tool is listed by name only, before calling it; ask_user for questions.",
             inline_schema(FindToolsArgs)),
    ToolSpec(ASK_USER, "Ask the person a question and wait for the answer.\n"
             "Use when a choice or fact only the person knows blocks work; not for file facts.\n"
             "Precondition: the turn waits for the answer, without a time limit.", inline_schema(AskUserArgs)),
)
CORE_NAMES = frozenset(spec.name for spec in CORE)


@dataclass(frozen=True)
class Entry:
    """One tool of the session's registry, as the loop needs it."""

    name: str
    description: str
    schema: dict[str, Any]
    system_use: bool = False
    background: bool = False


class Catalog:
    """The tools one conversation may use (all, or the names chat.open allowed), and the MCP servers
    that are down for want of a secret (name -> the secrets' names)."""

    def __init__(self, entries: Iterable[Entry], waiting: dict[str, tuple[str, ...]] | None = None,
                 not_loaded: Callable[[str], str | None] | None = None) -> None:
        self.entries = {e.name: e for e in entries if e.name not in CORE_NAMES}
        self.waiting = waiting or {}
        # the daemon's: why a tool of that name failed to load (else None), told to a model calling it
        self.not_loaded = not_loaded or (lambda name: None)

    @classmethod
    def from_registry(cls, registry: Any, allowed: str | list[str] = "all",
                      waiting: dict[str, tuple[str, ...]] | None = None,
                      not_loaded: Callable[[str], str | None] | None = None) -> Catalog:
        tools = registry.visible(include_system=True)
        if allowed != "all":
            tools = [t for t in tools if t.name in set(allowed)]
            waiting = {name: keys for name, keys in (waiting or {}).items()
                       if any(n.startswith(f"{MCP_PREFIX}{name}__") for n in allowed)}
            if not_loaded is not None:  # a tool chat.open left out is not this conversation's, loaded or not
                daemons = not_loaded
                not_loaded = lambda name: daemons(name) if name in allowed else None  # noqa: E731
        return cls((Entry(t.name, t.description, t.input_schema(), t.flags.system_use, t.flags.background)
                    for t in tools), waiting, not_loaded)

    def specs(self, loaded: Container[str]) -> list[ToolSpec]:
        """Full schemas: the core, then the loaded tools in name order (a stable request)."""
        return list(CORE) + [ToolSpec(e.name, e.description, object_root(e.schema))
                             for n, e in sorted(self.entries.items()) if n in loaded]

    def instructions(self, system_prompt: str, loaded: Container[str]) -> str:
        """The system prompt, the credentials line where store_secret is offered, the tools by name."""
        secrets = ""
        if STORE_SECRET in self.entries:
            secrets = "\n".join([CREDENTIALS, *(waiting_line(name, keys, self._lists(name))
                                                 for name, keys in self.waiting.items())])
        return instructions(system_prompt, self.by_name(loaded), secrets)

    def _lists(self, server: str) -> bool:
        """Whether this conversation has tools of the MCP server: one up before keeps them while it is down."""
        return any(name.startswith(f"{MCP_PREFIX}{server}__") for name in self.entries)

    def by_name(self, loaded: Container[str]) -> list[str]:
        """Tools the model sees only by name."""
        return sorted(n for n, e in self.entries.items() if n not in loaded and not e.system_use)

    def find(self, args: FindToolsArgs) -> tuple[list[dict[str, str]], list[str], int]:
        """Matches as {name, description} (the best, within FOUND_LIMIT and FOUND_CHARS), the names
        whose schemas this loads, and how many more matched."""
        words = [w.strip("'\"`.,;:()") for w in args.query.lower().split()]  # "'store_secret'." too
        words = [w for w in words if w]
        # a system tool stays out of listings, but one asked for by its name is found (the
        # credentials line tells the model to load store_secret so, without include_system)
        pool = [e for e in self.entries.values()
                if args.include_system or not e.system_use
                or args.mode == "search" and (e.name in words or e.name == "_".join(words))]  # "store secret"
        if words:
            scored = [(_score(e, words), e.name, e) for e in pool]
            pool = [e for score, _, e in sorted(scored, key=lambda s: (-s[0], s[1])) if score > 0]
        else:
            pool.sort(key=lambda e: e.name)
        found: list[dict[str, str]] = []
        chars = 0
        for e in pool[:FOUND_LIMIT]:
            chars += len(e.description)
            if found and chars > FOUND_CHARS:
                break
            found.append({"name": e.name, "description": e.description})
        load = [] if args.mode == "list" else [e.name for e in pool[:SEARCH_LIMIT]]
        return found, load, len(pool) - len(found)


def waiting_line(server: str, keys: tuple[str, ...], listed: bool) -> str:
    """What the model needs to heal an MCP server down for want of a secret: one never up lists no
    tools, so no failed call of theirs can name the key; one up before (`listed`) keeps its tools,
    whose calls fail till then."""
    which = f"the secret {keys[0]!r}" if len(keys) == 1 else "one of the secrets " + ", ".join(map(repr, keys))
    how = f"call {STORE_SECRET} with that key and tool '{MCP_PREFIX}{server}'"
    if listed:
        return (f"MCP server {server} is down until {which} is stored; its tools stay listed, but a call of one "
                f"fails till then: to use them, {how} first.")
    return (f"MCP server {server} is down until {which} is stored, and lists no tools till then: to use it, "
            f"{how}, then {FIND_TOOLS} again.")


# words that say nothing of a tool ("use" opens every description's When line): a query's
# "read a file" loaded every schema whose description held an "a"
STOP_WORDS = frozenset("a an and are as at be by can do for from how i in into is it me my of on or "
                       "the this to use using with".split())
WORD_RE = re.compile(r"[a-z0-9]+")
PREFIX_CHARS = 3  # a query word this long also matches the words it starts ("file" finds "files")


def _score(entry: Entry, words: list[str]) -> int:
    """Each query word scores when it is the tool's name; else each of its words ("SKILL.md" has two)
    when it is part of the name, or a word of the description (or starts one): whole words only, so
    "to" does not find "store" or "tools"."""
    name, text = entry.name.lower(), WORD_RE.findall(entry.description.lower())
    parts = name.split("_")
    return sum(10 if word == name else sum(
        3 if _matches(w, parts) or len(w) >= PREFIX_CHARS and w in name else 1 if _matches(w, text) else 0
        for w in WORD_RE.findall(word) if w not in STOP_WORDS) for word in words)


def _matches(word: str, words: list[str]) -> bool:
    return any(w == word or len(word) >= PREFIX_CHARS and w.startswith(word) for w in words)


def instructions(system_prompt: str, names: list[str], secrets: str = "") -> str:
    """The system prompt plus the per-turn list of tools the model knows only by name."""
    listing = ", ".join(names) if names else "none"
    tail = (f"Tools available by name only: {listing}. Call {FIND_TOOLS} to load a tool's schema "
            "before calling it; a call without a loaded schema only loads it.")
    parts = [system_prompt.rstrip(), secrets, tail]
    return "\n\n".join(part for part in parts if part.strip())
