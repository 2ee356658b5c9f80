"""README.md's Layout names every module, so a new colleague finds each one's job there."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def layout_entries() -> set[str]:
    text = (ROOT / "README.md").read_text()
    block = text.split("## Layout", 1)[1].split("```")[1]
    entries, package = set(), ""
    for line in block.splitlines():
        found = re.match(r"(\s*)(\S+)", line)
        if not found:
            continue
        indent, name = found.groups()
        if not indent:
            package = name if name.endswith("/") else ""
        elif package and name.endswith(".py"):
            entries.add(package + name)
    return entries


def test_every_module_is_in_the_readme_layout():
    listed = layout_entries()
    modules = {str(f.relative_to(ROOT)) for pkg in ("scvd", "scvctl") for f in (ROOT / pkg).rglob("*.py")
               if f.name not in ("__init__.py", "__main__.py") or f.parent.name == "tools"}
    missing = sorted(modules - listed)
    assert not missing, f"README.md's Layout does not list {missing}: add a line saying what each does"
    gone = sorted(listed - modules)
    assert not gone, f"README.md's Layout lists modules that do not exist: {gone}"
