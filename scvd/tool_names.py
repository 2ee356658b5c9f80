"""The tool names an unknown-tool answer lists: a call's on the socket and a chat model's alike.

Nothing here knows a tool by name: only the `FAMILY__GROUP__TOOL` shape of a namespaced
family's names (an MCP server's).

Rules:
- The names closest to the one asked (difflib, at most CLOSE_SHOWN) come first, so a typo's fix
  is in front however many tools there are.
- Then the names in the order given, a family's folded into one `FAMILY__GROUP__* (N tools)`: at
  most NAMES_SHOWN of them within SHOWN_CHARS, then how many more. One MCP server of 4,096 tools
  made a typo's answer 250 KB, read whole into a host model's context.
- difflib's ratio over thousands of like names held the loop 0.5 s: it compares CLOSE_POOL names
  at most, those next to the asked one in sort order and in the order of their ends (a typo keeps
  one or the other). A name asked is echoed cut to ASKED_CHARS (a client's is of any length).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

NAMES_SHOWN = 40  # folded names listed (a family's counts as one)
SHOWN_CHARS = 2000  # of the listed names together: registry names are ASCII, so these are bytes too
CLOSE_SHOWN = 3
CLOSE_POOL = 128  # names difflib compares with the asked one: a quarter from each side in either order
ASKED_CHARS = 100  # a registry name has at most 64


def unknown(asked: str, names: Iterable[str], where: str = "") -> str:
    """'no tool named ASKED{where}; closest: ...; tools: ...' for a call of a name not among `names`."""
    names = list(names)
    shown = repr(asked[:ASKED_CHARS]) + ("..." if len(asked) > ASKED_CHARS else "")
    near = closest(asked, names)
    close = f"; closest: {', '.join(near)}" if near else ""
    return f"no tool named {shown}{where}{close}; tools: {folded(names)}"


def folded(names: Iterable[str]) -> str:
    """`names` in their order, a family's as one `FAMILY__GROUP__* (N tools)`, cut to NAMES_SHOWN
    and SHOWN_CHARS with how many more; "none" for none."""
    counts: dict[str, int] = {}
    for name in names:
        key = _family(name)
        counts[key] = counts.get(key, 0) + 1
    shown: list[str] = []
    size = 0
    for key, n in counts.items():
        item = f"{key}* ({n} tools)" if key.endswith("__") else key
        size += len(item) + 2
        if len(shown) == NAMES_SHOWN or size > SHOWN_CHARS:
            break
        shown.append(item)
    rest = f" and {len(counts) - len(shown)} more" if len(counts) > len(shown) else ""
    return (", ".join(shown) or "none") + rest


def closest(asked: str, names: list[str]) -> list[str]:
    """At most CLOSE_SHOWN of `names` like `asked`, the likest first (see the module's rules)."""
    if not asked or not names or len(asked) > 3 * max(map(len, names)):  # too long to be like any (ratio < 0.6)
        return []
    # a typo keeps either the name's start or its end: its neighbours in both sort orders
    by_end = [n[::-1] for n in _near(sorted(n[::-1] for n in names), asked[::-1])]
    pool = dict.fromkeys(_near(sorted(names), asked) + by_end)
    import difflib  # here: only a call of an unknown tool pays its import (tests/test_idle_imports.py)

    return difflib.get_close_matches(asked, list(pool), CLOSE_SHOWN)


def _family(name: str) -> str:
    """`FAMILY__GROUP__` for a namespaced name, else the name itself."""
    parts = name.split("__", 2)
    return f"{parts[0]}__{parts[1]}__" if len(parts) == 3 else name


def _near(ordered: list[str], asked: str) -> list[str]:
    """The CLOSE_POOL // 4 names of `ordered` on each side of where `asked` sorts."""
    at = bisect.bisect_left(ordered, asked)
    side = CLOSE_POOL // 4
    return ordered[max(0, at - side):at + side]
