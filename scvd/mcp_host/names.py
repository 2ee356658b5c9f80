"""Tool names as a host can take them: each one longer than the host's budget shortened, and mapped back.

A host puts its own prefix before a server's tool names (Claude Code: `mcp__scvd__`), and
the Anthropic API refuses a request whose tools hold a name over 64 characters: one such
name of scvd's (an MCP server's tool, `mcp__github__...`, up to 64 itself) failed every
request of the host's session. A name over the budget becomes its start, `_` and the first
hex digits of its sha256: the same name each time, so a host that lists again sees no
change; more digits where two would meet. Data only: the bridge lists and calls through it.

A host may call before it lists (Claude Code keeps an earlier session's list): until a list
of this session, and for a name shaped as a shortened one that the last did not give, a name
is `unmapped`, and the bridge maps the session's current tools with `listed`, which gives
the names any list of them would. Text scvd writes about tools (an unknown tool's closest
names, the tool a credential_missing error tells store_secret of, a system tool's result such as
store_secret's `next`) names them as the host does: `host_text` (an approval form put to the host:
`shown`, scvd's name below it); and a system tool's argument that
is a name the host got shortened (store_secret's `tool`, as that error gave it) stands for the
tool: `scvd_arguments`. System tools only (`system_use`, as tools.list flags them): any other
tool's arguments and results are data (a file written or read, a server's answer) that may hold
such a name and mean those very characters.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Iterable

HASH_DIGITS = 8  # of sha256, at least: two names of one server still differ past their shared start
SHORTENED_END = re.compile(rf"_[0-9a-f]{{{HASH_DIGITS},}}$")
WORD = re.compile(r"\w+")  # a tool name in scvd's text: a-z, 0-9 and _, set off by quotes, commas, spaces


class HostNames:
    """The names of the last tools/list as the host got them, and the scvd name behind each shortened one."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.real: dict[str, str] = {}  # shortened name -> scvd's
        self.shown: dict[str, str] = {}  # scvd's name -> shortened
        self.system: frozenset[str] = frozenset()  # the listed tools whose arguments and results name tools
        self.mapped = False  # a list of this session made: `real` and `shown` hold its names

    def listed(self, names: list[str], system: Iterable[str] = ()) -> list[str]:
        """`names` as the host is to see them, in their order; remembered for `scvd_name`. `system`:
        the system tools among them (their words name tools: `scvd_arguments`, `speaks`)."""
        taken = {name for name in names if len(name) <= self.budget}  # kept as they are
        real: dict[str, str] = {}
        shown = []
        for name in names:
            if len(name) > self.budget:
                short = self._shortened(name, taken)
                taken.add(short)
                real[short] = name
                name = short
            shown.append(name)
        self.real, self.shown = real, {name: short for short, name in real.items()}
        self.system, self.mapped = frozenset(system), True
        return shown

    def scvd_name(self, name: Any) -> Any:
        """The tool a host's name stands for (anything else, a name not listed so, as it came)."""
        return self.real.get(name, name) if isinstance(name, str) else name

    def speaks(self, tool: str) -> bool:
        """`tool` (scvd's name) is a system tool: its result is scvd's words, naming tools as scvd does."""
        return tool in self.system

    def scvd_arguments(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """`arguments` of a call of `tool` (scvd's name): a system tool's with each one that is a name
        the host got shortened as scvd's name of that tool; any other tool's as they came."""
        if tool not in self.system or not any(isinstance(v, str) and v in self.real for v in arguments.values()):
            return arguments
        return {k: self.real.get(v, v) if isinstance(v, str) else v for k, v in arguments.items()}

    def unmapped(self, name: Any) -> bool:
        """The session's tools are to be mapped before `name` is looked up: no list of this session was
        made (the host's may be an earlier session's; an unknown tool's closest names are told by its
        names too), or `name` is shaped as a shortened one (the budget's length, ending in `_` and hex
        digits) that the last list did not give."""
        return not self.mapped or (isinstance(name, str) and len(name) == self.budget and name not in self.real
                                   and SHORTENED_END.search(name) is not None)

    def host_text(self, text: str) -> str:
        """`text` with each scvd name the host got shortened written as the host got it."""
        if not any(name in text for name in self.shown):  # most texts, and a long one, at a substring search each
            return text
        return WORD.sub(lambda word: self.shown.get(word[0], word[0]), text)

    def _shortened(self, name: str, taken: set[str]) -> str:
        digest = hashlib.sha256(name.encode()).hexdigest()
        for digits in range(HASH_DIGITS, self.budget):  # the budget is at least MIN_TOOL_NAME
            short = f"{name[:self.budget - digits - 1]}_{digest[:digits]}"
            if short not in taken:
                return short
        raise AssertionError(f"no name of {self.budget} characters left for {name!r}")  # 16**8 clashes first
